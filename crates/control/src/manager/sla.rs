//! The host manager's side of Regulator: one scheduler per unit (the vSSDs on
//! exactly the same channels of a device), tenant SLAs, and measured unit curves.
//!
//! vSSDs on dedicated channels do not interfere (BlockFlex's isolation), so each
//! is a unit of its own and its scheduler only enforces its own curve. vSSDs that
//! share channels (explicit `channel_ids` with disjoint `blocks`) share a
//! scheduler, which also keeps their total within the unit's curve, measured for
//! that many channels. vSSDs whose channel sets overlap only partly are separate
//! units: the scheduler does not coordinate them (documented limitation).

use std::collections::BTreeMap;
use std::sync::Arc;

use sched::{Scheduler, TenantGate, TenantSla, TenantStats};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{channels_of, HostManager, State, UnitKey, VssdEntry};
use crate::measure::UnitCurve;
use crate::store::VssdRecord;
use crate::{ControlError, Result};

/// What `GET /v1/vssds/{name}/sla` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VssdSlaInfo {
    /// vSSD name.
    pub name: String,
    /// Its SLA (`None`: no curve of its own).
    pub sla: Option<TenantSla>,
    /// Device of its unit.
    pub device: String,
    /// Channels of its unit.
    pub unit_channels: Vec<u32>,
    /// Other vSSDs scheduled in the same unit.
    pub neighbours: Vec<String>,
    /// The unit's curve, if one was measured for this many channels.
    pub unit_curve: Option<UnitCurve>,
    /// Scheduler counters (`None` when the device does not schedule).
    pub stats: Option<TenantStats>,
}

impl HostManager {
    /// Rejects agreements the scheduler cannot run.
    pub(super) fn check_sla(name: &str, sla: &TenantSla) -> Result<()> {
        if sla.weight == 0 {
            return Err(ControlError::Invalid(format!(
                "vSSD {name:?}: SLA weight must be at least 1"
            )));
        }
        if let Some(c) = &sla.curve {
            if c.w_max() == 0.0 && c.points()[0].1 == 0.0 && !sla.burst {
                return Err(ControlError::Invalid(format!(
                    "vSSD {name:?}: an SLA curve of zero allows no I/O at all"
                )));
            }
        }
        Ok(())
    }

    fn unit_key(rec: &VssdRecord) -> UnitKey {
        (rec.device.clone(), channels_of(&rec.extents))
    }

    /// Registers `rec` with its unit's scheduler (creating the unit), if its
    /// device schedules. Never fails: a broken stored curve is logged and the
    /// unit runs without one.
    pub(super) fn attach_gate(&self, st: &mut State, rec: &VssdRecord) -> Option<TenantGate> {
        let settings = st.devices.iter().find(|d| d.rec.name == rec.device)?.sched;
        if !settings.enabled {
            return None;
        }
        let key = Self::unit_key(rec);
        let unit = match st.units.get(&key) {
            Some(u) => u.clone(),
            None => {
                let curve = match self.store.unit_curves(&rec.device) {
                    Ok(m) => m.get(&(key.1.len() as u32)).map(|u| u.curve.clone()),
                    Err(e) => {
                        warn!(device = %rec.device, error = %e, "cannot read unit curves; scheduling without one");
                        None
                    }
                };
                let s = match Scheduler::new(settings.sched_config(), curve, self.clock.clone()) {
                    Ok(s) => Arc::new(s),
                    Err(e) => {
                        warn!(device = %rec.device, error = %e, "scheduler disabled");
                        return None;
                    }
                };
                st.units.insert(key.clone(), s.clone());
                s
            }
        };
        let sla = rec.sla.clone().unwrap_or_default();
        // A leftover registration (a vSSD recreated under the same name) goes.
        let _ = unit.remove_tenant(&rec.name);
        match unit.add_tenant(&rec.name, sla) {
            Ok(g) => Some(g),
            Err(e) => {
                warn!(vssd = %rec.name, error = %e, "not scheduled");
                None
            }
        }
    }

    /// Unregisters a removed vSSD and drops its unit when it was the last.
    pub(super) fn detach_gate(st: &mut State, e: &VssdEntry) {
        let Some(g) = &e.gate else {
            return;
        };
        let _ = g.scheduler().remove_tenant(&e.rec.name);
        let key = Self::unit_key(&e.rec);
        if g.scheduler().report().is_empty() {
            st.units.remove(&key);
        }
    }

    /// Sets (or with `None` clears) a vSSD's SLA: recorded durably, then applied
    /// to its scheduler at once (requests already waiting keep their slots).
    pub fn set_vssd_sla(&self, name: &str, sla: Option<TenantSla>) -> Result<VssdSlaInfo> {
        self.set_vssd_sla_expecting(name, None, sla)
    }

    /// [`Self::set_vssd_sla`], but only if `name` is still the vSSD with record
    /// id `id` (see [`Self::delete_vssd_expecting`]).
    pub fn set_vssd_sla_expecting(
        &self,
        name: &str,
        id: Option<u32>,
        sla: Option<TenantSla>,
    ) -> Result<VssdSlaInfo> {
        if let Some(s) = &sla {
            Self::check_sla(name, s)?;
        }
        let _g = self.lifecycle.lock();
        self.expect_id(name, id)?;
        let mut rec = {
            let st = self.state.read();
            let e = st.active(name)?;
            e.rec.clone()
        };
        rec.sla = sla.clone();
        self.store.put_vssd(&rec)?;
        {
            let mut st = self.state.write();
            if let Some(e) = st.vssds.get_mut(name) {
                e.rec.sla = sla.clone();
                if let Some(g) = &e.gate {
                    g.scheduler()
                        .set_tenant(name, sla.clone().unwrap_or_default())
                        .map_err(|e| ControlError::Scheduler {
                            vssd: name.to_string(),
                            message: e.to_string(),
                        })?;
                }
            }
        }
        info!(vssd = %name, sla = ?sla, "SLA set");
        self.vssd_sla(name)
    }

    /// A vSSD's SLA, its unit and its scheduler counters.
    pub fn vssd_sla(&self, name: &str) -> Result<VssdSlaInfo> {
        let st = self.state.read();
        let e = st.active(name)?;
        let (device, unit_channels) = Self::unit_key(&e.rec);
        let neighbours = st
            .vssds
            .values()
            .filter(|o| {
                o.rec.name != name
                    && Self::unit_key(&o.rec) == (device.clone(), unit_channels.clone())
            })
            .map(|o| o.rec.name.clone())
            .collect();
        let unit_curve = self
            .store
            .unit_curves(&device)?
            .remove(&(unit_channels.len() as u32));
        let stats = e
            .gate
            .as_ref()
            .and_then(|g| g.scheduler().tenant(name).ok())
            .map(|r| r.stats);
        Ok(VssdSlaInfo {
            name: name.into(),
            sla: e.rec.sla.clone(),
            device,
            unit_channels,
            neighbours,
            unit_curve,
            stats,
        })
    }

    /// Records (or with `None` forgets) the measured curve of `device`'s units of
    /// `channels` channels, and applies it at once to every such unit.
    pub fn set_unit_curve(
        &self,
        device: &str,
        channels: u32,
        curve: Option<UnitCurve>,
    ) -> Result<()> {
        let _g = self.lifecycle.lock();
        {
            let st = self.state.read();
            let d = st.device(device)?;
            if channels == 0 || channels > d.rec.geometry.channels {
                return Err(ControlError::Invalid(format!(
                    "device {device} has {} channels; a unit of {channels} channels is impossible",
                    d.rec.geometry.channels
                )));
            }
        }
        match &curve {
            Some(c) => check_unit_curve(c)?,
            // Only this function writes unit curves, and it holds the
            // lifecycle lock: nothing can store one between here and the
            // removal.
            None if !self.store.unit_curves(device)?.contains_key(&channels) => {
                return Err(ControlError::NoSuchUnitCurve {
                    device: device.into(),
                    channels,
                });
            }
            None => {}
        }
        self.store
            .put_unit_curve(device, channels, curve.as_ref())?;
        let st = self.state.read();
        for ((dev, ch), unit) in &st.units {
            if dev == device && ch.len() as u32 == channels {
                unit.set_unit_curve(curve.as_ref().map(|c| c.curve.clone()));
            }
        }
        info!(device = %device, channels, set = curve.is_some(), "unit curve updated");
        Ok(())
    }

    /// The measured unit curves of a device, by channel count.
    pub fn unit_curves(&self, device: &str) -> Result<BTreeMap<u32, UnitCurve>> {
        self.state.read().device(device)?;
        self.store.unit_curves(device)
    }

    /// Scheduler counters of every scheduled vSSD, by name.
    pub fn sched_stats(&self) -> Vec<(String, TenantStats)> {
        let st = self.state.read();
        st.vssds
            .values()
            .filter_map(|e| {
                let g = e.gate.as_ref()?;
                Some((
                    e.rec.name.clone(),
                    g.scheduler().tenant(&e.rec.name).ok()?.stats,
                ))
            })
            .collect()
    }
}

/// Refuses a unit curve whose latency bound or samples are not finite
/// positive numbers (the curve itself was checked when it was built).
fn check_unit_curve(c: &UnitCurve) -> Result<()> {
    if !(c.bound_us.is_finite() && c.bound_us > 0.0) {
        return Err(ControlError::Invalid(format!(
            "unit curve bound_us = {}: the latency bound must be a finite number of \
             microseconds above 0",
            c.bound_us
        )));
    }
    for (i, s) in c.samples.iter().enumerate() {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !(ok(s.write_iops) && ok(s.read_iops) && ok(s.latency_us)) {
            return Err(ControlError::Invalid(format!(
                "unit curve samples[{i}] = {s:?}: rates and latency must be finite and not negative"
            )));
        }
    }
    Ok(())
}
