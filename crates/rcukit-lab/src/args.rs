//! Parsers for flag values (thread counts, durations), shared by the command line and the
//! flags of each experiment. A bad value is a message for clap to print, never a panic.

use std::time::Duration;

/// Parse a thread count (at least 1).
pub fn parse_threads(s: &str) -> std::result::Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a thread count (a whole number such as 2)"))?;
    if n == 0 {
        return Err("a thread count must be at least 1".into());
    }
    if n > 1024 {
        return Err(format!("{n} threads is more than the 1024 the lab allows"));
    }
    Ok(n)
}

/// Parse a duration such as `500ms`, `2s` or `1m`.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("'{s}' is not a duration ({e}); use e.g. 500ms, 2s or 1m"))
}
