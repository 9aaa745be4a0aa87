//! Number formatting and HTML escaping shared by every view, so that what a
//! test computes from the API's JSON is exactly what the page shows.

/// Escapes text for HTML element content and double-quoted attributes.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// Bytes in binary units with one decimal (`9.5 MiB`); below 1 KiB, exact.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

/// An integer with thin-space-free thousands separators (`12,345`).
pub fn fmt_num(n: u64) -> String {
    let s = n.to_string();
    let mut o = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    o
}

/// A rate with at most one decimal, or `—` when there is none yet.
pub fn fmt_rate(r: Option<f64>) -> String {
    match r {
        Some(v) if v.is_finite() => {
            if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        }
        _ => "—".into(),
    }
}

/// Nanoseconds as µs or ms, for latency percentiles.
pub fn fmt_ns(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

/// Seconds as `1h 02m`, `3m 05s` or `42s`; negative ones as `-` before it.
pub(crate) fn fmt_secs(s: i64) -> String {
    let (sign, s) = if s < 0 { ("-", -s) } else { ("", s) };
    if s >= 3600 {
        format!("{sign}{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{sign}{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{sign}{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn numbers_format_as_documented() {
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(9_961_472), "9.5 MiB");
        assert_eq!(fmt_bytes(4 << 30), "4.0 GiB");
        assert_eq!(fmt_num(0), "0");
        assert_eq!(fmt_num(1234567), "1,234,567");
        assert_eq!(fmt_num(123), "123");
        assert_eq!(fmt_rate(None), "—");
        assert_eq!(fmt_rate(Some(3.25)), "3.2");
        assert_eq!(fmt_rate(Some(1234.4)), "1234");
        assert_eq!(fmt_secs(3725), "1h 02m");
        assert_eq!(fmt_secs(-65), "-1m 05s");
        assert_eq!(fmt_ns(250_000), "250 µs");
    }
}
