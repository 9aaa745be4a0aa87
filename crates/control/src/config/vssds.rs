//! `[[vssds]]`: the vSSDs to create, and the name rules every vSSD follows.
//!
//! Its own file because a [`VssdSpec`] is more than a config entry: it is
//! also the body of `POST /v1/vssds` and what `flexssd vssd create` sends,
//! so its fields, its defaults and [`valid_name`] are shared by the
//! configuration, the API and the manager.

use std::collections::HashSet;

use ftl::GcPolicyKind;
use serde::{Deserialize, Serialize};

use crate::{BlockRange, ByteSize};

/// Whether a vSSD's tenant buys its flash or harvests others'.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantRole {
    /// Buys dedicated channels; its idle flash may be harvested.
    #[default]
    Regular,
    /// May ask for harvest volumes on other tenants' idle flash.
    Harvest,
}

impl std::str::FromStr for TenantRole {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "regular" => Ok(Self::Regular),
            "harvest" => Ok(Self::Harvest),
            other => Err(format!(
                "unknown tenant role {other:?}: use regular or harvest"
            )),
        }
    }
}

/// A vSSD to create: an entry of `[[vssds]]` in the config, the body of
/// `POST /v1/vssds`, and what `flexssd vssd create` sends.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VssdSpec {
    /// Name, also the NBD export name: 1-64 characters of `[A-Za-z0-9._-]`.
    pub name: String,
    /// Device. Default: the first device with enough free channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Number of whole channels, taken from the lowest-numbered free ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// Explicit channels (instead of, or agreeing with, `channels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_ids: Option<Vec<u32>>,
    /// With `channel_ids`: only these blocks of each plane. Default: all blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockRange>,
    /// Exported size, rounded up to a page. Default: raw size less 12.5%
    /// over-provisioning (`ftl::default_capacity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ByteSize>,
    /// GC victim policy. Default `greedy`.
    #[serde(default)]
    pub gc: GcPolicyKind,
    /// SLA with the scheduler (curve, weight, burst). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<sched::TenantSla>,
    /// Regular or harvest tenant. Default `regular`.
    #[serde(default)]
    pub role: TenantRole,
    /// The tenant that owns it (a PSK username or a client certificate's
    /// common name): with NBD TLS only that tenant lists and opens it. Default:
    /// none, shared with every client the TLS mode lets in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Checks that `name` can be an NBD export name: 1-64 characters of `[A-Za-z0-9._-]`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Checks the vSSDs to create: valid unique names, devices among `devices`,
/// a placement. The message names the key.
pub(super) fn validate(vssds: &[VssdSpec], devices: &HashSet<&str>) -> Result<(), String> {
    let mut names = HashSet::new();
    for (i, v) in vssds.iter().enumerate() {
        if !valid_name(&v.name) {
            return Err(format!(
                "vssds[{i}].name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
                v.name
            ));
        }
        if let Some(t) = v.tenant.as_deref().filter(|t| !valid_name(t)) {
            return Err(format!(
                "vssds[{i}].tenant {t:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'"
            ));
        }
        if !names.insert(v.name.as_str()) {
            return Err(format!(
                "vssds[{i}].name: vSSD {:?} is defined twice",
                v.name
            ));
        }
        if let Some(dev) = &v.device {
            if !devices.contains(dev.as_str()) {
                return Err(format!(
                    "vssds[{i}].device: no device named {dev:?} in [[devices]]"
                ));
            }
        }
        if v.channels.is_none() && v.channel_ids.is_none() {
            return Err(format!(
                "vssds[{i}] ({}): set channels or channel_ids",
                v.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "default", "db-1.tenant_2", &"x".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65), "a:b"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn roles_parse() {
        assert_eq!("regular".parse::<TenantRole>(), Ok(TenantRole::Regular));
        assert_eq!("harvest".parse::<TenantRole>(), Ok(TenantRole::Harvest));
        let e = "owner".parse::<TenantRole>().unwrap_err();
        assert!(e.contains("regular or harvest"), "{e}");
    }

    #[test]
    fn a_duplicate_vssd_is_named() {
        let v = VssdSpec {
            name: "v".into(),
            channels: Some(1),
            ..VssdSpec::default()
        };
        let e = validate(&[v.clone(), v], &HashSet::new()).unwrap_err();
        assert!(
            e.contains("vssds[1].name") && e.contains("defined twice"),
            "{e}"
        );
    }
}
