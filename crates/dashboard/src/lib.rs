//! The operator dashboard: one page that shows the flash, the tenants, the
//! harvest pool and the SLAs at a glance.
//!
//! Why a crate of its own: the page is a view of data the API already has,
//! and a view is easiest to get right, and to test, as pure functions from
//! that data to text. Nothing here does I/O, reads a clock or takes a lock:
//! the daemon (`flexssd/src/dashboard_web.rs`) builds a [`Snapshot`] for the
//! caller (filtered by its token exactly as the JSON routes filter), and
//! [`render_body`] turns it into an HTML fragment with inline SVG. The page
//! itself ([`page`], [`APP_JS`], [`STYLE_CSS`]) is static and holds no data:
//! its small script fetches the fragment with the caller's bearer token and
//! swaps it in every `refresh_ms`, so the page works without a build step
//! and with token authentication (a browser cannot attach a bearer token to
//! a plain navigation, but a script's `fetch` can).
//!
//! Rates over the last minutes come from [`History`], a ring of counter
//! samples the daemon takes every `sample_ms` on its own clock.

mod error;
mod fleet;
mod format;
mod history;
mod render;
mod svg;
pub mod synthetic;

pub use error::DashboardError;
pub use fleet::{render_fleet, FleetHost};
pub use format::{fmt_bytes, fmt_ns, fmt_num, fmt_rate};
pub use history::{History, Rate, Sample};
pub use render::{render_body, Snapshot, View, Viewer, VssdRow};
pub use svg::{flash_map_svg, owner_colour, sla_svg};

/// The page's script: fetches the fragment with the token, swaps it in,
/// keeps the selection and the wear layer across updates, times itself.
pub const APP_JS: &str = include_str!("../assets/app.js");

/// The page's style sheet.
pub const STYLE_CSS: &str = include_str!("../assets/style.css");

/// The page shell: no data, only where to fetch it (`data_path`, a
/// same-origin path) and how often. `title` is escaped.
pub fn page(title: &str, data_path: &str, refresh_ms: u64) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{t}</title>
<link rel="stylesheet" href="/dashboard/style.css">
<script src="/dashboard/app.js" defer></script>
</head>
<body>
<header>
<h1>{t}</h1>
<span id="status" class="status">loading…</span>
<label class="toggle"><input type="checkbox" id="wear-toggle"> wear (erase counts)</label>
<button type="button" id="logout" hidden>forget token</button>
</header>
<form id="login" hidden autocomplete="off">
<p>This API needs a token. It is kept in this tab only (sessionStorage) and sent as
<code>Authorization: Bearer</code>, never in a URL.</p>
<label>API token <input type="password" id="token" name="token" autocomplete="off" spellcheck="false"></label>
<button type="submit">Open</button>
<p id="login-error" class="error"></p>
</form>
<main id="main" data-src="{src}" data-refresh-ms="{refresh_ms}"></main>
</body>
</html>
"#,
        t = format::esc(title),
        src = format::esc(data_path),
    )
}
