//! What a probe's sites cost the traced program: the class of each site (emulated,
//! single-stepped, not measured) and what this kernel was measured to spend on a hit of
//! each class. The planners classify the sites (`resolve/sites.rs`, which also keeps the
//! measurement); the plan carries the classes, the attacher turns them into budgets.

/// What this kernel does with a uprobe on each kind of instruction gprobe may choose, and
/// what a hit costs (measured at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelSites {
    /// Conditional jumps (Jcc) are emulated.
    pub jcc: bool,
    /// `push reg` is emulated.
    pub push: bool,
    /// The one-byte `nop` (USDT sites) is emulated.
    pub nop: bool,
    /// A hit on an emulated site, in ns (the trap and a BPF program that returns at once).
    pub emulated_ns: u32,
    /// A hit on a single-stepped site, in ns.
    pub single_step_ns: u32,
}

/// How the kernel runs a probe's instruction when it traps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteClass {
    /// Emulated: about 1 µs per call.
    Emulated,
    /// Copied out of line and single-stepped: 10-20 µs per call.
    SingleStepped,
    /// Not known: the start-up measurement did not run (or failed).
    Unmeasured,
}

impl SiteClass {
    pub fn as_str(self) -> &'static str {
        match self {
            SiteClass::Emulated => "emulated",
            SiteClass::SingleStepped => "single-stepped",
            SiteClass::Unmeasured => "unmeasured",
        }
    }

    /// The measured cost of one hit, in ns (0 when unmeasured).
    pub fn cost_ns(self, k: Option<KernelSites>) -> u32 {
        match (self, k) {
            (SiteClass::Emulated, Some(k)) => k.emulated_ns,
            (SiteClass::SingleStepped, Some(k)) => k.single_step_ns,
            _ => 0,
        }
    }
}

/// How the kernel runs a probe's sites: its entry, and its return when it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteCosts {
    pub entry: SiteClass,
    /// Go: the RET instructions. C: the uretprobe's return (not measured: `Unmeasured`).
    pub ret: Option<SiteClass>,
}

impl Default for SiteCosts {
    fn default() -> Self {
        SiteCosts::UNMEASURED
    }
}

impl SiteCosts {
    /// Sites whose class is not known.
    pub const UNMEASURED: SiteCosts = SiteCosts {
        entry: SiteClass::Unmeasured,
        ret: None,
    };

    /// The expected cost of one call, in ns (0 when any part is unmeasured).
    pub fn call_ns(self, k: Option<KernelSites>) -> u32 {
        let ret = self.ret.map_or(0, |r| r.cost_ns(k));
        if self.entry == SiteClass::Unmeasured || self.ret == Some(SiteClass::Unmeasured) {
            return 0;
        }
        self.entry.cost_ns(k) + ret
    }
}
