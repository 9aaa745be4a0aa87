//! Deleting a fleet vSSD: its booking, index and desired keys go in one
//! transaction (with a harvest tenant's volumes, wherever they are), and its
//! host's agent erases it.

use super::*;

impl Scheduler {
    /// Deletes a fleet vSSD and frees its booking (active scheduler only).
    pub async fn delete(&self, name: &str) -> Result<(), ClusterError> {
        self.await_leader().await;
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.queue
            .send(Job::Delete {
                name: name.to_string(),
                tx,
            })
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?;
        rx.await
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?
    }

    /// Deletes one vSSD (from the committer).
    pub(super) async fn delete_now(&self, name: &str) -> Result<(), ClusterError> {
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let mut c = self.client.clone();
        let vkey = self.keys.vssd(name);
        for _ in 0..8 {
            let got = c.get(vkey.clone(), None).await?;
            let Some(kv) = got.kvs().first() else {
                return Err(ClusterError::no_vssd(name));
            };
            let vrev = kv.mod_revision();
            let v: FleetVssd = decode(kv.key(), kv.value())?;
            let akey = self.keys.alloc(&v.host, &v.device);
            let a = c.get(akey.clone(), None).await?;
            let mut ops = vec![
                TxnOp::delete(vkey.clone(), None),
                TxnOp::delete(self.keys.desired(&v.host, name), None),
            ];
            let mut cmps = vec![Compare::mod_revision(vkey.clone(), CompareOp::Equal, vrev)];
            let mut new_alloc = None;
            if let Some(akv) = a.kvs().first() {
                let mut alloc: DeviceAlloc = decode(akv.key(), akv.value())?;
                alloc.channels.retain(|_, n| n != name);
                alloc.tenants.retain(|t| t.name != name);
                cmps.push(Compare::mod_revision(
                    akey.clone(),
                    CompareOp::Equal,
                    akv.mod_revision(),
                ));
                if alloc.is_empty() {
                    ops.push(TxnOp::delete(akey.clone(), None));
                } else {
                    ops.push(TxnOp::put(akey.clone(), encode(&alloc), None));
                    new_alloc = Some(alloc);
                }
            }
            // A harvest tenant's volumes go with it, wherever they are.
            let mut released = Vec::new();
            if v.role == control::TenantRole::Harvest {
                let (vols, rev) = etcd::get_prefix_at(&mut c, &self.keys.harvests(), 0).await?;
                cmps.push(
                    Compare::mod_revision(self.keys.harvests(), CompareOp::Less, rev + 1)
                        .with_prefix(),
                );
                for kv in &vols {
                    let Ok(h) = decode::<FleetHarvest>(kv.key(), kv.value()) else {
                        continue;
                    };
                    if h.tenant == name {
                        ops.push(TxnOp::delete(kv.key().to_vec(), None));
                        ops.push(TxnOp::delete(self.keys.hdesired(&h.host, &h.name), None));
                        released.push(h.name);
                    }
                }
            }
            let mut ev = self.make_event(
                "vssd-deleted",
                Some(&v.host),
                format!(
                    "{name} deleted from {}/{}{}",
                    v.host,
                    v.device,
                    if released.is_empty() {
                        String::new()
                    } else {
                        format!("; its harvest volumes released: {}", released.join(", "))
                    }
                ),
            );
            ev.tenant = v.tenant.clone();
            ops.push(TxnOp::put(self.event_key(), encode(&ev), None));
            let resp = c.txn(Txn::new().when(cmps).and_then(ops)).await?;
            if resp.succeeded() {
                let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                let mut view = self.view.lock();
                match new_alloc {
                    Some(a) => {
                        view.allocs
                            .insert((v.host.clone(), v.device.clone()), (a, rev));
                    }
                    None => {
                        view.allocs.remove(&(v.host.clone(), v.device.clone()));
                    }
                }
                return Ok(());
            }
        }
        Err(ClusterError::Conflict(format!(
            "could not delete {name:?}: the fleet kept changing; try again"
        )))
    }
}
