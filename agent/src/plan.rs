//! The probe plan: which probes to insert. Part of every cache key.

/// What the probes measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProbeMode {
    /// Entry/exit probes that call the host, which reads a clock: exact calls and times.
    #[default]
    Time,
    /// Deterministic cost: every basic block adds its static instruction count to a local,
    /// which goes into the function's calling-context node when it returns. No host call:
    /// calls and contexts are counted inline (see [`crate::ContextArena`]).
    Cost,
    /// Low overhead timing: calls and calling contexts counted inline as in
    /// [`ProbeMode::Cost`], and the current context kept in a memory cell that the host
    /// samples from another thread to attribute time. No host call per probe.
    Sample,
}

impl ProbeMode {
    /// Every mode, in the order benchmarks and help texts list them.
    pub const ALL: [ProbeMode; 3] = [ProbeMode::Time, ProbeMode::Cost, ProbeMode::Sample];

    /// The name used on the command line and in profiles.
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Time => "time",
            ProbeMode::Cost => "cost",
            ProbeMode::Sample => "sample",
        }
    }

    /// Whether calls are counted inline into a calling-context tree the module keeps
    /// (every mode but [`ProbeMode::Time`]).
    pub fn counts_inline(self) -> bool {
        !matches!(self, ProbeMode::Time)
    }
}

/// Which probes the agent inserts. Two plans with the same [`ProbePlan::digest`] produce
/// the same instrumented code.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProbePlan {
    /// What the probes measure.
    pub mode: ProbeMode,
    /// Report each call's site (`wprof.site(offset)` before every call instruction), so
    /// that edges can be split by call site.
    pub call_sites: bool,
}

impl ProbePlan {
    /// A digest of the plan, for cache keys.
    pub fn digest(&self) -> crate::Digest {
        let mut h = blake3::Hasher::new();
        h.update(b"wprof-agent plan v1\0");
        h.update(self.mode.name().as_bytes());
        h.update(&[u8::from(self.call_sites)]);
        *h.finalize().as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_stable_and_depends_on_mode() {
        let a = ProbePlan::default();
        assert_eq!(a.digest(), ProbePlan::default().digest());
        assert_ne!(a.digest(), [0u8; 32]);
        let cost = ProbePlan {
            mode: ProbeMode::Cost,
            call_sites: false,
        };
        let sites = ProbePlan {
            call_sites: true,
            ..ProbePlan::default()
        };
        assert_ne!(a.digest(), sites.digest());
        assert_ne!(a.digest(), cost.digest());
        let sample = ProbePlan {
            mode: ProbeMode::Sample,
            call_sites: false,
        };
        assert_ne!(sample.digest(), cost.digest());
    }
}
