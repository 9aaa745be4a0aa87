//! The fleet scheduler's page: every host with its state (alive or lost),
//! what is booked on it, and a link to its own dashboard, which shows the
//! same views for that host (and asks for that host's token).

use std::fmt::Write as _;

use crate::format::{esc, fmt_num};

/// What the fleet page shows about one host (from the scheduler's
/// `GET /v1/cluster/hosts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetHost {
    /// Host id.
    pub id: String,
    /// `alive` or `lost`.
    pub state: String,
    /// Its API base URL, when it is registered (alive).
    pub api: Option<String>,
    /// vSSDs booked on it.
    pub vssds: usize,
    /// Channels booked.
    pub booked_channels: u32,
    /// Channels on its devices.
    pub total_channels: u32,
    /// gSSDs it publishes.
    pub gssds: usize,
}

/// Whether `url` may be a link target: plain http(s), nothing a browser
/// would run.
fn linkable(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://"))
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '<')
}

/// The fleet's fragment: a summary and a table of hosts.
pub fn render_fleet(hosts: &[FleetHost], leader: Option<&str>) -> String {
    let alive = hosts.iter().filter(|h| h.state == "alive").count();
    let mut o = String::with_capacity(1024 + hosts.len() * 400);
    let _ = write!(
        o,
        r#"<div id="dash" data-viewer="fleet"><p class="summary">Fleet: {} hosts, {alive} alive, {} lost · active scheduler {}</p><section id="hosts"><h2>Hosts</h2><div class="scroll"><table class="hosts"><thead><tr><th>host</th><th>state</th><th class="n">vSSDs</th><th class="n">channels booked</th><th class="n">gSSDs</th><th>its dashboard</th></tr></thead><tbody>"#,
        hosts.len(),
        hosts.len() - alive,
        esc(leader.unwrap_or("none"))
    );
    for h in hosts {
        let _ = write!(
            o,
            r#"<tr data-row="host" data-key="{id}" class="{st}"><td data-f="id">{id}</td><td data-f="state"><span class="badge {st}">{st}</span></td><td class="n" data-f="vssds">{}</td><td class="n" data-f="channels">{} / {}</td><td class="n" data-f="gssds">{}</td>"#,
            fmt_num(h.vssds as u64),
            fmt_num(h.booked_channels as u64),
            fmt_num(h.total_channels as u64),
            fmt_num(h.gssds as u64),
            id = esc(&h.id),
            st = esc(&h.state),
        );
        match h.api.as_deref().filter(|a| linkable(a)) {
            Some(a) => {
                let url = format!("{}/dashboard", a.trim_end_matches('/'));
                let _ = write!(
                    o,
                    r#"<td data-f="link"><a href="{u}" target="_blank" rel="noopener noreferrer">{u}</a></td></tr>"#,
                    u = esc(&url)
                );
            }
            None => o.push_str(r#"<td data-f="link">—</td></tr>"#),
        }
    }
    o.push_str("</tbody></table></div></section></div>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_link_to_their_own_dashboards_and_lost_ones_do_not() {
        let hosts = vec![
            FleetHost {
                id: "h1".into(),
                state: "alive".into(),
                api: Some("http://10.0.0.1:8740/".into()),
                vssds: 3,
                booked_channels: 6,
                total_channels: 16,
                gssds: 2,
            },
            FleetHost {
                id: "h2".into(),
                state: "lost".into(),
                api: None,
                vssds: 1,
                booked_channels: 2,
                total_channels: 0,
                gssds: 0,
            },
            FleetHost {
                id: "h3".into(),
                state: "alive".into(),
                api: Some("javascript:alert(1)".into()),
                vssds: 0,
                booked_channels: 0,
                total_channels: 16,
                gssds: 0,
            },
        ];
        let s = render_fleet(&hosts, Some("http://10.0.0.9:8750"));
        assert!(
            s.contains(r#"href="http://10.0.0.1:8740/dashboard""#),
            "{s}"
        );
        assert!(s.contains("3 hosts, 2 alive, 1 lost"), "{s}");
        assert!(!s.contains("javascript:"), "{s}");
        assert!(s.contains(r#"<span class="badge lost">lost</span>"#));
    }
}
