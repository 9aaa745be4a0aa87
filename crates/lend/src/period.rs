//! One harvester period, in one order, for the daemon and the simulator.
//!
//! BlockFlex's harvester (OSDI'22 §4.3–4.5) wakes once per period. After its
//! policies have learned from every home's usage ([`crate::LendPolicy::observe`]),
//! it acts, and the order of its acts is part of the policy: a migration that
//! finished frees its source before early reclamation looks at that home; a
//! home that needs its flash back gets it before the refresh extends anything
//! it lent; expired gSSDs leave the pool before idle flash is lent again, so a
//! home never lends twice; harvest tenants ask last, and find all of it. The daemon's harvester carries the acts out on real
//! flash and the fleet simulator on modelled pools, but both run them through
//! [`run_period`], so the order is written once. Each side implements
//! [`PeriodSteps`]; a step a side has nothing to do for (the simulator's
//! migrations are instantaneous) says so in its implementation.

/// The acts of one period, as one side carries them out. [`run_period`] calls
/// them in the order of the methods here.
pub trait PeriodSteps {
    /// What a failed act reports; the period stops at the first.
    type Error;

    /// Migrations whose copy completed hand their volume's range to the new
    /// gSSD, and the old gSSD goes home.
    ///
    /// # Errors
    /// When the hand-over fails.
    fn finish_migrations(&mut self) -> Result<(), Self::Error>;

    /// Evicted volumes whose grace time is over lose their gSSDs.
    ///
    /// # Errors
    /// When a gSSD cannot be taken back.
    fn due_evictions(&mut self) -> Result<(), Self::Error>;

    /// Homes whose own usage now needs what they lent take it back early
    /// (their tenants migrate or are evicted) and cool down.
    ///
    /// # Errors
    /// When a gSSD cannot be taken back.
    fn reclaim_where_needed(&mut self) -> Result<(), Self::Error>;

    /// Whether the refresh timer fires now (every `refresh_interval_s`);
    /// asking consumes the firing.
    fn refresh_due(&mut self) -> bool;

    /// The refresh: the policies give every pooled gSSD its new expiry
    /// ([`crate::expiry_updates`]); expired unassigned gSSDs leave the pool and
    /// expired assigned ones are reclaimed early.
    ///
    /// # Errors
    /// When a gSSD cannot be taken back.
    fn refresh(&mut self) -> Result<(), Self::Error>;

    /// Idle homes and unsold channels lend what the policies offer
    /// ([`crate::plan_lend`], [`crate::plan_unsold`]).
    ///
    /// # Errors
    /// When a gSSD cannot be made.
    fn lend_idle(&mut self) -> Result<(), Self::Error>;

    /// Harvest tenants whose demand predictors say so ask for flash, or give
    /// back what they asked for ([`crate::plan_demand`]); last, so that they
    /// find what this period lent.
    ///
    /// # Errors
    /// When a volume cannot be made or released for a reason other than an
    /// empty pool.
    fn serve_demand(&mut self) -> Result<(), Self::Error>;
}

/// Runs one period's acts in order: finish migrations, due evictions, early
/// reclamation, the refresh when its timer fires, lending, harvest tenants'
/// own demand.
///
/// # Errors
/// The first act's error; the acts after it do not run (the next period
/// starts again from the first).
pub fn run_period<S: PeriodSteps + ?Sized>(s: &mut S) -> Result<(), S::Error> {
    s.finish_migrations()?;
    s.due_evictions()?;
    s.reclaim_where_needed()?;
    if s.refresh_due() {
        s.refresh()?;
    }
    s.lend_idle()?;
    s.serve_demand()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the acts called; fails at `fail`; fires the refresh on `due`.
    struct Log {
        acts: Vec<&'static str>,
        due: bool,
        fail: Option<&'static str>,
    }

    impl Log {
        fn act(&mut self, a: &'static str) -> Result<(), String> {
            self.acts.push(a);
            if self.fail == Some(a) {
                Err(format!("{a} failed"))
            } else {
                Ok(())
            }
        }
    }

    impl PeriodSteps for Log {
        type Error = String;
        fn finish_migrations(&mut self) -> Result<(), String> {
            self.act("migrations")
        }
        fn due_evictions(&mut self) -> Result<(), String> {
            self.act("evictions")
        }
        fn reclaim_where_needed(&mut self) -> Result<(), String> {
            self.act("reclaim")
        }
        fn refresh_due(&mut self) -> bool {
            std::mem::take(&mut self.due)
        }
        fn refresh(&mut self) -> Result<(), String> {
            self.act("refresh")
        }
        fn lend_idle(&mut self) -> Result<(), String> {
            self.act("lend")
        }
        fn serve_demand(&mut self) -> Result<(), String> {
            self.act("demand")
        }
    }

    fn run(due: bool, fail: Option<&'static str>) -> (Vec<&'static str>, Result<(), String>) {
        let mut l = Log {
            acts: Vec::new(),
            due,
            fail,
        };
        let r = run_period(&mut l);
        (l.acts, r)
    }

    #[test]
    fn acts_run_in_order_and_the_refresh_only_when_due() {
        assert_eq!(
            run(true, None),
            (
                vec![
                    "migrations",
                    "evictions",
                    "reclaim",
                    "refresh",
                    "lend",
                    "demand"
                ],
                Ok(())
            )
        );
        assert_eq!(
            run(false, None),
            (
                vec!["migrations", "evictions", "reclaim", "lend", "demand"],
                Ok(())
            )
        );
    }

    #[test]
    fn a_failed_act_stops_the_period() {
        assert_eq!(
            run(true, Some("reclaim")),
            (
                vec!["migrations", "evictions", "reclaim"],
                Err("reclaim failed".into())
            )
        );
        assert_eq!(
            run(true, Some("refresh")).0,
            vec!["migrations", "evictions", "reclaim", "refresh"]
        );
    }
}
