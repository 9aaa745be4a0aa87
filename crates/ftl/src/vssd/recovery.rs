//! Durability: taking checkpoints, and rebuilding a vSSD's mapping after a restart
//! or a crash.
//!
//! Every page a vSSD programs carries an OOB record (owner, kind, logical page,
//! sequence number), so the flash alone says what was written, in which order.
//! A checkpoint (see [`crate::checkpoint::format`]) records, for each mapped
//! logical page, the sequence number of its current content. Recovery scans every
//! owned block's OOB records, maps the checkpointed pages, then replays every newer
//! data page and trim record in sequence order, and finally rebuilds the block
//! table (valid counts, free lists, one open block per unit). Checkpoints are what
//! let trim records be dropped: a trim record the last checkpoint covers is dead.
//!
//! After a host crash (not a `kill -9`) a page's OOB record may have reached the
//! disk without its data; the record carries a check of the data on devices
//! that can outlive a crash, and the scan skips pages that fail it
//! ([`flash::FlashDevice::oob_intact`]). That reads every programmed page once.

use flash::OobKind;

use super::{BState, Inner, Vssd, TRIM_REC, UNMAPPED};
use crate::checkpoint::format;
use crate::FtlError;

impl Vssd {
    /// Syncs the flash and saves a checkpoint of the current mapping; the trim
    /// records it covers are no longer needed and become invalid pages.
    pub(crate) fn write_checkpoint(&self, g: &mut Inner) -> Result<(), FtlError> {
        // The whole device: that also covers a group sync of this vSSD still
        // in flight (its set was taken before this lock was), so every page
        // the checkpoint names is durable before it is saved.
        self.dev.sync()?;
        g.dirty = flash::DirtySet::new();
        // Everything is durable now: GC's waiting erases wait no more.
        g.durable_seq = g.map.seq;
        g.safe_bookings = g.bookings;
        let out = format::encode(self.cfg.id, g.map.seq, &g.map.lseq);
        self.ckpt.save(self.cfg.id, &out)?;
        g.map.ckpt_seq = g.map.seq;
        for lp in std::mem::take(&mut g.map.live_trims) {
            Self::invalidate_page(g, lp, self.ppb);
        }
        Ok(())
    }

    /// Rebuilds the mapping and the block table of a freshly built vSSD from its
    /// checkpoint and the OOB records of its flash.
    pub(crate) fn recover(&self, g: &mut Inner) -> Result<(), FtlError> {
        let bytes = self
            .ckpt
            .load(self.cfg.id)?
            .ok_or_else(|| FtlError::Recovery {
                name: self.cfg.name.clone(),
                reason: "no checkpoint found (was it created by this data directory?)".into(),
            })?;
        let format::Checkpoint { seq: cseq, entries } =
            format::decode(&bytes, self.cfg.id, self.logical_pages).map_err(|r| {
                FtlError::Recovery {
                    name: self.cfg.name.clone(),
                    reason: format!("checkpoint: {r}"),
                }
            })?;
        for &(lba, s) in &entries {
            g.map.lseq[lba as usize] = s;
        }
        let ppb = self.ppb;
        let mut events: Vec<(u64, u32)> = Vec::new(); // (seq, local page) newer than the checkpoint
        let mut max_seq = cseq;
        for bi in 0..g.blocks.len() {
            if g.blocks[bi].state == BState::Lent {
                continue; // the borrower's pages
            }
            let id = g.blocks[bi].id;
            let wp = self.dev.write_ptr(id);
            for page in 0..wp {
                let lp = bi as u32 * ppb + page;
                // A page whose record survived a host crash but whose data did
                // not (the kernel writes the two back separately) is no page:
                // mapping it would serve zeros or an erased block's old bytes.
                let Some(oob) = self.dev.oob_intact(self.geo.first_page(id) + page as u64) else {
                    continue;
                };
                if oob.owner != self.cfg.id {
                    tracing::warn!(vssd = %self.cfg.name, block = id, "page owned by {} ignored", oob.owner);
                    continue;
                }
                max_seq = max_seq.max(oob.seq);
                match oob.kind {
                    OobKind::Data if oob.lba >= self.logical_pages => {
                        return Err(FtlError::Recovery {
                            name: self.cfg.name.clone(),
                            reason: format!("page for logical page {} beyond capacity", oob.lba),
                        })
                    }
                    OobKind::Data if oob.seq <= cseq => {
                        let l = oob.lba as usize;
                        if g.map.lseq[l] == oob.seq && g.map.l2p[l] == UNMAPPED {
                            g.map.l2p[l] = lp;
                            g.map.p2l[lp as usize] = l as u32;
                        }
                    }
                    _ if oob.seq > cseq => events.push((oob.seq, lp)),
                    _ => {}
                }
            }
            let blk = &mut g.blocks[bi];
            blk.wp = wp;
            blk.state = if wp == 0 {
                BState::Free
            } else {
                BState::Closed
            };
        }
        events.sort_unstable();
        let mut buf = vec![0u8; self.page_size];
        for (seq, lp) in events {
            let gp = self.global_page(g, lp);
            let oob = self.dev.oob(gp).expect("scanned above");
            match oob.kind {
                OobKind::Data => {
                    let l = oob.lba as usize;
                    if g.map.l2p[l] != UNMAPPED && g.map.lseq[l] == seq {
                        continue; // a GC copy of the same write
                    }
                    let old = g.map.l2p[l];
                    if old != UNMAPPED {
                        g.map.p2l[old as usize] = UNMAPPED;
                    }
                    g.map.l2p[l] = lp;
                    g.map.lseq[l] = seq;
                    g.map.p2l[lp as usize] = l as u32;
                }
                OobKind::Trim => {
                    self.dev.read(gp, 0, &mut buf, 0)?;
                    let start = u64::from_le_bytes(buf[0..8].try_into().unwrap());
                    let count = u64::from_le_bytes(buf[8..16].try_into().unwrap());
                    if start
                        .checked_add(count)
                        .is_none_or(|e| e > self.logical_pages)
                    {
                        return Err(FtlError::Recovery {
                            name: self.cfg.name.clone(),
                            reason: format!("trim record {start}+{count} beyond capacity"),
                        });
                    }
                    for l in start..start + count {
                        let old = g.map.l2p[l as usize];
                        if old != UNMAPPED {
                            g.map.p2l[old as usize] = UNMAPPED;
                        }
                        g.map.l2p[l as usize] = UNMAPPED;
                        g.map.lseq[l as usize] = 0;
                    }
                    g.map.p2l[lp as usize] = TRIM_REC;
                    g.map.live_trims.push(lp);
                }
            }
        }
        // Every logical page the checkpoint maps must have been found, unless a newer
        // write or trim replaced it.
        for &(lba, s) in &entries {
            if g.map.lseq[lba as usize] == s && g.map.l2p[lba as usize] == UNMAPPED {
                return Err(FtlError::Recovery {
                    name: self.cfg.name.clone(),
                    reason: format!(
                        "checkpoint maps logical page {lba} (seq {s}) but no flash page holds it"
                    ),
                });
            }
        }
        // Valid counts, free lists and one open block per unit.
        for b in g.blocks.iter_mut() {
            b.valid = 0;
        }
        for lp in 0..g.map.p2l.len() {
            if g.map.p2l[lp] != UNMAPPED {
                g.blocks[lp / ppb as usize].valid += 1;
            }
        }
        for bi in 0..g.blocks.len() {
            if g.blocks[bi].state == BState::Lent {
                continue;
            }
            let (pu, wp, ec) = (
                g.blocks[bi].pu as usize,
                g.blocks[bi].wp,
                g.blocks[bi].erase_count,
            );
            if wp == 0 {
                g.pus[pu].free.insert((ec, bi as u32));
            } else if wp < ppb && g.pus[pu].active.is_none() {
                g.blocks[bi].state = BState::Open;
                g.pus[pu].active = Some(bi as u32);
            }
        }
        g.map.seq = max_seq;
        Ok(())
    }
}
