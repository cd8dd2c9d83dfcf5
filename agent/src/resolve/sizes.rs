//! The limits every capture list of a plan must fit: one BPF configuration (at most
//! `GP_MAX_CAPTURES` captures) and one event (each capture starts inside the BPF program's
//! cursor bound and ends inside its scratch buffer). The dispatcher checks every plan; the
//! Go planner checks before it adds its hidden captures, to drop the optional one first.

use crate::abi::{self, GP_DATA_LIMIT, GP_MAX_CAPTURES, GP_MAX_VALUE};
use crate::plan::CapturePlan;
use crate::resolve::error::PlanError;

/// Checks that every capture list fits one BPF configuration and event.
pub(crate) fn check_sizes<'a>(
    symbol: &str,
    lists: impl IntoIterator<Item = &'a [CapturePlan]>,
) -> Result<(), PlanError> {
    for list in lists {
        if list.len() > GP_MAX_CAPTURES {
            return Err(PlanError::TooManyCaptures {
                symbol: symbol.to_string(),
                name: list[GP_MAX_CAPTURES].name.clone(),
                max: GP_MAX_CAPTURES,
            });
        }
        // Every capture must start inside the BPF cursor bound and end inside the
        // scratch buffer (see gprobe.h and GpCapture::max_record).
        let mut start = std::mem::size_of::<abi::GpEvent>();
        for c in list.iter() {
            let bytes = c.bpf.max_record();
            if start >= GP_DATA_LIMIT || bytes > GP_MAX_VALUE {
                return Err(PlanError::TooLarge {
                    symbol: symbol.to_string(),
                    bytes: start + bytes,
                    limit: GP_DATA_LIMIT,
                });
            }
            start += bytes;
        }
    }
    Ok(())
}
