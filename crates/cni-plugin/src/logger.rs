//! A tiny `log` backend: stderr, or a file, never stdout.
//!
//! - `RCNI_LOG`: `off`, `error`, `warn` (default), `info`, `debug` or `trace`.
//! - `RCNI_LOG_FILE`: append to this file instead of stderr (stderr if it cannot be opened).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use log::{LevelFilter, Log, Metadata, Record};

/// Where log lines go.
enum Sink {
    Stderr,
    File(Mutex<File>),
}

struct Logger {
    sink: OnceLock<Sink>,
    program: OnceLock<String>,
}

static LOGGER: Logger = Logger {
    sink: OnceLock::new(),
    program: OnceLock::new(),
};

/// Parses `RCNI_LOG`; unknown values give the default, warn.
pub fn parse_level(value: Option<&str>) -> LevelFilter {
    match value.map(str::to_ascii_lowercase).as_deref() {
        Some("off") => LevelFilter::Off,
        Some("error") => LevelFilter::Error,
        Some("info") => LevelFilter::Info,
        Some("debug") => LevelFilter::Debug,
        Some("trace") => LevelFilter::Trace,
        _ => LevelFilter::Warn,
    }
}

/// Installs the logger from `RCNI_LOG` / `RCNI_LOG_FILE` (done by [`crate::run`]). Lines are
/// tagged with `program` and the process id. A second call changes nothing.
pub fn init(program: &str) {
    let level = parse_level(std::env::var("RCNI_LOG").ok().as_deref());
    let sink = match std::env::var_os("RCNI_LOG_FILE") {
        Some(path) if !path.is_empty() => OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map(|f| Sink::File(Mutex::new(f)))
            .unwrap_or(Sink::Stderr),
        _ => Sink::Stderr,
    };
    let _ = LOGGER.sink.set(sink);
    let _ = LOGGER.program.set(program.to_string());
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format!(
            "{} {} {}[{}]: {}\n",
            utc_timestamp(SystemTime::now()),
            record.level(),
            self.program.get().map(String::as_str).unwrap_or("cni"),
            std::process::id(),
            record.args()
        );
        match self.sink.get() {
            Some(Sink::File(file)) => {
                if let Ok(mut f) = file.lock() {
                    let _ = f.write_all(line.as_bytes());
                }
            }
            _ => {
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    }

    fn flush(&self) {}
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` without a date crate.
fn utc_timestamp(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn levels() {
        assert_eq!(parse_level(None), LevelFilter::Warn);
        assert_eq!(parse_level(Some("DEBUG")), LevelFilter::Debug);
        assert_eq!(parse_level(Some("off")), LevelFilter::Off);
        assert_eq!(parse_level(Some("loud")), LevelFilter::Warn);
    }

    #[test]
    fn timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_218_330_250);
        assert_eq!(utc_timestamp(t), "2026-12-02T13:32:10.250Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert!(utc_timestamp(leap).starts_with("2000-02-29T00:00:00"));
    }
}
