//! `rcni-plugins dhcp daemon`: the command line, the unix socket and its accept loop (a thread
//! per connection), and orderly exit on SIGTERM/SIGINT (the socket and pid file are removed;
//! the leases stay in the state dir and are resumed by the next start).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cni_types::CniError;
use nix::sys::signal::{SigSet, Signal};

use super::conf::DEFAULT_SOCKET;
use super::daemon::{Daemon, Settings};
use super::store::Store;
use super::wire::{read_message, Request, Response};

/// Where leases are persisted unless `--state-dir` says otherwise.
pub use cni_attribution::names::DHCP_STATE_DIR as DEFAULT_STATE_DIR;

const USAGE: &str = "usage: rcni-plugins dhcp daemon [--socket PATH] [--state-dir DIR] \
[--pidfile PATH] [--hostprefix PREFIX] [--timeout SECS] [--resendmax SECS] [--broadcast] \
[--check-interval SECS]";

/// The daemon's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub pidfile: Option<PathBuf>,
    /// Prepended to the socket path and to every netns path (Go's `-hostprefix`).
    pub host_prefix: String,
    /// Budget of one acquisition (Go's `-timeout` bounds one attempt).
    pub timeout: Duration,
    /// Liveness check period of a bound lease.
    pub check_interval: Duration,
    /// Longest wait between retransmissions (Go's `-resendmax`).
    pub resend_max: Duration,
    /// Broadcast flag on renewals too (Go's `-broadcast`).
    pub broadcast: bool,
}

impl Options {
    /// Parses the arguments after `dhcp daemon`.
    pub fn parse(args: &[&str]) -> Result<Options, String> {
        let mut o = Options {
            socket: PathBuf::from(DEFAULT_SOCKET),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            pidfile: None,
            host_prefix: String::new(),
            timeout: Settings::default().acquire_budget,
            check_interval: Settings::default().check_every,
            resend_max: Settings::default().resend_max,
            broadcast: false,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            // `--flag value` and `--flag=value`, one or two dashes (Go's flag package style).
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (*flag, None),
            };
            let name = name.trim_start_matches('-');
            let mut value = || -> Result<String, String> {
                inline
                    .map(str::to_string)
                    .or_else(|| it.next().map(|v| v.to_string()))
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
            };
            let secs = |v: String| -> Result<Duration, String> {
                seconds(&v).ok_or_else(|| {
                    format!("{name}: {v:?} is not a positive number of seconds (e.g. 10, 10s, 2m)")
                })
            };
            match name {
                "socket" | "socketpath" => o.socket = PathBuf::from(value()?),
                "state-dir" => o.state_dir = PathBuf::from(value()?),
                "pidfile" => o.pidfile = Some(PathBuf::from(value()?)),
                "hostprefix" => o.host_prefix = value()?,
                "timeout" => o.timeout = secs(value()?)?,
                "check-interval" => o.check_interval = secs(value()?)?,
                "resendmax" | "resend-max" => o.resend_max = secs(value()?)?,
                // A boolean flag: `--broadcast`, or `--broadcast=true|false` as Go's flag takes.
                "broadcast" => {
                    o.broadcast = match inline {
                        None | Some("true") => true,
                        Some("false") => false,
                        Some(v) => return Err(format!("broadcast: {v:?} is not true or false")),
                    }
                }
                _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
            }
        }
        if o.pidfile.as_deref().is_some_and(|p| !p.is_absolute()) {
            return Err("--pidfile must be an absolute path".into());
        }
        Ok(o)
    }

    fn socket_path(&self) -> PathBuf {
        PathBuf::from(format!("{}{}", self.host_prefix, self.socket.display()))
    }
}

/// A positive whole number of seconds, bare or with Go's `s` or `m` suffix (`10`, `10s`, `2m`).
fn seconds(v: &str) -> Option<Duration> {
    let (number, unit) = match v.strip_suffix('m') {
        Some(n) => (n, 60),
        None => (v.strip_suffix('s').unwrap_or(v), 1),
    };
    let n = number.parse::<u64>().ok().filter(|n| *n > 0)?;
    Some(Duration::from_secs(n.checked_mul(unit)?))
}

/// Runs the daemon until SIGTERM or SIGINT; the exit code.
pub fn run(args: &[&str]) -> i32 {
    cni_plugin::logger::init("rcni-dhcp-daemon");
    if std::env::var_os("RCNI_LOG").is_none() {
        // A daemon's log is its record of leases: info unless told otherwise.
        log::set_max_level(log::LevelFilter::Info);
    }
    let opts = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rcni-plugins dhcp daemon: {e}");
            return 2;
        }
    };
    match serve(&opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rcni-plugins dhcp daemon: {e}");
            1
        }
    }
}

fn serve(opts: &Options) -> Result<(), String> {
    // Block the exit signals before any thread exists, so every thread inherits the mask and
    // only the waiting thread below ever sees them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;

    let socket = opts.socket_path();
    let listener = listen(&socket)?;
    let store = Store::open(&opts.state_dir)
        .map_err(|e| format!("state dir {}: {e}", opts.state_dir.display()))?;
    let settings = Settings {
        acquire_budget: opts.timeout,
        check_every: opts.check_interval,
        resend_max: opts.resend_max,
        broadcast: opts.broadcast,
        netns_prefix: opts.host_prefix.clone(),
        ..Settings::default()
    };
    let daemon = Daemon::start(store, settings)
        .map_err(|e| format!("loading leases from {}: {e}", opts.state_dir.display()))?;
    if let Some(pidfile) = &opts.pidfile {
        std::fs::write(pidfile, format!("{}", std::process::id()))
            .map_err(|e| format!("pid file {}: {e}", pidfile.display()))?;
    }
    log::info!("dhcp daemon listening on {}", socket.display());
    eprintln!(
        "rcni-plugins dhcp daemon: listening on {}",
        socket.display()
    );

    let exit_socket = socket.clone();
    let pidfile = opts.pidfile.clone();
    std::thread::spawn(move || {
        let signal = signals.wait();
        let _ = std::fs::remove_file(&exit_socket);
        if let Some(p) = pidfile {
            let _ = std::fs::remove_file(p);
        }
        eprintln!("rcni-plugins dhcp daemon: {signal:?}: exiting; leases stay in the state dir");
        std::process::exit(0);
    });

    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let daemon = Arc::clone(&daemon);
                std::thread::spawn(move || serve_connection(&daemon, stream));
            }
            Err(e) => log::warn!("dhcp daemon: accept: {e}"),
        }
    }
    Ok(())
}

/// Binds the socket, replacing a stale socket file (one nobody answers on) but refusing to
/// steal the socket of a running daemon.
fn listen(socket: &Path) -> Result<UnixListener, String> {
    if let Some(dir) = socket.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    if socket.exists() {
        if UnixStream::connect(socket).is_ok() {
            return Err(format!(
                "another dhcp daemon is already listening on {}",
                socket.display()
            ));
        }
        std::fs::remove_file(socket)
            .map_err(|e| format!("removing stale {}: {e}", socket.display()))?;
    }
    let listener =
        UnixListener::bind(socket).map_err(|e| format!("binding {}: {e}", socket.display()))?;
    // Runtimes run as root; others have no business asking for leases (Go's unit: 0660).
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| format!("chmod {}: {e}", socket.display()))?;
    Ok(listener)
}

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

fn serve_connection(daemon: &Arc<Daemon>, mut stream: UnixStream) {
    // A client that connects and never half-closes must not hold a thread forever.
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let response = match read_message(&mut stream) {
        Err(e) => Response::Error(CniError::new(
            cni_types::code::IO_FAILURE,
            format!("dhcp daemon: reading the request: {e}"),
        )),
        Ok(body) => match serde_json::from_slice::<Request>(&body) {
            Ok(request) => daemon.handle(request),
            Err(e) => Response::Error(CniError::new(
                cni_types::code::DECODING_FAILURE,
                format!("dhcp daemon: undecodable request: {e}"),
            )),
        },
    };
    let body = serde_json::to_vec(&response).expect("serializable");
    let _ = stream.write_all(&body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let o = Options::parse(&[]).unwrap();
        assert_eq!(o.socket, Path::new("/run/cni/rcni-dhcp.sock"));
        assert_eq!(o.state_dir, Path::new("/var/lib/rcni/dhcp"));
        let o = Options::parse(&[
            "--socket",
            "/tmp/s.sock",
            "--state-dir=/tmp/st",
            "-timeout",
            "5",
            "--hostprefix",
            "/host",
            "--pidfile",
            "/tmp/p",
        ])
        .unwrap();
        assert_eq!(o.socket_path(), Path::new("/host/tmp/s.sock"));
        assert_eq!(o.state_dir, Path::new("/tmp/st"));
        assert_eq!(o.timeout, Duration::from_secs(5));
        assert_eq!(o.pidfile.as_deref(), Some(Path::new("/tmp/p")));
        assert!(!o.broadcast);
        let o = Options::parse(&["-broadcast", "-resendmax", "62s"]).unwrap();
        assert!(o.broadcast);
        assert_eq!(o.resend_max, Duration::from_secs(62));
        assert!(!Options::parse(&["--broadcast=false"]).unwrap().broadcast);
        let o = Options::parse(&["-timeout", "2m", "--check-interval=10s"]).unwrap();
        assert_eq!(
            (o.timeout, o.check_interval),
            (Duration::from_secs(120), Duration::from_secs(10))
        );
    }

    #[test]
    fn bad_flags_are_refused() {
        for args in [
            &["--bogus"][..],
            &["--socket"],
            &["--timeout", "0"],
            &["--timeout", "1h"],
            &["--timeout", "-1s"],
            &["--pidfile", "rel"],
            &["--broadcast=maybe"],
        ] {
            assert!(Options::parse(args).is_err(), "{args:?}");
        }
    }
}
