//! Inline SVG: the flash map, SLA curves with operating points, sparklines.
//! Shapes carry presentation attributes only (no `style`), so the page's
//! content security policy can forbid inline styles.

use std::fmt::Write as _;

use control::{FlashMap, FlashOwner, FlashOwnerKind};
use sla::Curve;

use crate::format::{esc, fmt_num};

/// Pixels per map row (one channel).
const ROW_H: u32 = 14;
/// Widest the map is drawn, pixels.
const MAP_W: u32 = 960;

const VSSD: [&str; 10] = [
    "#4e79a7", "#59a14f", "#76b7b2", "#3b6ea5", "#8cd17d", "#499894", "#86bcb6", "#2f5f8a",
    "#6b9f3b", "#5c8fc9",
];
const GSSD: [&str; 6] = [
    "#f28e2b", "#e15759", "#ff9d9a", "#d37295", "#ffbe7d", "#b6992d",
];

/// The fill of owner `i` of a map: free and unsold are greys, regular vSSDs
/// blues and greens, harvest tenants purple, gSSDs warm colours.
pub fn owner_colour(i: usize, o: &FlashOwner) -> &'static str {
    match o.kind {
        FlashOwnerKind::Free => "#e6e6e6",
        FlashOwnerKind::Unsold => "#ffffff",
        FlashOwnerKind::Harvest => "#9467bd",
        FlashOwnerKind::Vssd => VSSD[i % VSSD.len()],
        FlashOwnerKind::Gssd => GSSD[i % GSSD.len()],
    }
}

/// Who an owner is, in words (for tooltips and the legend).
pub(crate) fn owner_label(o: &FlashOwner) -> String {
    let name = o.name.as_deref().unwrap_or("");
    let tenant = o
        .tenant
        .as_deref()
        .map_or(String::new(), |t| format!(" (tenant {t})"));
    match o.kind {
        FlashOwnerKind::Free => "free".into(),
        FlashOwnerKind::Unsold => "unsold".into(),
        FlashOwnerKind::Vssd => format!("vSSD {name}{tenant}"),
        FlashOwnerKind::Harvest => format!("harvest vSSD {name}{tenant}"),
        FlashOwnerKind::Gssd => format!(
            "gSSD {} lent by {}",
            o.gssd.unwrap_or(0),
            o.home.as_deref().unwrap_or("unsold channels")
        ),
    }
}

/// The map of one device: a row per channel, a column per block index, one
/// rectangle per run of cells with the same owner (so a device costs about
/// as many shapes as it has extents), and a hidden wear layer (class `wear`:
/// a bitmap of one pixel per cell) the page's toggle shows.
pub fn flash_map_svg(m: &FlashMap) -> String {
    let bpp = m.blocks_per_plane.max(1);
    let cell_w = (MAP_W as f64 / bpp as f64).clamp(0.25, 12.0);
    let w = (cell_w * bpp as f64).ceil() as u32 + 40;
    let h = m.channels * ROW_H + 4;
    let mut s = String::with_capacity(64 * m.channels as usize * 8);
    let _ = write!(
        s,
        r#"<svg class="flashmap" data-device="{d}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="flash map of {d}">"#,
        d = esc(&m.device)
    );
    s.push_str(r#"<g class="owners">"#);
    for c in 0..m.channels {
        let y = c * ROW_H;
        let _ = write!(
            s,
            r##"<text x="0" y="{}" font-size="10" fill="#555">ch{c}</text>"##,
            y + 10
        );
        let row = &m.cells[(c * bpp) as usize..((c + 1) * bpp) as usize];
        let mut start = 0usize;
        while start < row.len() {
            let o = row[start];
            let mut end = start + 1;
            while end < row.len() && row[end] == o {
                end += 1;
            }
            let owner = &m.owners[o as usize];
            let x = 40.0 + start as f64 * cell_w;
            let _ = write!(
                s,
                r##"<rect x="{x:.1}" y="{y}" width="{:.1}" height="{}" fill="{}"><title>ch{c} {start}..{end}: {}</title></rect>"##,
                (end - start) as f64 * cell_w,
                ROW_H - 2,
                owner_colour(o as usize, owner),
                esc(&owner_label(owner)),
            );
            start = end;
        }
    }
    s.push_str("</g>");
    let max = m.erase_max.iter().copied().max().unwrap_or(0);
    let _ = write!(
        s,
        r#"<image class="wear" x="40" y="0" width="{:.2}" height="{}" preserveAspectRatio="none" data-max-erase="{max}" href="data:image/bmp;base64,{}"><title>wear: erase counts 0 (yellow) to {max} (red)</title></image>"#,
        cell_w * bpp as f64,
        m.channels * ROW_H,
        base64(&wear_bmp(m, max)),
    );
    s.push_str("</svg>");
    s
}

/// The wear layer as a 24-bit BMP, one pixel per cell (a picture is a few
/// bytes per cell where a shape is a hundred, which matters at 10^5 cells),
/// a row of pixels per channel, stretched over the owner layer.
fn wear_bmp(m: &FlashMap, max: u32) -> Vec<u8> {
    let w = m.blocks_per_plane.max(1) as usize;
    let h = m.channels as usize;
    let stride = (w * 3).div_ceil(4) * 4;
    let size = 54 + stride * h;
    let mut b = Vec::with_capacity(size);
    let u32le = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
    b.extend_from_slice(b"BM");
    u32le(&mut b, size as u32);
    u32le(&mut b, 0);
    u32le(&mut b, 54);
    u32le(&mut b, 40);
    u32le(&mut b, w as u32);
    u32le(&mut b, h as u32); // positive: bottom-up rows
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&24u16.to_le_bytes());
    for v in [0u32, (stride * h) as u32, 2835, 2835, 0, 0] {
        u32le(&mut b, v);
    }
    for c in (0..h).rev() {
        let start = b.len();
        for x in 0..w {
            let (r, g, bl) = heat_rgb(m.erase_max[c * w + x], max);
            b.extend_from_slice(&[bl, g, r]);
        }
        b.resize(start + stride, 0);
    }
    b
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::with_capacity(data.len().div_ceil(3) * 4);
    for ch in data.chunks(3) {
        let n = (ch[0] as u32) << 16
            | (*ch.get(1).unwrap_or(&0) as u32) << 8
            | *ch.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= ch.len() {
                o.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                o.push('=');
            }
        }
    }
    o
}

/// Yellow (least worn) to red (most worn).
fn heat_rgb(v: u32, max: u32) -> (u8, u8, u8) {
    let t = if max == 0 { 0.0 } else { v as f64 / max as f64 };
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    (lerp(255.0, 200.0), lerp(235.0, 20.0), lerp(120.0, 20.0))
}

/// Plot size of an SLA chart, pixels.
const SLA_W: f64 = 360.0;
const SLA_H: f64 = 240.0;
const PAD: f64 = 44.0;

/// An SLA chart: write 4 KiB ops/s across, read ops/s up; the tenant's curve
/// (solid), the unit's curve (dashed), and the measured operating points
/// `(write, read)` (the last one larger). Points above the tenant's curve are
/// drawn red (class `outside`).
pub fn sla_svg(tenant: Option<&Curve>, unit: Option<&Curve>, points: &[(f64, f64)]) -> String {
    let mut xmax: f64 = 1.0;
    let mut ymax: f64 = 1.0;
    for c in [tenant, unit].into_iter().flatten() {
        for &(w, r) in c.points() {
            xmax = xmax.max(w);
            ymax = ymax.max(r);
        }
    }
    for &(w, r) in points {
        xmax = xmax.max(w);
        ymax = ymax.max(r);
    }
    xmax *= 1.1;
    ymax *= 1.1;
    let px = |w: f64| PAD + w / xmax * SLA_W;
    let py = |r: f64| PAD / 2.0 + SLA_H - r / ymax * SLA_H;
    let (tw, th) = (SLA_W + PAD + 10.0, SLA_H + PAD + 10.0);
    let mut s = format!(
        r##"<svg class="sla" xmlns="http://www.w3.org/2000/svg" width="{tw}" height="{th}" viewBox="0 0 {tw} {th}" role="img" aria-label="SLA curve"><rect x="{PAD}" y="{}" width="{SLA_W}" height="{SLA_H}" fill="#fafafa" stroke="#ccc"/>"##,
        PAD / 2.0
    );
    let _ = write!(
        s,
        r##"<text x="{}" y="{}" font-size="11" text-anchor="middle" fill="#333">write 4 KiB ops/s (max {})</text><text x="10" y="{}" font-size="11" fill="#333" transform="rotate(-90 10 {})" text-anchor="middle">read ops/s (max {})</text>"##,
        PAD + SLA_W / 2.0,
        th - 6.0,
        fmt_num(xmax as u64),
        PAD / 2.0 + SLA_H / 2.0,
        PAD / 2.0 + SLA_H / 2.0,
        fmt_num(ymax as u64),
    );
    let line = |c: &Curve, class: &str, colour: &str, dash: &str| {
        let pts: Vec<String> = c
            .points()
            .iter()
            .map(|&(w, r)| format!("{:.1},{:.1}", px(w), py(r)))
            .collect();
        format!(
            r#"<polyline class="{class}" points="{}" fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}" data-points="{}"/>"#,
            pts.join(" "),
            esc(&c
                .points()
                .iter()
                .map(|&(w, r)| format!("{w}:{r}"))
                .collect::<Vec<_>>()
                .join(","))
        )
    };
    if let Some(u) = unit {
        s.push_str(&line(u, "unit-curve", "#888", "5,4"));
    }
    if let Some(t) = tenant {
        s.push_str(&line(t, "tenant-curve", "#1f77b4", "none"));
    }
    for (i, &(w, r)) in points.iter().enumerate() {
        let outside = tenant.is_some_and(|c| c.eval(w).is_none_or(|lim| r > lim * 1.0001));
        let last = i + 1 == points.len();
        let _ = write!(
            s,
            r##"<circle class="op{}" cx="{:.1}" cy="{:.1}" r="{}" fill="{}" fill-opacity="{}"><title>{w:.0} writes/s, {r:.0} reads/s</title></circle>"##,
            if outside { " outside" } else { "" },
            px(w),
            py(r),
            if last { 5 } else { 3 },
            if outside { "#d62728" } else { "#2ca02c" },
            if last { "1" } else { "0.5" },
        );
    }
    s.push_str("</svg>");
    s
}

/// A small line of `values` (e.g. IOPS over the window), scaled to its max.
pub(crate) fn sparkline(values: &[f64]) -> String {
    const W: f64 = 120.0;
    const H: f64 = 22.0;
    // At most 40 points: the mean of each bucket of the window.
    let per = values.len().div_ceil(40).max(1);
    let values: Vec<f64> = values
        .chunks(per)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect();
    if values.len() < 2 {
        return format!(r#"<svg class="spark" width="{W}" height="{H}"></svg>"#);
    }
    let max = values.iter().copied().fold(0.0_f64, f64::max).max(1e-9);
    let step = W / (values.len() - 1) as f64;
    let pts: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.0},{:.1}",
                i as f64 * step,
                H - 1.0 - v / max * (H - 2.0)
            )
        })
        .collect();
    format!(
        r##"<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}"><polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="1.2"/></svg>"##,
        pts.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(kind: FlashOwnerKind, name: Option<&str>) -> FlashOwner {
        FlashOwner {
            kind,
            name: name.map(str::to_string),
            tenant: None,
            gssd: None,
            home: None,
            cells: 0,
        }
    }

    #[test]
    fn the_map_draws_one_rect_per_run_and_a_wear_layer() {
        let m = FlashMap {
            device: "ssd0".into(),
            channels: 2,
            blocks_per_plane: 4,
            blocks_per_cell: 2,
            owners: vec![
                owner(FlashOwnerKind::Free, None),
                owner(FlashOwnerKind::Unsold, None),
                owner(FlashOwnerKind::Vssd, Some("a<b")),
            ],
            cells: vec![2, 2, 2, 0, 1, 1, 1, 1],
            erase_max: vec![0, 1, 2, 3, 0, 0, 0, 9],
        };
        let s = flash_map_svg(&m);
        let owners = s.split(r#"<g class="wear""#).next().unwrap();
        assert_eq!(owners.matches("<rect").count(), 3, "{s}");
        assert!(s.contains("ch0 0..3: vSSD a&lt;b"), "{s}");
        assert!(s.contains(r#"data-max-erase="9""#));
        // 4 pixels of 3 bytes per row, padded to 12; a row per channel,
        // bottom-up: channel 1 first in the file.
        let bmp = wear_bmp(&m, 9);
        assert_eq!(bmp.len(), 54 + 12 * 2);
        assert_eq!(&bmp[54 + 9..54 + 12], &[20, 20, 200]); // most worn: red (BGR)
        assert_eq!(&bmp[54 + 12..54 + 15], &[120, 235, 255]); // unworn: yellow
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"Man"), "TWFu");
    }

    #[test]
    fn points_above_the_tenant_curve_are_marked_outside() {
        let c = Curve::new(vec![(0.0, 1000.0), (100.0, 0.0)]).unwrap();
        let s = sla_svg(
            Some(&c),
            None,
            &[(50.0, 400.0), (50.0, 600.0), (200.0, 0.0)],
        );
        assert_eq!(s.matches(r#"class="op""#).count(), 1, "{s}");
        assert_eq!(s.matches(r#"class="op outside""#).count(), 2, "{s}");
        assert!(s.contains(r#"data-points="0:1000,100:0""#), "{s}");
    }
}
