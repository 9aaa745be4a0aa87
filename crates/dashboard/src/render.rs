//! The dashboard's body: the flash map, the vSSDs, one vSSD in detail, the
//! harvest pool and the event log, as one HTML fragment.
//!
//! Every number a test or an operator might check is in a table cell with a
//! `data-f` naming the API field it shows, in a row with `data-row` (what
//! kind of thing) and `data-key` (which one), so that the browser test can
//! read the page the way a person does and compare it with the JSON.

use std::fmt::Write as _;

use control::{
    FlashMap, FlashOwnerKind, GssdInfo, HarvestEvent, HarvestVolumeInfo, VssdInfo, VssdSlaInfo,
    VssdStats,
};

use crate::format::{esc, fmt_bytes, fmt_ns, fmt_num, fmt_rate, fmt_secs};
use crate::history::Rate;
use crate::svg::{flash_map_svg, owner_colour, owner_label, sla_svg, sparkline};
use crate::DashboardError;

/// Who is looking: an admin sees the host, a tenant only its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// An admin token, or authentication off.
    Admin,
    /// A tenant token of this tenant.
    Tenant(String),
}

/// One vSSD's row: what the API says about it and its recent rates.
#[derive(Debug, Clone, PartialEq)]
pub struct VssdRow {
    /// `GET /v1/vssds/{name}`.
    pub info: VssdInfo,
    /// Its counters (absent while it is being deleted).
    pub stats: Option<VssdStats>,
    /// `GET /v1/vssds/{name}/rates`, oldest first.
    pub rates: Vec<Rate>,
}

/// Everything one page shows, already filtered for its viewer.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The daemon's clock, ns (the API's `expiry_s` and `evict_by_s` are on it).
    pub now_ns: u64,
    /// Who asked.
    pub viewer: Viewer,
    /// Flash maps, one per device; `None` when the viewer may not see them.
    pub flash: Option<Vec<FlashMap>>,
    /// The viewer's vSSDs.
    pub vssds: Vec<VssdRow>,
    /// The vSSD shown in detail with its SLA, if one was asked for.
    pub detail: Option<VssdSlaInfo>,
    /// Whether the harvester runs.
    pub harvest_enabled: bool,
    /// The gSSD pool; `None` when the viewer may not see it.
    pub gssds: Option<Vec<GssdInfo>>,
    /// The viewer's harvest volumes.
    pub volumes: Vec<HarvestVolumeInfo>,
    /// The viewer's events, oldest first (the tail of the log).
    pub events: Vec<HarvestEvent>,
    /// Events in the viewer's log in all (`events` may hold fewer).
    pub events_total: usize,
}

/// What the page asks for: `GET /v1/dashboard?vssd=NAME&rows=N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The vSSD to show in detail.
    pub vssd: Option<String>,
    /// Most rows of each long table (gSSDs, volumes, events).
    pub rows: usize,
}

impl View {
    /// Checks a request's parameters: `vssd` must be a valid name, `rows`
    /// between 1 and `max_rows` (default `max_rows`).
    pub fn parse(
        vssd: Option<String>,
        rows: Option<usize>,
        max_rows: usize,
    ) -> Result<View, DashboardError> {
        let vssd = vssd.filter(|v| !v.is_empty());
        if let Some(v) = &vssd {
            if !control::valid_name(v) {
                return Err(DashboardError::BadQuery(format!(
                    "vssd={v:?} is not a vSSD name (1-64 of A-Z a-z 0-9 . _ -)"
                )));
            }
        }
        let rows = rows.unwrap_or(max_rows);
        if rows == 0 || rows > max_rows {
            return Err(DashboardError::BadQuery(format!(
                "rows={rows}: between 1 and {max_rows} ([api.dashboard] rows)"
            )));
        }
        Ok(View { vssd, rows })
    }
}

fn td(f: &str, text: &str) -> String {
    format!(r#"<td data-f="{f}">{}</td>"#, esc(text))
}

fn tdn(f: &str, text: &str) -> String {
    format!(r#"<td class="n" data-f="{f}">{}</td>"#, esc(text))
}

fn secs(ns: u64) -> i64 {
    (ns / 1_000_000_000) as i64
}

/// The fragment the page swaps in (see the module docs for its markup).
pub fn render_body(s: &Snapshot, view: &View) -> String {
    let mut o = String::with_capacity(64 * 1024 + s.vssds.len() * 1500);
    let viewer = match &s.viewer {
        Viewer::Admin => "admin".to_string(),
        Viewer::Tenant(t) => format!("tenant {t}"),
    };
    let _ = write!(
        o,
        r#"<div id="dash" data-now-s="{}" data-viewer="{}">"#,
        secs(s.now_ns),
        esc(&viewer)
    );
    let _ = write!(
        o,
        r#"<p class="summary">Seen as <b>{}</b> · {} vSSDs · {} harvest volumes · daemon clock {}</p>"#,
        esc(&viewer),
        s.vssds.len(),
        s.volumes.len(),
        fmt_secs(secs(s.now_ns))
    );
    flash(&mut o, s, view);
    vssds(&mut o, s, view);
    detail(&mut o, s, view);
    harvest(&mut o, s, view);
    events(&mut o, s, view);
    o.push_str("</div>");
    o
}

fn flash(o: &mut String, s: &Snapshot, view: &View) {
    o.push_str(r#"<section id="flash"><h2>Flash</h2>"#);
    let Some(maps) = &s.flash else {
        o.push_str(
            r#"<p class="note">The flash map is host-wide: an admin token sees it.</p></section>"#,
        );
        return;
    };
    for m in maps {
        let _ = write!(
            o,
            r#"<div class="device" data-device="{d}"><h3>{d}: {} channels × {} blocks per plane ({} blocks per cell)</h3><div class="mapwrap">{}</div>"#,
            m.channels,
            m.blocks_per_plane,
            m.blocks_per_cell,
            flash_map_svg(m),
            d = esc(&m.device),
        );
        let max = m.erase_max.iter().copied().max().unwrap_or(0);
        let min = m.erase_max.iter().copied().min().unwrap_or(0);
        let _ = write!(
            o,
            r#"<p class="note">Wear layer: erase counts {min}–{max} (yellow: least, red: most worn).</p><div class="scroll short"><table class="legend"><thead><tr><th></th><th>owner</th><th>kind</th><th>lent to</th><th class="n">cells</th></tr></thead><tbody>"#
        );
        // Free and unsold first, then the owners with the most cells, at
        // most `rows` of them (every cell's owner is in its tooltip).
        let mut order: Vec<usize> = (0..m.owners.len())
            .filter(|&i| m.owners[i].cells > 0 || m.owners[i].name.is_some())
            .collect();
        order.sort_by_key(|&i| {
            (
                m.owners[i].name.is_some(),
                std::cmp::Reverse(m.owners[i].cells),
                i,
            )
        });
        let shown = order.len().min(view.rows);
        for &i in &order[..shown] {
            let ow = &m.owners[i];
            let key = ow.name.clone().unwrap_or_else(|| match ow.kind {
                FlashOwnerKind::Free => "(free)".into(),
                _ => "(unsold)".into(),
            });
            let lent_to = match ow.kind {
                FlashOwnerKind::Gssd => s
                    .gssds
                    .as_ref()
                    .and_then(|g| g.iter().find(|g| Some(g.id) == ow.gssd))
                    .and_then(|g| g.volume.as_ref().map(|v| (v, g.tenant.as_deref())))
                    .map_or("pool (not lent)".to_string(), |(v, t)| {
                        format!("volume {v} of {}", t.unwrap_or("?"))
                    }),
                _ => String::new(),
            };
            let _ = write!(
                o,
                r##"<tr data-row="owner" data-key="{}"><td><svg width="12" height="12"><rect width="12" height="12" fill="{}" stroke="#999"/></svg></td>{}{}{}{}</tr>"##,
                esc(&key),
                owner_colour(i, ow),
                td("label", &owner_label(ow)),
                td("kind", &format!("{:?}", ow.kind).to_lowercase()),
                td("lent_to", &lent_to),
                tdn("cells", &fmt_num(ow.cells)),
            );
        }
        o.push_str("</tbody></table></div>");
        if shown < order.len() {
            let _ = write!(
                o,
                r#"<p class="note">{} more owners not listed (hover over the map to see whose a block is).</p>"#,
                order.len() - shown
            );
        }
        o.push_str("</div>");
    }
    o.push_str("</section>");
}

/// The last interval's rate, if any.
fn last(r: &[Rate]) -> Option<&Rate> {
    r.last()
}

fn vssds(o: &mut String, s: &Snapshot, view: &View) {
    let _ = write!(
        o,
        r#"<section id="vssds"><h2>vSSDs ({})</h2><p class="note">Rates: the last sampling interval; the line: IOPS over the window. Click a row for latency, GC and its SLA curve.</p><div class="scroll"><table class="vssds"><thead><tr><th>name</th><th>tenant</th><th>kind</th><th class="n">channels</th><th class="n">capacity</th><th class="n">read IOPS</th><th class="n">write IOPS</th><th class="n">read /s</th><th class="n">write /s</th><th class="n">read</th><th class="n">written</th><th class="n">WA</th><th class="n">WA now</th><th class="n">GC runs</th><th class="n">free blocks</th><th class="n">erases</th><th>SLA</th><th>IOPS</th></tr></thead><tbody>"#,
        s.vssds.len()
    );
    for v in &s.vssds {
        let i = &v.info;
        let r = last(&v.rates);
        let selected = view.vssd.as_deref() == Some(i.name.as_str());
        // data-at: when the rates shown end (ns on the daemon's clock), to
        // match them with `GET /v1/vssds/{name}/rates`.
        let _ = write!(
            o,
            r#"<tr data-row="vssd" data-key="{n}" data-at="{}" tabindex="0"{}>"#,
            r.map_or(0, |r| r.at_ns),
            if selected { r#" class="selected""# } else { "" },
            n = esc(&i.name)
        );
        o.push_str(&td("name", &i.name));
        o.push_str(&td("tenant", i.tenant.as_deref().unwrap_or("")));
        o.push_str(&td(
            "kind",
            match i.kind {
                control::TenantKind::Regular => "regular",
                control::TenantKind::Harvest => "harvest",
                control::TenantKind::Ghost(_) => "gSSD",
            },
        ));
        o.push_str(&tdn("channels", &i.channels.len().to_string()));
        o.push_str(&tdn("capacity_bytes", &fmt_bytes(i.capacity_bytes)));
        o.push_str(&tdn("read_iops", &fmt_rate(r.map(|r| r.read_iops))));
        o.push_str(&tdn("write_iops", &fmt_rate(r.map(|r| r.write_iops))));
        o.push_str(&tdn(
            "read_bps",
            &r.map_or("—".into(), |r| {
                format!("{}/s", fmt_bytes(r.read_bps as u64))
            }),
        ));
        o.push_str(&tdn(
            "write_bps",
            &r.map_or("—".into(), |r| {
                format!("{}/s", fmt_bytes(r.write_bps as u64))
            }),
        ));
        match &v.stats {
            Some(st) => {
                o.push_str(&tdn("read_bytes", &fmt_bytes(st.io.read_bytes)));
                o.push_str(&tdn("write_bytes", &fmt_bytes(st.io.write_bytes)));
                o.push_str(&tdn(
                    "write_amplification",
                    &format!("{:.2}", st.write_amplification),
                ));
                o.push_str(&tdn(
                    "wa_now",
                    &r.and_then(|r| r.write_amplification)
                        .map_or("—".into(), |w| format!("{w:.2}")),
                ));
                o.push_str(&tdn("gc_runs", &fmt_num(st.ftl.gc_runs)));
                o.push_str(&tdn(
                    "free_blocks",
                    &format!(
                        "{} / {}",
                        fmt_num(st.ftl.free_blocks),
                        fmt_num(st.ftl.total_blocks)
                    ),
                ));
                o.push_str(&tdn(
                    "erase_count",
                    &format!("{}–{}", st.ftl.min_erase_count, st.ftl.max_erase_count),
                ));
            }
            None => {
                for f in [
                    "read_bytes",
                    "write_bytes",
                    "write_amplification",
                    "wa_now",
                    "gc_runs",
                    "free_blocks",
                    "erase_count",
                ] {
                    o.push_str(&tdn(f, "—"));
                }
            }
        }
        let sla = match i.sla.as_ref().and_then(|s| s.curve.as_ref()) {
            Some(c) => format!("{} points", c.points().len()),
            None if i.sla.is_some() => "unit only".into(),
            None => "—".into(),
        };
        o.push_str(&td("sla", &sla));
        let iops: Vec<f64> = v.rates.iter().map(|r| r.read_iops + r.write_iops).collect();
        let _ = write!(o, "<td>{}</td></tr>", sparkline(&iops));
    }
    o.push_str("</tbody></table></div></section>");
}

fn detail(o: &mut String, s: &Snapshot, view: &View) {
    let Some(name) = &view.vssd else {
        return;
    };
    let Some(row) = s.vssds.iter().find(|v| &v.info.name == name) else {
        let _ = write!(
            o,
            r#"<section id="detail"><p class="error">{}</p></section>"#,
            esc(&DashboardError::NoSuchVssd(name.clone()).to_string())
        );
        return;
    };
    let _ = write!(
        o,
        r#"<section id="detail" data-vssd="{n}"><h2>vSSD {n}</h2><div class="cols"><div>"#,
        n = esc(name)
    );
    if let Some(st) = &row.stats {
        o.push_str(r#"<h3>Modelled latency (since the last reset)</h3><table><thead><tr><th></th><th class="n">count</th><th class="n">p50</th><th class="n">p95</th><th class="n">p99</th><th class="n">p99.9</th><th class="n">max</th></tr></thead><tbody>"#);
        for (dir, l) in [
            ("read", &st.io.read_latency),
            ("write", &st.io.write_latency),
        ] {
            let _ = write!(
                o,
                r#"<tr data-row="latency" data-key="{dir}"><th>{dir}</th>"#
            );
            o.push_str(&tdn("count", &fmt_num(l.count)));
            for (f, v) in [
                ("p50_ns", l.p50_ns),
                ("p95_ns", l.p95_ns),
                ("p99_ns", l.p99_ns),
                ("p999_ns", l.p999_ns),
                ("max_ns", l.max_ns),
            ] {
                o.push_str(&tdn(
                    f,
                    &if l.count == 0 {
                        "—".into()
                    } else {
                        fmt_ns(v)
                    },
                ));
            }
            o.push_str("</tr>");
        }
        o.push_str("</tbody></table>");
        let window_gc: u64 = row.rates.iter().map(|r| r.gc_runs).sum();
        let _ = write!(
            o,
            r#"<h3>Garbage collection</h3><table><tbody><tr data-row="gc" data-key="{n}"><th>runs</th>{}<th>in the window</th>{}</tr><tr data-row="gc2" data-key="{n}"><th>pages moved</th>{}<th>block erases</th>{}</tr><tr data-row="gc3" data-key="{n}"><th>write amplification</th>{}<th>mapped pages</th>{}</tr></tbody></table>"#,
            tdn("gc_runs", &fmt_num(st.ftl.gc_runs)),
            tdn("gc_runs_window", &fmt_num(window_gc)),
            tdn("gc_pages_moved", &fmt_num(st.ftl.gc_pages_moved)),
            tdn("block_erases", &fmt_num(st.ftl.block_erases)),
            tdn(
                "write_amplification",
                &format!("{:.2}", st.write_amplification)
            ),
            tdn("mapped_pages", &fmt_num(st.ftl.mapped_pages)),
            n = esc(name),
        );
    }
    o.push_str("</div><div>");
    let tenant_curve = s
        .detail
        .as_ref()
        .and_then(|d| d.sla.as_ref())
        .and_then(|t| t.curve.as_ref());
    let unit_curve = s
        .detail
        .as_ref()
        .and_then(|d| d.unit_curve.as_ref())
        .map(|u| &u.curve);
    let points: Vec<(f64, f64)> = row
        .rates
        .iter()
        .map(|r| (r.write_ops_4k, r.read_ops_4k))
        .collect();
    let _ = write!(
        o,
        r#"<h3>SLA curve and measured operating points</h3><p class="note" data-f="operating_points" data-first-at="{}" data-last-at="{}">{} operating points over the window{}</p>{}"#,
        row.rates.first().map_or(0, |r| r.at_ns),
        row.rates.last().map_or(0, |r| r.at_ns),
        points.len(),
        if tenant_curve.is_none() {
            "; no curve of its own"
        } else {
            ""
        },
        sla_svg(tenant_curve, unit_curve, &points)
    );
    if let Some(st) = s.detail.as_ref().and_then(|d| d.stats.as_ref()) {
        let _ = write!(
            o,
            r#"<table><tbody><tr data-row="sched" data-key="{n}"><th>pieces</th>{}<th>delayed</th>{}<th>refused</th>{}<th>burst bytes</th>{}</tr></tbody></table>"#,
            tdn("pieces", &fmt_num(st.pieces)),
            tdn("delayed", &fmt_num(st.delayed)),
            tdn("refused", &fmt_num(st.refused)),
            tdn("burst_bytes", &fmt_bytes(st.burst_bytes)),
            n = esc(name),
        );
    }
    o.push_str("</div></div></section>");
}

fn harvest(o: &mut String, s: &Snapshot, view: &View) {
    let now = secs(s.now_ns);
    o.push_str(r#"<section id="harvest"><h2>Harvest pool</h2>"#);
    if !s.harvest_enabled {
        o.push_str(r#"<p class="note">The harvester is off ([harvest] enabled = false).</p>"#);
    }
    match &s.gssds {
        None => {
            o.push_str(r#"<p class="note">The gSSD pool is host-wide: an admin token sees it.</p>"#)
        }
        Some(g) => {
            let in_use = g.iter().filter(|g| g.in_use).count();
            let cap: u64 = g.iter().map(|g| g.capacity_bytes).sum();
            let bw: u64 = g.iter().map(|g| g.bandwidth as u64).sum();
            let _ = write!(
                o,
                r#"<table><tbody><tr data-row="pool" data-key="gssds"><th>gSSDs</th>{}<th>in use</th>{}<th>capacity</th>{}<th>bandwidth</th>{}</tr></tbody></table>"#,
                tdn("gssds", &fmt_num(g.len() as u64)),
                tdn("in_use", &fmt_num(in_use as u64)),
                tdn("capacity_bytes", &fmt_bytes(cap)),
                tdn("bandwidth", &format!("{} channels", fmt_num(bw))),
            );
            let mut sorted: Vec<&GssdInfo> = g.iter().collect();
            sorted.sort_by_key(|g| (g.expiry_s, g.id));
            let _ = write!(
                o,
                r#"<h3>gSSDs by expiry{}</h3><div class="scroll"><table class="gssds"><thead><tr><th class="n">id</th><th>lent by</th><th>state</th><th class="n">capacity</th><th class="n">bandwidth</th><th class="n">expiry</th><th>expires in</th><th>volume</th><th>tenant</th></tr></thead><tbody>"#,
                if sorted.len() > view.rows {
                    format!(
                        " (first {} of {}; the rest are counted above)",
                        view.rows,
                        sorted.len()
                    )
                } else {
                    String::new()
                }
            );
            for g in sorted.into_iter().take(view.rows) {
                let _ = write!(o, r#"<tr data-row="gssd" data-key="{}">"#, g.id);
                o.push_str(&tdn("id", &g.id.to_string()));
                o.push_str(&td("home", g.home.as_deref().unwrap_or("unsold")));
                o.push_str(&td("state", &g.state));
                o.push_str(&tdn("capacity_bytes", &fmt_bytes(g.capacity_bytes)));
                o.push_str(&tdn("bandwidth", &g.bandwidth.to_string()));
                o.push_str(&tdn("expiry_s", &g.expiry_s.to_string()));
                o.push_str(&td("expires_in", &fmt_secs(g.expiry_s as i64 - now)));
                o.push_str(&td("volume", g.volume.as_deref().unwrap_or("")));
                o.push_str(&td("tenant", g.tenant.as_deref().unwrap_or("")));
                o.push_str("</tr>");
            }
            o.push_str("</tbody></table></div>");
        }
    }
    let _ = write!(
        o,
        r#"<h3>Harvest volumes ({})</h3><div class="scroll"><table class="volumes"><thead><tr><th>name</th><th>tenant</th><th class="n">size</th><th class="n">bandwidth</th><th>state</th><th class="n">gSSDs</th><th>evict by</th><th>needed until</th><th class="n">written</th></tr></thead><tbody>"#,
        s.volumes.len()
    );
    for v in s.volumes.iter().take(view.rows) {
        let _ = write!(o, r#"<tr data-row="volume" data-key="{}">"#, esc(&v.name));
        o.push_str(&td("name", &v.name));
        o.push_str(&td("tenant", &v.tenant));
        o.push_str(&tdn("size_bytes", &fmt_bytes(v.size_bytes)));
        o.push_str(&tdn("bandwidth", &v.bandwidth.to_string()));
        o.push_str(&td("state", &v.state));
        let ids: Vec<String> = v.segments.iter().map(|s| s.gssd.to_string()).collect();
        o.push_str(&tdn("gssds", &ids.join(", ")));
        o.push_str(&td(
            "evict_by_s",
            &v.evict_by_s.map_or(String::new(), |e| {
                format!("{e} (in {})", fmt_secs(e as i64 - now))
            }),
        ));
        o.push_str(&td(
            "until_s",
            &format!("{} (in {})", v.until_s, fmt_secs(v.until_s as i64 - now)),
        ));
        o.push_str(&tdn("write_bytes", &fmt_bytes(v.io.write_bytes)));
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table></div>");
    let migrations: Vec<_> = s
        .volumes
        .iter()
        .flat_map(|v| v.migrations.iter().map(move |m| (v, m)))
        .collect();
    let _ = write!(
        o,
        r#"<h3>Migrations in progress ({})</h3>"#,
        migrations.len()
    );
    if !migrations.is_empty() {
        o.push_str(r#"<table class="migrations"><thead><tr><th>volume</th><th class="n">offset</th><th class="n">from gSSD</th><th class="n">to gSSD</th><th class="n">copied</th><th class="n">of</th><th>progress</th></tr></thead><tbody>"#);
        for (v, m) in migrations.into_iter().take(view.rows) {
            let _ = write!(
                o,
                r#"<tr data-row="migration" data-key="{}@{}">"#,
                esc(&v.name),
                m.offset
            );
            o.push_str(&td("volume", &v.name));
            o.push_str(&tdn("offset", &m.offset.to_string()));
            o.push_str(&tdn("from", &m.from.to_string()));
            o.push_str(&tdn("to", &m.to.to_string()));
            o.push_str(&tdn("copied", &fmt_bytes(m.copied)));
            o.push_str(&tdn("total", &fmt_bytes(m.total)));
            let pct = if m.total == 0 {
                100.0
            } else {
                m.copied as f64 * 100.0 / m.total as f64
            };
            let _ = write!(
                o,
                r#"<td><progress max="{}" value="{}"></progress> {pct:.0}%</td></tr>"#,
                m.total, m.copied
            );
        }
        o.push_str("</tbody></table>");
    }
    o.push_str("</section>");
}

fn events(o: &mut String, s: &Snapshot, view: &View) {
    let _ = write!(
        o,
        r#"<section id="events"><h2>Event log (<span data-f="events_total">{}</span>)</h2><div class="scroll"><table class="events"><thead><tr><th class="n">seq</th><th>at</th><th>kind</th><th class="n">gSSD</th><th>volume</th><th>home</th><th>detail</th></tr></thead><tbody>"#,
        s.events_total
    );
    // Newest first, at most `rows`.
    for e in s.events.iter().rev().take(view.rows) {
        let _ = write!(o, r#"<tr data-row="event" data-key="{}">"#, e.seq);
        o.push_str(&tdn("seq", &e.seq.to_string()));
        o.push_str(&td("at", &fmt_secs(secs(e.at_ns))));
        o.push_str(&td("kind", e.kind.name()));
        o.push_str(&tdn(
            "gssd",
            &e.gssd.map_or(String::new(), |g| g.to_string()),
        ));
        o.push_str(&td("volume", e.volume.as_deref().unwrap_or("")));
        o.push_str(&td("home", e.home.as_deref().unwrap_or("")));
        o.push_str(&td("detail", &e.detail));
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table></div></section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{snapshot, Shape};

    fn small() -> Snapshot {
        snapshot(
            Shape {
                vssds: 12,
                gssds: 150,
                devices: 2,
                channels: 8,
                blocks_per_plane: 64,
                samples: 10,
            },
            7,
            5000,
        )
    }

    #[test]
    fn long_tables_are_capped_and_say_how_many_are_left_out() {
        let s = small();
        let html = render_body(&s, &View::parse(None, Some(20), 200).unwrap());
        assert_eq!(html.matches(r#"data-row="gssd""#).count(), 20);
        assert!(html.contains("(first 20 of 150; the rest are counted above)"));
        assert_eq!(html.matches(r#"data-row="event""#).count(), 20);
        assert!(html.contains(r#"<span data-f="events_total">1000</span>"#));
        assert_eq!(html.matches(r#"data-row="vssd""#).count(), 12);
        assert!(
            html.contains("more owners not listed"),
            "the legend is capped too"
        );
    }

    #[test]
    fn migrations_show_their_progress_and_evictions_their_deadline() {
        let s = small();
        let html = render_body(&s, &View::parse(None, None, 200).unwrap());
        // Synthetic volume of gSSD 1 is a third copied to gSSD 2; gSSD 1's is
        // also evicted, due 240 s from now.
        let total = s.gssds.as_ref().unwrap()[0].capacity_bytes;
        assert!(
            html.contains(&format!(
                r#"<progress max="{total}" value="{}"></progress> 33%"#,
                total / 3
            )),
            "{html}"
        );
        assert!(html.contains(r#"<td data-f="evict_by_s">5240 (in 4m 00s)</td>"#));
    }

    #[test]
    fn a_tenant_page_has_no_host_wide_views_and_text_is_escaped() {
        let mut s = small();
        s.viewer = Viewer::Tenant("<b>t</b>".into());
        s.flash = None;
        s.gssds = None;
        s.events[999].detail = "<script>alert(1)</script>".into();
        let html = render_body(&s, &View::parse(None, None, 200).unwrap());
        assert!(html.contains("The flash map is host-wide"));
        assert!(html.contains("The gSSD pool is host-wide"));
        assert!(!html.contains("<svg class=\"flashmap\""));
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"));
        assert!(html.contains("tenant &lt;b&gt;t&lt;/b&gt;"));
    }

    #[test]
    fn the_detail_view_draws_the_curve_and_one_point_per_interval() {
        let s = small();
        let name = s.vssds[0].info.name.clone();
        let html = render_body(&s, &View::parse(Some(name.clone()), None, 200).unwrap());
        assert!(html.contains(&format!(r#"<section id="detail" data-vssd="{name}">"#)));
        assert!(html.contains("10 operating points over the window"));
        let svg = &html[html.find(r#"<svg class="sla""#).unwrap()..];
        assert_eq!(svg.matches("<circle class=\"op").count(), 10);
        assert!(svg.contains("tenant-curve"));
        // Unknown: said so in the page, no other vSSD's data.
        let html = render_body(&s, &View::parse(Some("nope".into()), None, 200).unwrap());
        assert!(
            html.contains(r#"no vSSD \"nope\" to show in detail"#)
                || html.contains("no vSSD &quot;nope&quot;")
        );
    }

    #[test]
    fn bad_queries_are_refused_with_the_reason() {
        assert!(matches!(
            View::parse(Some("a b".into()), None, 200),
            Err(DashboardError::BadQuery(m)) if m.contains("not a vSSD name")
        ));
        assert!(View::parse(None, Some(0), 200).is_err());
        assert!(View::parse(None, Some(201), 200).is_err());
        assert_eq!(
            View::parse(Some(String::new()), None, 200).unwrap(),
            View {
                vssd: None,
                rows: 200
            }
        );
    }
}
