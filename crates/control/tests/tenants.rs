//! Tenants own exports: a vSSD's and a tier volume's `tenant` reaches the NBD
//! registry as the export's owner (what `nbd::tls::may_open` checks), survives
//! a restart, and a bad tenant name is refused with the key named.

use std::sync::Arc;

use clock::VirtualClock;
use control::{Config, ErrorKind, HostManager, VssdSpec};
use nbd::ExportRegistry;

fn config(dir: &std::path::Path, extra: &str) -> Config {
    Config::from_toml(&format!(
        r#"
        data_dir = "{}"
        [[devices]]
        name = "ssd0"
        backend = "file"
        [devices.geometry]
        channels = 8
        dies_per_channel = 1
        blocks_per_plane = 16
        pages_per_block = 64
        {extra}
        "#,
        dir.display()
    ))
    .unwrap()
}

/// Every export with its owner, as `NBD_OPT_LIST` sees them before filtering.
fn owners(m: &HostManager) -> Vec<(String, Option<String>)> {
    ExportRegistry::list(m)
        .into_iter()
        .map(|l| (l.name, l.owner))
        .collect()
}

#[test]
fn a_vssds_tenant_owns_its_export_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    {
        let m = HostManager::open(&cfg, Arc::new(VirtualClock::new(0))).unwrap();
        let info = m
            .create_vssd(&VssdSpec {
                name: "db".into(),
                channels: Some(2),
                tenant: Some("alice".into()),
                ..VssdSpec::default()
            })
            .unwrap();
        assert_eq!(info.tenant.as_deref(), Some("alice"));
        m.create_vssd(&VssdSpec {
            name: "scratch".into(),
            channels: Some(1),
            ..VssdSpec::default()
        })
        .unwrap();
        assert_eq!(m.lookup("db").unwrap().owner.as_deref(), Some("alice"));
        assert_eq!(m.lookup("scratch").unwrap().owner, None);
        let e = m
            .create_vssd(&VssdSpec {
                name: "bad".into(),
                channels: Some(1),
                tenant: Some("alice bob".into()),
                ..VssdSpec::default()
            })
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest);
        assert!(e.to_string().contains("invalid tenant name"), "{e}");
        m.shutdown().unwrap();
    }
    let m = HostManager::open(&cfg, Arc::new(VirtualClock::new(0))).unwrap();
    assert_eq!(
        owners(&m),
        [
            ("db".to_string(), Some("alice".to_string())),
            ("scratch".to_string(), None)
        ]
    );
    assert_eq!(m.get("db").unwrap().tenant.as_deref(), Some("alice"));
}

#[test]
fn tier_volumes_and_config_vssds_carry_their_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        r#"
        [[vssds]]
        name = "web"
        channels = 1
        tenant = "bob"
        [[tiers]]
        name = "t0"
        channels = 1
        volumes = [{ name = "bob-vol", size = "4M", tenant = "bob" }, { name = "pub", size = "4M" }]
        "#,
    );
    let m = HostManager::open(&cfg, Arc::new(VirtualClock::new(0))).unwrap();
    let o = owners(&m);
    assert!(o.contains(&("web".into(), Some("bob".into()))), "{o:?}");
    assert!(o.contains(&("bob-vol".into(), Some("bob".into()))), "{o:?}");
    assert!(o.contains(&("pub".into(), None)), "{o:?}");
    // Bad tenant names in the config are refused with the key named.
    for (text, key) in [
        ("[[vssds]]\nname = \"x\"\nchannels = 1\ntenant = \"a/b\"\n", "vssds[0].tenant"),
        (
            "[[tiers]]\nname = \"t\"\nchannels = 1\nvolumes = [{ name = \"v\", size = \"4M\", tenant = \"\" }]\n",
            "tiers[0].volumes[0].tenant",
        ),
    ] {
        let e = Config::from_toml(&format!(
            "[[devices]]\nname = \"ssd0\"\nbackend = \"memory\"\n{text}"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(key), "{e}");
    }
}

#[test]
fn a_check_on_one_vssd_never_acts_on_its_namesake() {
    let dir = tempfile::tempdir().unwrap();
    let m = HostManager::open(&config(dir.path(), ""), Arc::new(VirtualClock::new(0))).unwrap();
    let spec = |tenant: &str| VssdSpec {
        name: "db".into(),
        channels: Some(1),
        tenant: Some(tenant.into()),
        ..VssdSpec::default()
    };
    // alice's "db" is checked by the API, then deleted and re-created by bob
    // before the API acts on what it checked.
    let checked = m.create_vssd(&spec("alice")).unwrap().id;
    m.delete_vssd("db").unwrap();
    let bobs = m.create_vssd(&spec("bob")).unwrap().id;
    assert_ne!(checked, bobs, "record ids are never reused");
    let e = m.delete_vssd_expecting("db", Some(checked)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = m
        .set_vssd_sla_expecting("db", Some(checked), None)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(m.get("db").unwrap().tenant.as_deref(), Some("bob"));
    // The right id acts.
    m.delete_vssd_expecting("db", Some(bobs)).unwrap();
    assert!(m.get("db").is_err());
}
