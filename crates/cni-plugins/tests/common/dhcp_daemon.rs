//! A dhcp daemon (`rcni-plugins dhcp daemon`) for a test: started in a sandbox namespace with
//! its socket, state dir and log in a scratch dir, killed by PID when dropped (also when the
//! test fails).

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::BIN;

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `argv` inside namespace `ns` (`ip netns exec` execs it, so the PID is its own),
/// stdout and stderr to `log`.
pub fn spawn_in(ns: &str, argv: &[&str], log: &Path) -> Killed {
    let out = fs::File::create(log).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
    Killed(child)
}

/// A running daemon.
pub struct DhcpDaemon {
    process: Killed,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub log: PathBuf,
}

impl DhcpDaemon {
    /// Starts a daemon in `ns` using `dir/dhcp.sock`, `dir/dhcp-state` and `dir/dhcp-daemon.log`
    /// (the log is appended to across restarts), with `extra` flags; waits for its socket.
    pub fn start(ns: &str, dir: &Path, extra: &[&str]) -> DhcpDaemon {
        fs::create_dir_all(dir).unwrap();
        let socket = dir.join("dhcp.sock");
        let state_dir = dir.join("dhcp-state");
        let log = dir.join("dhcp-daemon.log");
        let this_run = dir.join("dhcp-daemon.last.log");
        let mut argv = vec![
            BIN,
            "dhcp",
            "daemon",
            "--socket",
            socket.to_str().unwrap(),
            "--state-dir",
            state_dir.to_str().unwrap(),
        ];
        argv.extend_from_slice(extra);
        let process = spawn_in(ns, &argv, &this_run);
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the dhcp daemon did not listen on {} within 10 s:\n{}",
                socket.display(),
                fs::read_to_string(&this_run).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        DhcpDaemon {
            process,
            socket,
            state_dir,
            log,
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.process.0.id() as i32)
    }

    /// Everything the daemons started in this dir logged (earlier runs and this one).
    pub fn log_text(&self) -> String {
        let read = |p: &Path| fs::read_to_string(p).unwrap_or_default();
        format!(
            "{}{}",
            read(&self.log),
            read(&self.log.with_extension("last.log"))
        )
    }
}

impl Drop for DhcpDaemon {
    fn drop(&mut self) {
        // Keep the log of this run once the process is gone (a restart truncates the last one).
        let last = fs::read_to_string(self.log.with_extension("last.log")).unwrap_or_default();
        let mut all = fs::read_to_string(&self.log).unwrap_or_default();
        all.push_str(&last);
        let _ = fs::write(&self.log, all);
    }
}
