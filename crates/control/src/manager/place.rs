//! Placement: which device and which flash a new vSSD gets (by channel count,
//! explicit channel ids, or explicit block ranges), refusing overlaps with the
//! name of the vSSD in the way.

use std::collections::BTreeSet;
use std::sync::Arc;

use flash::FlashDevice;
use ftl::Extent;

use super::{range_of, DeviceEntry, HostManager};
use crate::store::DeviceRecord;
use crate::{BlockRange, ControlError, Result, VssdSpec};

impl HostManager {
    /// Chooses the device and the flash for a new vSSD.
    pub(super) fn place(
        &self,
        spec: &VssdSpec,
    ) -> Result<(DeviceRecord, Arc<FlashDevice>, Vec<Extent>)> {
        let st = self.state.read();
        if st.devices.is_empty() {
            // The request is fine; the daemon has nothing to serve it with.
            return Err(ControlError::Config(
                "no flash devices are configured: add a [[devices]] section and restart".into(),
            ));
        }
        if spec.blocks.is_some() && spec.channel_ids.is_none() {
            return Err(ControlError::Invalid(
                "a block range (blocks) needs an explicit channel list (channel_ids)".into(),
            ));
        }
        if let Some(ids) = &spec.channel_ids {
            if ids.is_empty() {
                return Err(ControlError::Invalid(
                    "channel_ids must list at least one channel".into(),
                ));
            }
            if let Some(n) = spec.channels {
                if n as usize != ids.len() {
                    return Err(ControlError::Invalid(format!(
                        "channels = {n} disagrees with the {} channels listed in channel_ids",
                        ids.len()
                    )));
                }
            }
            let d = match &spec.device {
                Some(name) => st.device(name)?,
                None => &st.devices[0],
            };
            let geo = d.rec.geometry;
            let mut seen = BTreeSet::new();
            for &c in ids {
                if c >= geo.channels {
                    return Err(ControlError::Invalid(format!(
                        "channel {c} does not exist: device {} has channels 0 to {}",
                        d.rec.name,
                        geo.channels - 1
                    )));
                }
                if !seen.insert(c) {
                    return Err(ControlError::Invalid(format!(
                        "channel {c} is listed twice in channel_ids"
                    )));
                }
            }
            let range = spec.blocks.unwrap_or(BlockRange {
                start: 0,
                end: geo.blocks_per_plane,
            });
            if range.is_empty() || range.end > geo.blocks_per_plane {
                return Err(ControlError::Invalid(format!(
                    "block range {range} is outside the blocks 0..{} of each plane of device {}",
                    geo.blocks_per_plane, d.rec.name
                )));
            }
            let extents: Vec<Extent> = ids
                .iter()
                .map(|&c| Extent {
                    channel: c,
                    first_block: range.start,
                    blocks: range.len(),
                })
                .collect();
            if ftl::max_capacity(&geo, &extents) == 0 {
                return Err(ControlError::Invalid(too_small(
                    &geo,
                    ids,
                    range,
                    &d.rec.name,
                )));
            }
            for v in st.vssds.values().filter(|v| v.rec.device == d.rec.name) {
                for theirs in &v.rec.extents {
                    for ours in &extents {
                        if theirs.channel == ours.channel
                            && range_of(theirs).overlaps(&range_of(ours))
                        {
                            return Err(ControlError::Overlap {
                                other: v.rec.name.clone(),
                                channel: ours.channel,
                                ours: range_of(ours).to_string(),
                                theirs: range_of(theirs).to_string(),
                            });
                        }
                    }
                }
            }
            return Ok((d.rec.clone(), d.dev.clone(), extents));
        }
        let n = spec.channels.ok_or_else(|| {
            ControlError::Invalid(
                "say how many channels (channels) or which ones (channel_ids)".into(),
            )
        })?;
        if n == 0 {
            return Err(ControlError::Invalid("channels must be at least 1".into()));
        }
        let candidates: Vec<&DeviceEntry> = match &spec.device {
            Some(name) => vec![st.device(name)?],
            None => st.devices.iter().collect(),
        };
        let mut best: Option<(&str, usize)> = None;
        for d in candidates {
            let free = st.free_channels(d);
            if free.len() >= n as usize {
                let extents = free[..n as usize]
                    .iter()
                    .map(|&c| Extent::whole_channel(&d.rec.geometry, c))
                    .collect();
                return Ok((d.rec.clone(), d.dev.clone(), extents));
            }
            if best.is_none_or(|(_, f)| free.len() > f) {
                best = Some((&d.rec.name, free.len()));
            }
        }
        let (device, free) = best.expect("at least one candidate device");
        Err(ControlError::NotEnoughChannels {
            device: device.into(),
            requested: n,
            free: free as u32,
        })
    }
}

/// Why a block range on `ids` exports nothing: garbage collection keeps a
/// reserve of blocks on every die, and the range does not reach past it.
/// Names the fewest blocks per plane that export something, if a plane of
/// the device has that many.
fn too_small(geo: &flash::Geometry, ids: &[u32], range: BlockRange, device: &str) -> String {
    let with = |blocks: u32| -> Vec<Extent> {
        ids.iter()
            .map(|&c| Extent {
                channel: c,
                first_block: 0,
                blocks,
            })
            .collect()
    };
    let head = format!(
        "block range {range} is too small to export anything: garbage collection keeps \
         a reserve of blocks on each of the {} dies per channel of device {device}",
        geo.dies_per_channel
    );
    let need =
        (range.len() + 1..=geo.blocks_per_plane).find(|&n| ftl::max_capacity(geo, &with(n)) > 0);
    match need {
        Some(n) => {
            let start = if range.start + n <= geo.blocks_per_plane {
                range.start
            } else {
                0
            };
            format!(
                "{head}; give at least {n} blocks per plane (e.g. \"{start}..{}\")",
                start + n
            )
        }
        None => format!(
            "{head}, more than all {} blocks of a plane",
            geo.blocks_per_plane
        ),
    }
}
