//! USDT probes (SystemTap SDT, `sys/sdt.h`): the `.note.stapsdt` notes of an executable or
//! shared library, each one site of a probe `provider:name` with its argument specs and its
//! semaphore.
//!
//! A note (type NT_STAPSDT = 3, owner "stapsdt") holds three 8-byte addresses (the probe's
//! pc, the link-time address of the `.stapsdt.base` section, the semaphore or 0) and then
//! three NUL-terminated strings: provider, name, arguments. Prelink moves sections without
//! rewriting notes: the difference between `.stapsdt.base`'s actual address and the
//! note's base is added to the pc and the semaphore (0 everywhere else). A uprobe and the
//! kernel's reference counter both take file offsets: the pc and the semaphore are turned
//! into ones through the PT_LOAD segment holding them, as libbpf does.
//!
//! A probe the compiler copied (inlined) has several notes with the same provider:name,
//! each with its own pc and often its own argument registers.

pub mod args;
mod check;
pub(crate) mod error;
pub(crate) mod plan;

pub use error::{NoteProblem, SiteProblem, StapsdtError};

use super::elf::{self, ElfFile};
use super::unwind::FunctionStarts;

const NT_STAPSDT: u32 = 3;

/// One site of a USDT probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtSite {
    /// Virtual address of the probe's instruction (a NOP), prelink-adjusted.
    pub pc: u64,
    /// File offset of `pc`: where the uprobe goes. 0 when `problem` is set.
    pub offset: u64,
    /// Virtual address of the semaphore (a 2-byte counter), 0 when there is none.
    pub semaphore: u64,
    /// File offset of the semaphore (the kernel's `ref_ctr_offset`), 0 when there is none.
    pub semaphore_offset: u64,
    /// The argument specs, e.g. `8@%rbp 8@%r12 -4@%eax`; empty for none.
    pub args: String,
    /// Why this site cannot be probed (its pc or semaphore is outside the segments it
    /// must be in, or its pc is not the start of the `nop` sys/sdt.h emits), if it cannot.
    pub problem: Option<SiteProblem>,
}

/// A USDT probe: every site with its provider:name, in note order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtProbe {
    pub provider: String,
    pub name: String,
    pub sites: Vec<UsdtSite>,
}

impl UsdtProbe {
    /// `provider:name`.
    pub fn point(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }
}

fn cstr(d: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = d.iter().position(|&b| b == 0)?;
    Some((&d[..end], &d[end + 1..]))
}

/// Reads the USDT probes of `elf`; an empty list when it has no `.note.stapsdt`. A section
/// that is not a well-formed list of notes, or a stapsdt note whose descriptor is not
/// three addresses and three NUL-terminated strings, is malformed: refused with what is
/// wrong (nothing in it can be trusted to be what sys/sdt.h wrote).
pub(crate) fn read_probes(elf: &ElfFile) -> Result<Vec<UsdtProbe>, StapsdtError> {
    let Some(sec) = elf.note_section(b".note.stapsdt") else {
        return Ok(Vec::new());
    };
    let data = elf
        .section_data(sec)
        .ok_or(StapsdtError::SectionPastEnd { size: sec.size })?;
    let notes = elf::notes_checked(data)?;
    let actual_base = elf.section(b".stapsdt.base").map(|s| s.addr);
    let starts = std::cell::OnceCell::new();
    let mut probes: Vec<UsdtProbe> = Vec::new();
    for (i, (at, note)) in notes.into_iter().enumerate() {
        if note.owner != b"stapsdt" || note.kind != NT_STAPSDT {
            continue;
        }
        let bad = |problem| StapsdtError::Note {
            index: i,
            offset: at,
            problem,
        };
        let d = note.desc;
        let (Some(pc), Some(base), Some(sema)) =
            (elf::u64_at(d, 0), elf::u64_at(d, 8), elf::u64_at(d, 16))
        else {
            return Err(bad(NoteProblem::ShortDescriptor { len: d.len() }));
        };
        let Some((provider, rest)) = d.get(24..).and_then(cstr) else {
            return Err(bad(NoteProblem::ProviderUnterminated));
        };
        let Some((name, rest)) = cstr(rest) else {
            return Err(bad(NoteProblem::NameUnterminated));
        };
        if provider.is_empty() || name.is_empty() {
            return Err(bad(NoteProblem::EmptyName));
        }
        let args = cstr(rest).map_or(rest, |(a, _)| a);
        // libbpf treats an argument string starting with ':' (an old sdt.h) as none.
        let args = if args.first() == Some(&b':') {
            &[][..]
        } else {
            args
        };
        let adjust = match actual_base {
            Some(actual) if base != 0 => actual.wrapping_sub(base),
            _ => 0,
        };
        let mut site = site(elf, pc.wrapping_add(adjust), sema, adjust, args);
        if site.problem.is_none() {
            let starts = starts.get_or_init(|| FunctionStarts::of(elf));
            site.problem = check::probe_instruction(elf, starts, site.pc).err();
        }
        let (provider, name) = (
            String::from_utf8_lossy(provider).into_owned(),
            String::from_utf8_lossy(name).into_owned(),
        );
        match probes
            .iter_mut()
            .find(|p| p.provider == provider && p.name == name)
        {
            Some(p) => p.sites.push(site),
            None => probes.push(UsdtProbe {
                provider,
                name,
                sites: vec![site],
            }),
        }
    }
    Ok(probes)
}

fn site(elf: &ElfFile, pc: u64, sema: u64, adjust: u64, args: &[u8]) -> UsdtSite {
    let mut s = UsdtSite {
        pc,
        offset: 0,
        semaphore: 0,
        semaphore_offset: 0,
        args: String::from_utf8_lossy(args).trim().to_string(),
        problem: None,
    };
    match elf.mem_file_offset(pc) {
        Some((off, true)) => s.offset = off,
        Some((_, false)) => s.problem = Some(SiteProblem::PcNotExecutable { pc }),
        None => s.problem = Some(SiteProblem::PcUnmapped { pc }),
    }
    if sema != 0 {
        let semaphore = sema.wrapping_add(adjust);
        s.semaphore = semaphore;
        match elf.mem_file_offset(semaphore) {
            Some((off, false)) => s.semaphore_offset = off,
            Some((_, true)) => s.problem = Some(SiteProblem::SemaphoreExecutable { semaphore }),
            None => s.problem = Some(SiteProblem::SemaphoreUnmapped { semaphore }),
        }
    }
    s
}
