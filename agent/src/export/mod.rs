//! Where calls go: JSON lines or a table on stdout, and OTLP spans and metrics.

pub mod jsonl;
pub mod otlp;
pub mod summary;
pub mod table;

use crate::events::CallRecord;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// Output format on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Table,
    None,
}

/// Calls delivered per (spec, symbol).
pub type Delivered = HashMap<(Arc<str>, Arc<str>), u64>;

/// Calls delivered per (spec, symbol, pid), shared with whoever reports per container.
pub type DeliveredByPid = Arc<std::sync::Mutex<HashMap<(Arc<str>, Arc<str>, u32), u64>>>;

/// The export stage: every batch of calls goes to stdout and, if configured, OTLP.
pub struct Exporters {
    format: Format,
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    buf: Vec<u8>,
    table_header: bool,
    pub otlp: Option<otlp::OtlpExporter>,
    pub delivered: Delivered,
    pub delivered_by_pid: DeliveredByPid,
}

impl Exporters {
    pub fn new(
        format: Format,
        out: Box<dyn Write + Send>,
        otlp: Option<otlp::OtlpExporter>,
    ) -> Self {
        Self {
            format,
            out: std::io::BufWriter::with_capacity(256 << 10, out),
            buf: Vec::with_capacity(4096),
            table_header: false,
            otlp,
            delivered: HashMap::new(),
            delivered_by_pid: Default::default(),
        }
    }

    pub async fn export(&mut self, batch: &[CallRecord]) -> std::io::Result<()> {
        {
            let mut by_pid = self
                .delivered_by_pid
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for rec in batch {
                *by_pid
                    .entry((rec.probe.spec.clone(), rec.probe.symbol.clone(), rec.pid))
                    .or_default() += 1;
            }
        }
        for rec in batch {
            *self
                .delivered
                .entry((rec.probe.spec.clone(), rec.probe.symbol.clone()))
                .or_default() += 1;
            self.buf.clear();
            match self.format {
                Format::Jsonl => jsonl::write_record(rec, &mut self.buf),
                Format::Table => {
                    if !self.table_header {
                        table::write_header(&mut self.buf);
                        self.table_header = true;
                    }
                    table::write_row(rec, &mut self.buf)
                }
                Format::None => {}
            }
            self.out.write_all(&self.buf)?;
        }
        // A batch is a natural flush point: tailing readers see calls within a poll period.
        self.out.flush()?;
        if let Some(o) = &mut self.otlp {
            o.record(batch);
            o.maybe_flush().await;
        }
        Ok(())
    }

    pub async fn finish(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        if let Some(o) = &mut self.otlp {
            o.shutdown().await;
        }
        Ok(())
    }
}
