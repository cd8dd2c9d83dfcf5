//! The slots of the `probes` array, and the links that run them. A slot is given to another
//! configuration only once no open link runs the one it held: a link being closed (off the
//! event path, in the detach pool: tens of milliseconds, more under load) still fires until
//! the kernel has unregistered it, and a slot rewritten under it made it run the new
//! configuration at its old site. Under spec churn that recorded, for instance, a return's
//! result as a call's argument. Each reuse also gives the slot a new generation, so a
//! configuration's handle (slot and generation) names it alone, in the records too.

use super::perf::PerfLink;
use crate::abi::{cfg_handle, cfg_slot};
use crate::engine::CfgId;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One attached set of uprobes; dropping it detaches them, then counts its slots free of it.
#[derive(Debug)]
pub struct Link {
    fd: Option<LinkFd>,
    runs: Option<(Arc<OpenLinks>, Vec<u32>)>,
}

/// Held only to be closed when dropped.
#[derive(Debug)]
#[allow(dead_code)]
enum LinkFd {
    /// A uprobe_multi link: many sites, one process.
    Multi(OwnedFd),
    /// A perf-event uprobe (kernels without uprobe_multi).
    Perf(PerfLink),
}

impl Link {
    /// A uprobe_multi link that runs no configuration (the start-up self-test's).
    pub(super) fn multi_unaccounted(fd: OwnedFd) -> Self {
        Self {
            fd: Some(LinkFd::Multi(fd)),
            runs: None,
        }
    }

    /// A perf-event link that runs no configuration (the start-up self-test's).
    pub(super) fn perf_unaccounted(l: PerfLink) -> Self {
        Self {
            fd: Some(LinkFd::Perf(l)),
            runs: None,
        }
    }
}

impl Link {
    /// Said when it is handed over to be detached (perf.rs, sites.rs).
    pub(super) fn retire(&self) {
        if let Some(LinkFd::Perf(p)) = &self.fd {
            p.retire();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Closing returns once the kernel has unregistered the uprobes and waited for the
        // programs running them: only then are their slots free of this link.
        drop(self.fd.take());
        if let Some((open, slots)) = &self.runs {
            for s in slots {
                open.0[*s as usize].fetch_sub(1, Ordering::Release);
            }
        }
    }
}

/// The slots: free ones in the order they were freed, each one's generation, and the
/// links open on each.
#[derive(Debug)]
pub(super) struct Slots {
    free: VecDeque<u32>,
    generations: Vec<u16>,
    open: Arc<OpenLinks>,
}

impl Slots {
    pub(super) fn new(n: usize) -> Self {
        Self {
            free: (0..n as u32).collect(),
            generations: vec![0; n],
            open: OpenLinks::new(n),
        }
    }

    /// The handle of a configuration to store in the slot freed longest ago that no open
    /// link runs any more; `None` when there is none.
    pub(super) fn take(&mut self) -> Option<CfgId> {
        for _ in 0..self.free.len() {
            let slot = self.free.pop_front()?;
            if !self.open.in_use(slot) {
                let g = &mut self.generations[slot as usize];
                *g = g.wrapping_add(1);
                return Some(cfg_handle(slot, *g));
            }
            tracing::debug!("probe slot {slot} skipped: a link that ran it is still being closed");
            self.free.push_back(slot);
        }
        None
    }

    /// Configuration `handle` was not stored after all: its slot is the next one taken.
    pub(super) fn untake(&mut self, handle: CfgId) {
        self.free.push_front(cfg_slot(handle));
    }

    /// Configuration `handle` is freed: its slot is taken again last.
    pub(super) fn free(&mut self, handle: CfgId) {
        self.free.push_back(cfg_slot(handle));
    }

    /// Where the links are counted.
    pub(super) fn links(&self) -> &Arc<OpenLinks> {
        &self.open
    }
}

/// How many open links run each slot's configuration.
#[derive(Debug)]
pub(super) struct OpenLinks(Box<[AtomicU32]>);

impl OpenLinks {
    pub(super) fn new(slots: usize) -> Arc<Self> {
        Arc::new(Self((0..slots).map(|_| AtomicU32::new(0)).collect()))
    }

    /// Whether a link that runs slot `slot`'s configuration is still open.
    pub(super) fn in_use(&self, slot: u32) -> bool {
        self.0
            .get(slot as usize)
            .is_some_and(|n| n.load(Ordering::Acquire) > 0)
    }

    fn link(self: &Arc<Self>, fd: LinkFd, cfgs: impl IntoIterator<Item = CfgId>) -> Link {
        let mut slots: Vec<u32> = cfgs.into_iter().map(cfg_slot).collect();
        slots.sort_unstable();
        slots.dedup();
        slots.retain(|s| (*s as usize) < self.0.len());
        for s in &slots {
            self.0[*s as usize].fetch_add(1, Ordering::AcqRel);
        }
        Link {
            fd: Some(fd),
            runs: Some((self.clone(), slots)),
        }
    }

    /// A uprobe_multi link whose sites run `cfgs`.
    pub(super) fn multi(
        self: &Arc<Self>,
        fd: OwnedFd,
        cfgs: impl IntoIterator<Item = CfgId>,
    ) -> Link {
        self.link(LinkFd::Multi(fd), cfgs)
    }

    /// A perf-event link whose site runs `cfg`.
    pub(super) fn perf(self: &Arc<Self>, l: PerfLink, cfg: CfgId) -> Link {
        self.link(LinkFd::Perf(l), [cfg])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn a_slot_is_in_use_until_every_link_that_runs_it_is_dropped() {
        let open = OpenLinks::new(8);
        let a = open.multi(fd(), [cfg_handle(3, 1), cfg_handle(3, 1), cfg_handle(5, 2)]);
        let b = open.multi(fd(), [cfg_handle(3, 1)]);
        assert!(open.in_use(3) && open.in_use(5) && !open.in_use(4));
        drop(a);
        assert!(open.in_use(3), "b still runs slot 3");
        assert!(!open.in_use(5));
        drop(b);
        assert!(!open.in_use(3));
        // Unaccounted links (the self-test's) and slots past the table count nowhere.
        let c = Link::multi_unaccounted(fd());
        let d = open.multi(fd(), [u32::MAX]);
        assert!((0..8).all(|s| !open.in_use(s)));
        drop((c, d));
    }

    #[test]
    fn a_freed_slot_is_given_again_only_once_its_links_are_closed_and_under_a_new_handle() {
        let mut slots = Slots::new(3);
        let a = slots.take().unwrap();
        let b = slots.take().unwrap();
        assert_eq!((cfg_slot(a), cfg_slot(b)), (0, 1));
        let link = slots.links().multi(fd(), [a]);
        slots.free(a);
        slots.free(b);
        // Slot 2 was never used; then 0 is skipped (its link is still open) for 1.
        assert_eq!(slots.take().map(cfg_slot), Some(2));
        let b2 = slots.take().unwrap();
        assert_eq!(cfg_slot(b2), 1);
        assert_ne!(
            b2, b,
            "a reused slot's configuration has a handle of its own"
        );
        assert_eq!(slots.take(), None, "slot 0 still runs under an open link");
        drop(link);
        let a2 = slots.take().unwrap();
        assert_eq!(cfg_slot(a2), 0);
        assert_ne!(a2, a);
        // A configuration not stored after all gives its slot back first.
        slots.free(a2);
        slots.free(b2);
        let c = slots.take().unwrap();
        slots.untake(c);
        assert_eq!(slots.take().map(cfg_slot), Some(cfg_slot(c)));
    }
}
