//! The scheduler's view of the fleet: live hosts and device allocations,
//! loaded from etcd and kept current by watches.
//!
//! Placement is decided on this view and checked by etcd's compare-and-swap,
//! so the view may lag but never lies for long: a watch that ends makes the
//! scheduler read everything again, and hosts missing from the new read are
//! reported lost. A watch event older than what the view holds (the
//! scheduler's own later write got there first) is ignored.

use super::*;

#[derive(Debug, Default)]
pub(super) struct View {
    pub(super) hosts: BTreeMap<String, (HostRecord, i64)>,
    pub(super) allocs: BTreeMap<(String, String), (DeviceAlloc, i64)>,
    /// Devices whose allocation does not parse: never placed on (their
    /// bookings are unknown) until someone fixes the value.
    pub(super) bad: BTreeSet<(String, String)>,
}

impl View {
    pub(super) fn usable(&self, host: &str, device: &str) -> bool {
        self.bad.is_empty() || !self.bad.contains(&(host.to_string(), device.to_string()))
    }
}

impl View {
    pub(super) fn apply_host(
        &mut self,
        key: &[u8],
        value: &[u8],
        create_rev: i64,
    ) -> Option<String> {
        match decode::<HostRecord>(key, value) {
            Ok(h) => {
                let new = self.hosts.get(&h.id).is_none_or(|(_, r)| *r != create_rev);
                let id = h.id.clone();
                self.hosts.insert(h.id.clone(), (h, create_rev));
                new.then_some(id)
            }
            Err(e) => {
                warn!(error = %e, "refusing a host record");
                None
            }
        }
    }

    pub(super) fn apply_alloc(&mut self, keys: &Keys, key: &[u8], value: Option<(&[u8], i64)>) {
        self.apply_alloc_at(keys, key, value, 0);
    }

    /// `delete_rev`: the revision of a delete (0: unknown, always applies).
    pub(super) fn apply_alloc_at(
        &mut self,
        keys: &Keys,
        key: &[u8],
        value: Option<(&[u8], i64)>,
        delete_rev: i64,
    ) {
        let k = String::from_utf8_lossy(key);
        let Some(rest) = k.strip_prefix(&keys.allocs()) else {
            return;
        };
        let Some((host, dev)) = rest.split_once('/') else {
            warn!(key = %k, "refusing an allocation key that names no device");
            return;
        };
        let id = (host.to_string(), dev.to_string());
        // Never go back: a watch event can arrive after this scheduler has
        // already recorded its own later write (or its tentative plan at the
        // same revision), and must not undo it.
        let newer = |rev: i64| self.allocs.get(&id).is_some_and(|(_, r)| *r >= rev);
        match value {
            None if delete_rev > 0 && newer(delete_rev) => {}
            None => {
                self.bad.remove(&id);
                self.allocs.remove(&id);
            }
            Some((_, rev)) if newer(rev) => {}
            Some((v, rev)) => match decode::<DeviceAlloc>(key, v) {
                Ok(a) => {
                    self.bad.remove(&id);
                    self.allocs.insert(id, (a, rev));
                }
                Err(e) => {
                    warn!(error = %e, "refusing an allocation; the device is not placed on until it is fixed");
                    self.allocs.remove(&id);
                    self.bad.insert(id);
                }
            },
        }
    }
}

impl Scheduler {
    /// The fleet as etcd holds it now (hosts and allocations read at one
    /// revision), and that revision. Does not touch the view.
    pub(super) async fn snapshot(&self) -> Result<(View, i64), ClusterError> {
        let mut c = self.client.clone();
        let (hosts, rev) = etcd::get_prefix_at(&mut c, &self.keys.hosts(), 0).await?;
        let (allocs, _) = etcd::get_prefix_at(&mut c, &self.keys.allocs(), rev).await?;
        let mut v = View::default();
        for kv in &hosts {
            v.apply_host(kv.key(), kv.value(), kv.create_revision());
        }
        for kv in &allocs {
            v.apply_alloc(&self.keys, kv.key(), Some((kv.value(), kv.mod_revision())));
        }
        Ok((v, rev))
    }

    /// Replaces the view with a [`Scheduler::snapshot`]. Only where no
    /// watch is applying events meanwhile (before the watch starts, and
    /// between watches): an event applied while the read is under way would
    /// be overwritten by the older snapshot and never come again.
    pub(super) async fn load(&self) -> Result<i64, ClusterError> {
        let (v, rev) = self.snapshot().await?;
        *self.view.lock() = v;
        Ok(rev)
    }

    pub(super) async fn watch_loop(self: Arc<Self>, mut rev: i64, mut stop: watch::Receiver<bool>) {
        loop {
            match self.watch_once(rev, &mut stop).await {
                Ok(()) => return,
                Err(e) => warn!(error = %e, "the fleet watch ended; reloading in 1 s"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
            // Missed changes: read everything again (hosts that went away
            // meanwhile are lost; the events say so when we lead).
            let before: BTreeSet<String> = self.view.lock().hosts.keys().cloned().collect();
            match self.load().await {
                Ok(r) => {
                    rev = r;
                    let after: BTreeSet<String> = self.view.lock().hosts.keys().cloned().collect();
                    for lost in before.difference(&after) {
                        self.host_lost(lost).await;
                    }
                }
                Err(e) => warn!(error = %e, "cannot reload the fleet"),
            }
        }
    }

    async fn watch_once(
        &self,
        rev: i64,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        let mut c = self.client.clone();
        let mut hosts = c
            .watch(
                self.keys.hosts(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(rev + 1),
                ),
            )
            .await?;
        let mut allocs = c
            .watch(
                self.keys.allocs(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(rev + 1),
                ),
            )
            .await?;
        loop {
            tokio::select! {
                _ = stop.changed() => return Ok(()),
                m = hosts.message() => {
                    let Some(resp) = m? else { return Err(ClusterError::Conflict("host watch closed".into())) };
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        match ev.event_type() {
                            EventType::Put => {
                                let joined = self.view.lock().apply_host(kv.key(), kv.value(), kv.create_revision());
                                if let Some(h) = joined {
                                    info!(host = %h, "host joined the fleet");
                                    self.event("host-joined", Some(&h), format!("host {h} registered")).await;
                                }
                            }
                            EventType::Delete => {
                                let id = Keys::last(&key).to_string();
                                if self.view.lock().hosts.remove(&id).is_some() {
                                    self.host_lost(&id).await;
                                }
                            }
                        }
                    }
                }
                m = allocs.message() => {
                    let Some(resp) = m? else { return Err(ClusterError::Conflict("allocation watch closed".into())) };
                    let mut v = self.view.lock();
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        match ev.event_type() {
                            EventType::Put => v.apply_alloc(&self.keys, kv.key(), Some((kv.value(), kv.mod_revision()))),
                            EventType::Delete => v.apply_alloc_at(&self.keys, kv.key(), None, kv.mod_revision()),
                        }
                    }
                }
            }
        }
    }

    pub(super) async fn host_lost(&self, host: &str) {
        let names: Vec<String> = {
            let v = self.view.lock();
            v.allocs
                .iter()
                .filter(|((h, _), _)| h == host)
                .flat_map(|(_, (a, _))| {
                    a.channels
                        .values()
                        .cloned()
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .chain(a.tenants.iter().map(|t| t.name.clone()))
                })
                .collect()
        };
        warn!(host, vssds = names.len(), "host lost (its lease expired)");
        self.event(
            "host-lost",
            Some(host),
            format!(
                "host {host} lost its registration; unavailable until it returns: {}",
                if names.is_empty() {
                    "no vSSDs".to_string()
                } else {
                    names.join(", ")
                }
            ),
        )
        .await;
        self.evict_harvests_of(host).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_never_goes_back_to_an_older_allocation() {
        // The watch can deliver this scheduler's own earlier write after it
        // recorded a later one (the race that once lost a booking).
        let keys = Keys::new("/fx");
        let mut v = View::default();
        let alloc = |names: &[(u32, &str)]| DeviceAlloc {
            mode: AllocMode::Channels,
            channels: names.iter().map(|(c, n)| (*c, n.to_string())).collect(),
            tenants: Vec::new(),
            percentile: None,
        };
        let k = keys.alloc("h1", "ssd0");
        let newer = encode(&alloc(&[(0, "a"), (1, "b")]));
        let older = encode(&alloc(&[(0, "a")]));
        v.apply_alloc(&keys, k.as_bytes(), Some((&newer, 7)));
        v.apply_alloc(&keys, k.as_bytes(), Some((&older, 5)));
        v.apply_alloc(&keys, k.as_bytes(), Some((&older, 7)));
        let id = ("h1".to_string(), "ssd0".to_string());
        assert_eq!(v.allocs[&id].0.channels.len(), 2);
        // A delete older than what is known is ignored too; a later one applies.
        v.apply_alloc_at(&keys, k.as_bytes(), None, 6);
        assert!(v.allocs.contains_key(&id));
        v.apply_alloc_at(&keys, k.as_bytes(), None, 9);
        assert!(!v.allocs.contains_key(&id));
        // A value that does not parse marks the device unusable.
        v.apply_alloc(&keys, k.as_bytes(), Some((b"{", 10)));
        assert!(!v.usable("h1", "ssd0"));
    }
}
