//! Printing for people (aligned tables, bars) and for scripts (JSON), and progress bars.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Prints an error chain to stderr: `error: outer: inner: …`.
pub fn print_error(error: &anyhow::Error) {
    let mut message = format!("error: {error}");
    for cause in error.chain().skip(1) {
        message.push_str(&format!(": {cause}"));
    }
    eprintln!("{message}");
}

/// A progress bar on stderr for `total` steps; invisible when stderr is not a terminal or the
/// work is small (under about a second).
pub fn progress(total: u64, message: &str, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({eta} left)")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

/// A plain-text table with right-aligned numeric columns.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    left_aligned: Vec<bool>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            left_aligned: vec![false; headers.len()],
        }
    }

    /// Marks columns (by index) as text, aligned left.
    pub fn left(mut self, columns: &[usize]) -> Table {
        for &c in columns {
            self.left_aligned[c] = true;
        }
        self
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The rows under the headers, aligned ([`optio_sim::report::aligned`]).
    pub fn render(&self) -> String {
        optio_sim::report::aligned(&self.headers, &self.rows, |column| {
            self.left_aligned.get(column).copied().unwrap_or(false)
        })
    }
}

/// Formats a byte count with binary units.
pub fn bytes(value: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = value;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{v:.0} B") } else { format!("{v:.2} {}", UNITS[unit]) }
}

/// An ASCII histogram: one line per bin with a bar scaled to `width` characters.
pub fn histogram(histogram: &optio_placement::stats::Histogram, width: usize) -> String {
    let max = histogram.counts.iter().copied().max().unwrap_or(0).max(1);
    let mut out = String::new();
    for (lower, count) in histogram.lower.iter().zip(&histogram.counts) {
        let upper = lower + histogram.width;
        let label = if histogram.width == 1.0 {
            format!("{lower:>8.0}")
        } else {
            format!("{lower:>8.1}–{upper:<8.1}")
        };
        let bar = "#".repeat((count * width).div_ceil(max).min(width));
        out.push_str(&format!("  {label} {count:>6} {bar}\n"));
    }
    out
}

/// Parses durations like `20s`, `500ms`, `10m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration; write e.g. 500ms, 20s, 10m, 1h"))?;
    let seconds = match unit.trim() {
        "ms" => number / 1e3,
        "" | "s" => number,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        other => {
            return Err(format!("unknown duration unit '{other}' in '{text}'; use ms, s, m or h"));
        }
    };
    if !seconds.is_finite() || !(0.0..=1e9).contains(&seconds) {
        return Err(format!("'{text}' is out of range (0 to 1e9 seconds)"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// Parses sizes like `4MiB`, `500GB`, `4096` (a `String` error: clap's value parsers and the
/// bench options print it).
pub fn parse_size(text: &str) -> Result<u64, String> {
    optio_mapfile::parse_size(text).map_err(|e| e.to_string())
}

/// Restores the default action of SIGPIPE (the Rust runtime ignores it), so that a write to a
/// pipe whose reader has gone (`optio place … | head`) ends the process silently, with the
/// status a shell expects, instead of a "Broken pipe" error or a panic in `println!`.
#[allow(unsafe_code)]
pub fn die_quietly_on_closed_pipe() {
    // SAFETY: `signal` with `SIG_DFL` only changes this process's disposition of SIGPIPE; it
    // is called at the start of `main`, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// mimalloc's `mi_option_purge_delay` (its index in `mi_option_t`, the same in mimalloc 2 and
/// 3: the enum keeps its retired options so that indexes do not move; `libmimalloc-sys` 0.1.49
/// names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps memory this process frees for `ms` milliseconds before giving it back to the system
/// (mimalloc 3's default: 1 s). For a process that allocates and frees hundreds of MB per
/// request — the console judging a change at 1,000 devices — taking the memory back each time
/// costs the kernel zeroing every page again (13 % of a what-if's CPU, perf).
#[allow(unsafe_code)]
pub fn keep_freed_memory_for(ms: i32) {
    // SAFETY: `mi_option_set` stores an option's value, which mimalloc reads when it next
    // purges; any thread may call it at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms.into()) }
}

/// How long freed memory is kept (ms; −1: never given back).
#[cfg(test)]
#[allow(unsafe_code)]
fn freed_memory_kept_ms() -> i64 {
    // SAFETY: `mi_option_get` reads an option's value; any thread may call it at any time.
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option set is mimalloc's purge delay: its default (10 ms) read back, then the
    /// value set.
    #[test]
    fn freed_memory_is_kept_as_long_as_asked() {
        let before = freed_memory_kept_ms();
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // mimalloc 2's default purge delay, or mimalloc 3's: else option 15 is not it.
            assert!(before == 10 || before == 1000, "option 15 reads {before}");
        }
        keep_freed_memory_for(30_000);
        assert_eq!(freed_memory_kept_ms(), 30_000);
        keep_freed_memory_for(i32::try_from(before).expect("a delay in ms"));
        assert_eq!(freed_memory_kept_ms(), before);
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("3 fortnights").unwrap_err().contains("unknown duration unit"));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1e300h").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        // One syntax with maps: PiB, fractions, single letters.
        assert_eq!(parse_size("2PiB"), Ok(2 << 50));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("4t"), Ok(4 << 40));
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("99999EiB").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["name", "n"]).left(&[0]);
        t.row(vec!["a".into(), "10".into()]);
        t.row(vec!["bbb".into(), "2".into()]);
        assert_eq!(t.render(), "name   n\na     10\nbbb    2\n");
    }
}
