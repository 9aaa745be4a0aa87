//! Harvest tenants that ask for flash on their own (`[harvest] auto_request`,
//! BlockFlex §4.4): each harvest tenant's vSSD is sampled every period like a
//! home, its demand predictors (`lend::DemandPredictors`) learn in the first
//! half of the period with no host lock held, and in the second half
//! `lend::plan_demand` decides whether it asks for a harvest volume or gives
//! the one it asked for back. The volume is an ordinary harvest volume the
//! tenant owns, named `<tenant>-auto-<seconds>`: a manual request stays
//! possible beside it, and a restart finds it by its name.

use std::collections::BTreeMap;

use clock::{Nanos, SEC};
use lend::{plan_demand, DemandAct, DemandPredictors, DemandRule, TenantNow};
use tracing::info;

use super::api::HarvestEventKind;
use super::policy::Sampler;
use super::{DeviceView, HarvestHost, HarvestRequest, Harvester, TenantSource};
use crate::config::HarvestSettings;
use crate::{format_size, ByteSize, ControlError, Result};

/// The demand side's state: predictors, the counters they need for rates,
/// and what was tried.
pub(super) struct DemandRt {
    sampler: Sampler,
    predictors: DemandPredictors,
    /// A tenant whose request the pool could not serve asks again from here on.
    retry_after: BTreeMap<String, Nanos>,
    /// Requests each auto volume had served at the previous period: one that
    /// served none since is idle and may go.
    served: BTreeMap<String, u64>,
}

impl DemandRt {
    pub(super) fn new(s: &HarvestSettings) -> Self {
        Self {
            sampler: Sampler::default(),
            predictors: DemandPredictors::new(s.predictor.clone(), s.window_s.saturating_mul(SEC)),
            retry_after: BTreeMap::new(),
            served: BTreeMap::new(),
        }
    }
}

/// The prefix of the volumes `tenant`'s predictor asks for: the tenant's
/// name, cut to 40 bytes so that a name with the seconds after it stays within
/// the 64 characters a name may have (the volume's tenant field, not its
/// name, ties it to the tenant). vSSD names are ASCII (`valid_name`), so any
/// cut is a character boundary.
fn auto_prefix(tenant: &str) -> String {
    format!("{}-auto-", &tenant[..tenant.len().min(40)])
}

/// A name for a volume `tenant`'s predictor asks for at `now`.
fn auto_name(tenant: &str, now: Nanos) -> String {
    format!("{}{}", auto_prefix(tenant), now / SEC)
}

impl Harvester {
    /// The first half of a period, demand side: samples every harvest
    /// tenant's vSSD and lets its predictors learn. No lock that I/O, NBD
    /// handshakes or API reads take. Nothing unless `auto_request`.
    pub(super) fn observe_demand(
        &self,
        host: &dyn HarvestHost,
        devices: &[DeviceView],
        now: Nanos,
    ) -> Result<()> {
        if !self.settings.auto_request {
            return Ok(());
        }
        let tenants = host.harvest_tenants();
        let mut rt = self.demand.lock();
        let samples = rt.sampler.sample(&tenants, devices, now);
        rt.predictors.observe(now, &samples).map_err(|e| {
            let lend::PolicyError::Predictor { home, source } = e;
            ControlError::Predictor {
                vssd: tenants
                    .iter()
                    .find(|t| t.id == home)
                    .map_or_else(|| format!("vSSD id {home}"), |t| t.name.clone()),
                message: source.to_string(),
            }
        })?;
        let shown = super::prediction_infos(rt.predictors.predictions(), &tenants);
        drop(rt);
        self.lock().demand = shown;
        Ok(())
    }

    /// The last act of a period: every harvest tenant's plan, carried out. A
    /// request the pool cannot serve is retried after a granule (the
    /// `exception` event says why); a volume goes back only when it served no
    /// request for a whole period.
    pub(super) fn serve_demand(&self, host: &dyn HarvestHost) -> Result<()> {
        if !self.settings.auto_request {
            return Ok(());
        }
        let now = self.clock.now();
        let granule = self.settings.granule_s.saturating_mul(SEC);
        let rule = DemandRule {
            request_at: self.settings.auto_request_at,
            share: self.settings.auto_request_share,
        };
        for t in host.harvest_tenants() {
            let prefix = auto_prefix(&t.name);
            // The volume it asked for, its end and the requests it served.
            let held = {
                let st = self.lock();
                st.volumes
                    .values()
                    .find(|v| v.rec.tenant == t.name && v.rec.name.starts_with(&prefix))
                    .map(|v| {
                        let io = v.io.snapshot();
                        (v.rec.name.clone(), v.rec.until, io.reads + io.writes)
                    })
            };
            let (prediction, act) = {
                let rt = self.demand.lock();
                let prediction = rt.predictors.prediction(t.id);
                let now_t = TenantNow {
                    capacity_bytes: t.capacity_bytes,
                    channels: t.channels().len() as u32,
                    held_until: held.as_ref().map(|h| h.1),
                };
                (
                    prediction,
                    plan_demand(prediction, now_t, rule, now, granule),
                )
            };
            let why = prediction.map_or_else(String::new, |(p, l)| {
                format!(
                    "capacity {}/{l}, bandwidth {}/{l}, for {} s",
                    p.capacity,
                    p.bandwidth,
                    p.duration / SEC
                )
            });
            match act {
                DemandAct::Hold => {}
                DemandAct::Request {
                    capacity_bytes,
                    bandwidth,
                    lasts,
                } => {
                    if self
                        .demand
                        .lock()
                        .retry_after
                        .get(&t.name)
                        .is_some_and(|&at| now < at)
                    {
                        continue;
                    }
                    let req = HarvestRequest {
                        name: auto_name(&t.name, now),
                        tenant: t.name.clone(),
                        capacity: ByteSize(capacity_bytes),
                        bandwidth,
                        duration_s: Some(lasts.div_ceil(SEC)),
                    };
                    match self.create_volume(host, &req, &TenantSource::Local) {
                        Ok(v) => {
                            self.demand.lock().retry_after.remove(&t.name);
                            let detail = format!(
                                "harvest tenant {}'s demand predictor ({why}) asked for {} on {bandwidth} channel(s) for {} s: volume {}",
                                t.name,
                                format_size(capacity_bytes),
                                lasts.div_ceil(SEC),
                                v.name
                            );
                            info!("{detail}");
                            self.emit(HarvestEventKind::Demand, None, Some(&v.name), None, detail);
                        }
                        Err(ControlError::UnderHarvest { .. }) => {
                            self.demand
                                .lock()
                                .retry_after
                                .insert(t.name.clone(), now.saturating_add(granule));
                        }
                        Err(e) => return Err(e),
                    }
                }
                DemandAct::Release => {
                    let Some((name, _, served)) = held else {
                        continue;
                    };
                    let before = self.demand.lock().served.insert(name.clone(), served);
                    if before != Some(served) {
                        // It served requests since the last look: not yet.
                        continue;
                    }
                    self.release_volume(host, &name)?;
                    self.demand.lock().served.remove(&name);
                    let detail = format!(
                        "harvest tenant {}'s demand predictor ({why}) gave volume {name} back: the demand passed and its time is over",
                        t.name
                    );
                    info!("{detail}");
                    self.emit(HarvestEventKind::Demand, None, Some(&name), None, detail);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_names_are_valid_and_keep_the_tenant_when_it_fits() {
        assert_eq!(auto_name("hv", 125 * SEC), "hv-auto-125");
        let long = "t".repeat(64);
        let n = auto_name(&long, 7 * SEC);
        assert!(n.len() <= 64, "{n}");
        assert!(crate::valid_name(&n), "{n}");
        assert!(n.ends_with("-auto-7"));
        assert!(n.starts_with(&auto_prefix(&long)));
    }
}
