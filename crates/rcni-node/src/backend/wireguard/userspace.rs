//! The userspace implementation: Debian's `wireguard-go`, one process per device, supervised
//! by the agent (why not an in-process library: docs/architecture.md, "WireGuard").
//!
//! - The device is a persistent tun device the agent makes ([`ensure_tun`]); wireguard-go
//!   attaches to it by name (`wireguard-go -f <name>`). When the process dies the device, its
//!   addresses and the routes through it stay, and a new process attaches to the same device.
//! - wireguard-go serves its configuration socket at `/var/run/wireguard/<name>.sock`, where
//!   `wg(8)` finds it too. The process to supervise is the one serving that socket in the
//!   agent's network namespace ([`GoProcess::adopt_or_start`] asks the kernel, `SO_PEERCRED`):
//!   a restarted agent adopts the process its previous run started, so traffic never stops for
//!   an agent restart, and a graceful stop leaves it running.
//! - It runs in a process group of its own (a signal to the agent's group does not reach it),
//!   with its output in `<state-dir>/wireguard/<name>.log` (never the agent's stderr: a Go
//!   program dies on a write to a closed pipe).
//! - [`GoProcess::running`] is asked every second; a dead process is started again and the
//!   device configured from scratch (`wireguard-go` resets the MTU to 1420 on start, so the
//!   MTU is set again too).

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cni_linux::wireguard::uapi::{socket_path, UserspaceDevice};
use cni_linux::Handle;

use super::super::{nl_err, BackendError};

/// How long a started wireguard-go may take to serve its socket.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// A log file larger than this is emptied when a process starts.
const LOG_LIMIT: u64 = 1 << 20;

/// The kernel's `IFLA_INFO_KIND` of a tun device.
const TUN_KIND: &str = "tun";

/// Makes sure the persistent tun device `name` exists: kept when it does, made when it does
/// not, and a link of that name of another kind (the kernel implementation's, from an earlier
/// run) replaced. Returns its index.
pub fn ensure_tun(nl: &mut Handle, name: &str) -> Result<u32, BackendError> {
    match nl.link_by_name(name) {
        Ok(link) if link.kind.as_deref() == Some(TUN_KIND) => return Ok(link.index),
        Ok(link) => {
            log::info!(
                "{name} is a {} link, not a tun device: replacing it",
                link.kind.as_deref().unwrap_or("plain")
            );
            nl.delete_link(link.index)
                .map_err(nl_err(format!("delete {name}")))?;
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(nl_err(format!("look up {name}"))(e)),
    }
    cni_linux::tun::create_tun(name)
        .map_err(|e| BackendError::Setup(format!("create the tun device {name}: {e}")))?;
    let link = nl
        .link_by_name(name)
        .map_err(nl_err(format!("look up {name}")))?;
    Ok(link.index)
}

/// Where `program` is: itself when it names a path, else the first match in `PATH`.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// A process's start time (clock ticks since boot, `/proc/<pid>/stat` field 22) and whether
/// it is a zombie: a pid and its start time name one process, whatever reuses the pid later.
fn start_time(pid: u32) -> Option<(u64, bool)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let zombie = fields.first() == Some(&"Z");
    Some((fields.get(19)?.parse().ok()?, zombie))
}

/// Whether process `pid` lives in this process's network namespace.
fn in_my_netns(pid: u32) -> bool {
    let mine = fs::read_link("/proc/self/ns/net");
    let theirs = fs::read_link(format!("/proc/{pid}/ns/net"));
    matches!((mine, theirs), (Ok(a), Ok(b)) if a == b)
}

/// One supervised wireguard-go.
#[derive(Debug)]
pub struct GoProcess {
    name: &'static str,
    binary: PathBuf,
    log: PathBuf,
    pid: u32,
    started: u64,
    /// Set when this run of the agent started it (to reap it); `None` for an adopted one.
    child: Option<Child>,
    /// Times it was found dead and started again.
    pub restarts: u64,
}

impl GoProcess {
    /// The wireguard-go serving device `name`'s socket in this network namespace, or a new
    /// one; `true` when it was started now (it has no configuration yet).
    pub fn adopt_or_start(
        name: &'static str,
        binary: &Path,
        log_dir: &Path,
    ) -> Result<(GoProcess, bool), BackendError> {
        let mut process = GoProcess {
            name,
            binary: binary.to_path_buf(),
            log: log_dir.join(format!("{name}.log")),
            pid: 0,
            started: 0,
            child: None,
            restarts: 0,
        };
        if let Some((pid, started)) = serving(name) {
            log::info!("{name}: adopting the running wireguard-go (pid {pid})");
            process.pid = pid;
            process.started = started;
            return Ok((process, false));
        }
        process.start()?;
        Ok((process, true))
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `Ok` while it runs, else why not (a child of this agent that exited is reaped here).
    pub fn running(&mut self) -> Result<(), String> {
        if let Some(child) = self.child.as_mut() {
            return match child.try_wait() {
                Ok(None) => Ok(()),
                Ok(Some(status)) => {
                    self.child = None;
                    Err(format!("wireguard-go (pid {}) exited: {status}", self.pid))
                }
                // Cannot tell: assume it runs, the next look will know.
                Err(_) => Ok(()),
            };
        }
        match start_time(self.pid) {
            Some((started, zombie)) if started == self.started && !zombie => Ok(()),
            _ => Err(format!("wireguard-go (pid {}) is gone", self.pid)),
        }
    }

    /// Stops it if it still runs (SIGTERM, then SIGKILL after a second) and starts a new one.
    pub fn restart(&mut self) -> Result<(), BackendError> {
        self.stop();
        self.restarts += 1;
        self.start()
    }

    fn stop(&mut self) {
        if self.pid == 0 || self.running().is_err() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.running().is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.running().is_ok() {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            if let Some(mut child) = self.child.take() {
                let _ = child.wait();
            }
        }
    }

    fn open_log(&self) -> io::Result<fs::File> {
        if fs::metadata(&self.log).is_ok_and(|m| m.len() > LOG_LIMIT) {
            fs::remove_file(&self.log)?;
        }
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
    }

    /// Starts `wireguard-go -f <name>` and waits until it serves its socket.
    fn start(&mut self) -> Result<(), BackendError> {
        let setup =
            |what: &str, e: io::Error| BackendError::Setup(format!("{}: {what}: {e}", self.name));
        let log = self
            .open_log()
            .map_err(|e| setup("open the wireguard-go log", e))?;
        let err = log
            .try_clone()
            .map_err(|e| setup("open the wireguard-go log", e))?;
        let mut child = Command::new(&self.binary)
            .args(["-f", self.name])
            .env("LOG_LEVEL", "error")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| setup(&format!("start {}", self.binary.display()), e))?;
        let pid = child.id();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(BackendError::Setup(format!(
                    "{}: wireguard-go exited at start ({status}): {}",
                    self.name,
                    log_tail(&self.log)
                )));
            }
            if serving(self.name).is_some_and(|(p, _)| p == pid) {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BackendError::Setup(format!(
                    "{}: wireguard-go did not serve {} within {START_TIMEOUT:?}: {}",
                    self.name,
                    socket_path(self.name).display(),
                    log_tail(&self.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.pid = pid;
        self.started = start_time(pid).map(|(s, _)| s).unwrap_or(0);
        self.child = Some(child);
        log::info!("{}: started wireguard-go (pid {pid})", self.name);
        Ok(())
    }
}

/// The pid and start time of the process serving device `name`'s socket, when it lives in
/// this network namespace.
fn serving(name: &str) -> Option<(u32, u64)> {
    let pid = UserspaceDevice::new(socket_path(name)).server_pid().ok()?;
    if !in_my_netns(pid) {
        return None;
    }
    let (started, zombie) = start_time(pid)?;
    (!zombie).then_some((pid, started))
}

/// The last lines of a log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        format!("{} is empty", path.display())
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_names_this_process_and_a_missing_one_is_none() {
        let (started, zombie) = start_time(std::process::id()).unwrap();
        assert!(started > 0);
        assert!(!zombie);
        assert_eq!(start_time(u32::MAX), None);
        assert!(in_my_netns(std::process::id()));
    }

    #[test]
    fn programs_are_found_by_path_or_in_path() {
        assert_eq!(
            find_program(Path::new("/bin/sh")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert!(find_program(Path::new("sh")).is_some());
        assert_eq!(find_program(Path::new("no-such-program-rcni")), None);
        assert_eq!(find_program(Path::new("/no/such/program")), None);
    }
}
