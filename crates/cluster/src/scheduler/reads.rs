//! What the fleet API reads: vSSDs with their hosts' reports, hosts, the
//! fleet-wide gSSD pool, the fleet at a glance and the event log. Any
//! scheduler answers these, active or not.

use super::*;

impl Scheduler {
    /// Every fleet vSSD with its host's report.
    pub async fn list(&self) -> Result<Vec<VssdStatus>, ClusterError> {
        let mut c = self.client.clone();
        let vs = etcd::get_prefix(&mut c, &self.keys.vssds()).await?;
        let obs = etcd::get_prefix(&mut c, &self.keys.observed_all()).await?;
        let mut observed: BTreeMap<(String, String), ObservedVssd> = BTreeMap::new();
        let base = self.keys.observed_all();
        for kv in &obs {
            let k = String::from_utf8_lossy(kv.key()).into_owned();
            let Some((h, n)) = k.strip_prefix(&base).and_then(|r| r.split_once('/')) else {
                continue;
            };
            match decode::<ObservedVssd>(kv.key(), kv.value()) {
                Ok(o) => {
                    observed.insert((h.to_string(), n.to_string()), o);
                }
                Err(e) => warn!(error = %e, "ignoring an observed record"),
            }
        }
        let alive: BTreeSet<String> = self.view.lock().hosts.keys().cloned().collect();
        let mut out = Vec::new();
        for kv in &vs {
            let v: FleetVssd = match decode(kv.key(), kv.value()) {
                Ok(v) => v,
                Err(e) => {
                    warn!(error = %e, "ignoring a fleet vSSD record");
                    continue;
                }
            };
            let o = observed.remove(&(v.host.clone(), v.name.clone()));
            let (state, error, uri, bytes) = if !alive.contains(&v.host) {
                (
                    "unavailable".to_string(),
                    Some(format!("host {} is lost", v.host)),
                    None,
                    0,
                )
            } else {
                match o {
                    None => ("pending".into(), None, None, 0),
                    Some(o) => (
                        match o.state {
                            ObservedState::Ready => "ready".into(),
                            ObservedState::Error => "error".into(),
                        },
                        o.error,
                        o.uri,
                        o.capacity_bytes,
                    ),
                }
            };
            out.push(VssdStatus {
                vssd: v,
                state,
                error,
                uri,
                capacity_bytes: bytes,
            });
        }
        Ok(out)
    }

    /// One fleet vSSD: two point reads (its index entry, its host's report).
    pub async fn show(&self, name: &str) -> Result<VssdStatus, ClusterError> {
        let mut c = self.client.clone();
        let got = c.get(self.keys.vssd(name), None).await?;
        let kv = got
            .kvs()
            .first()
            .ok_or_else(|| ClusterError::no_vssd(name))?;
        let v: FleetVssd = decode(kv.key(), kv.value())?;
        let alive = self.view.lock().hosts.contains_key(&v.host);
        if !alive {
            return Ok(VssdStatus {
                error: Some(format!("host {} is lost", v.host)),
                vssd: v,
                state: "unavailable".into(),
                uri: None,
                capacity_bytes: 0,
            });
        }
        let o = c.get(self.keys.observed(&v.host, name), None).await?;
        let o = match o.kvs().first() {
            None => None,
            Some(kv) => Some(decode::<ObservedVssd>(kv.key(), kv.value())?),
        };
        Ok(match o {
            None => VssdStatus {
                vssd: v,
                state: "pending".into(),
                error: None,
                uri: None,
                capacity_bytes: 0,
            },
            Some(o) => VssdStatus {
                vssd: v,
                state: match o.state {
                    ObservedState::Ready => "ready".into(),
                    ObservedState::Error => "error".into(),
                },
                error: o.error,
                uri: o.uri,
                capacity_bytes: o.capacity_bytes,
            },
        })
    }

    /// Hosts, alive and lost.
    pub fn hosts(&self) -> Vec<HostStatus> {
        let v = self.view.lock();
        // One pass over the allocations: vSSD names and booked channels per host.
        let mut per: BTreeMap<&str, (BTreeSet<&str>, u32)> = BTreeMap::new();
        for ((h, dev), (a, _)) in &v.allocs {
            let e = per.entry(h.as_str()).or_default();
            e.0.extend(a.channels.values().map(String::as_str));
            e.1 += a.channels.len() as u32;
            if a.mode == AllocMode::Unit && !a.tenants.is_empty() {
                e.0.extend(a.tenants.iter().map(|t| t.name.as_str()));
                // A unit books every channel of its own device.
                e.1 += v
                    .hosts
                    .get(h)
                    .and_then(|(r, _)| r.devices.iter().find(|d| d.name == *dev))
                    .map_or(0, |d| d.channels);
            }
        }
        let mut ids: BTreeSet<&str> = v.hosts.keys().map(String::as_str).collect();
        ids.extend(per.keys().copied());
        ids.into_iter()
            .map(|id| {
                let (names, booked) = per.get(id).cloned().unwrap_or_default();
                let record = v.hosts.get(id).map(|(r, _)| r.clone());
                HostStatus {
                    state: if record.is_some() { "alive" } else { "lost" }.into(),
                    total_channels: record
                        .as_ref()
                        .map_or(0, |r| r.devices.iter().map(|d| d.channels).sum()),
                    id: id.to_string(),
                    record,
                    vssds: names.len(),
                    booked_channels: booked,
                }
            })
            .collect()
    }

    /// Every live host's gSSDs, best fit first for a demand of one channel:
    /// the fleet-wide pool as the hosts last published it.
    pub fn gssds(&self) -> Vec<FleetGssd> {
        let v = self.view.lock();
        let mut out: Vec<FleetGssd> = v
            .hosts
            .values()
            .flat_map(|(h, _)| {
                h.gssds.iter().map(|g| FleetGssd {
                    host: h.id.clone(),
                    nbd: h.nbd.clone(),
                    gssd: g.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (a.gssd.in_use, a.gssd.capacity_bytes, &a.host, a.gssd.id).cmp(&(
                b.gssd.in_use,
                b.gssd.capacity_bytes,
                &b.host,
                b.gssd.id,
            ))
        });
        out
    }

    /// The fleet at a glance.
    pub fn status(&self) -> FleetStatus {
        let hosts = self.hosts();
        let v = self.view.lock();
        FleetStatus {
            scheduler: self.cfg.id.clone(),
            active: self.is_active(),
            leader: self.leader(),
            hosts_alive: hosts.iter().filter(|h| h.state == "alive").count(),
            hosts_lost: hosts.iter().filter(|h| h.state == "lost").count(),
            vssds: hosts.iter().map(|h| h.vssds).sum(),
            units: v
                .allocs
                .values()
                .filter(|(a, _)| a.mode == AllocMode::Unit && !a.tenants.is_empty())
                .count(),
            channels_booked: hosts
                .iter()
                .filter(|h| h.state == "alive")
                .map(|h| h.booked_channels)
                .sum(),
            channels_total: hosts.iter().map(|h| h.total_channels).sum(),
        }
    }

    /// The last `limit` events after sequence number `since` (0: all), oldest
    /// first.
    pub async fn events(&self, limit: i64, since: u64) -> Result<Vec<FleetEvent>, ClusterError> {
        let mut c = self.client.clone();
        let mut opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(limit);
        if since > 0 {
            // Sequence numbers are the events' etcd revisions.
            opts = opts.with_min_mod_revision(since as i64 + 1);
        }
        let resp = c.get(self.keys.events(), Some(opts)).await?;
        let mut out: Vec<FleetEvent> = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                decode::<FleetEvent>(kv.key(), kv.value())
                    .map(|mut e| {
                        e.seq = kv.mod_revision() as u64;
                        e
                    })
                    .map_err(|e| warn!(error = %e, "ignoring an event"))
                    .ok()
            })
            .collect();
        out.reverse();
        Ok(out)
    }
}
