//! Progress bars for long commands, shown only to a person watching.
//!
//! `sim predict`, `sim harvest` and `sim cache` on large traces run for minutes.
//! They draw a bar on stderr when stderr is a terminal and the output is not for
//! a script (`--json`); otherwise the bar is hidden and nothing extra is
//! written. Their one-line summaries on stderr follow the same rule (check
//! [`interactive`] before printing one). Stdout is never touched, so the tables
//! and JSON that tests and scripts parse are the same with or without a bar.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether a progress bar would be seen: stderr is a terminal and the caller
/// is not `quiet` (e.g. `--json`). Status lines meant only for a person
/// watching (a run's summary on stderr) are printed under the same condition.
pub fn interactive(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar of `len` steps drawn on stderr with the indicatif `template`, or a
/// hidden one (every call on it is a cheap no-op) when it would not be seen
/// (see [`interactive`]). It redraws a few times a second on its own, so the
/// elapsed time moves even while no step completes.
pub fn bar(len: u64, template: &str, quiet: bool) -> ProgressBar {
    if !interactive(quiet) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("progress template")
            .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_bars_are_hidden_and_count() {
        let pb = bar(10, "{bar} {pos}/{len}", true);
        assert!(pb.is_hidden());
        pb.inc(3);
        assert_eq!(pb.position(), 3);
        pb.finish_and_clear();
    }
}
