//! Debian's firewalld in a test's node: a private system bus (dbus-daemon with a config of
//! its own, socket in the sandbox) and firewalld in the node's host namespace with a copy of
//! /etc/firewalld as its system config; both killed by PID when the guard drops.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::World;

/// Starts `cmd` with its output discarded.
fn spawn_quiet(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// dbus-daemon and firewalld started by a test, killed by PID when dropped.
pub struct Firewalld {
    children: Vec<Child>,
    bus: String,
    host: String,
}

impl Drop for Firewalld {
    fn drop(&mut self) {
        // firewalld first (it talks to the bus on its way out), then its bus.
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Firewalld {
    /// A private system bus in the sandbox and Debian's firewalld (nftables backend, a copy
    /// of /etc/firewalld as its system config) in the node's host namespace; `None` (skip)
    /// when firewalld is not installed.
    pub fn start(w: &World) -> Option<Firewalld> {
        if !Path::new("/usr/sbin/firewalld").is_file() {
            eprintln!("SKIPPED: firewalld is not installed (apt-get install firewalld)");
            return None;
        }
        let dir = w.sb.dir().join("firewalld");
        fs::create_dir_all(dir.join("etc")).unwrap();
        w.host_sh(&format!("cp -r /etc/firewalld/. {}/etc/", dir.display()));
        let socket = dir.join("bus");
        fs::write(
            dir.join("bus.conf"),
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path={}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/>
<allow receive_sender="*"/></policy></busconfig>"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut fw = Firewalld {
            children: Vec::new(),
            bus: format!("unix:path={}", socket.display()),
            host: w.sb.host().name.clone(),
        };
        fw.children.push(spawn_quiet(
            Command::new("dbus-daemon")
                .arg(format!("--config-file={}", dir.join("bus.conf").display()))
                .args(["--nofork", "--nopidfile"]),
        ));
        let up = (0..50).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            socket.exists()
        });
        assert!(up, "dbus-daemon did not listen on {}", socket.display());
        fw.children.push(spawn_quiet(
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &fw.host,
                    "firewalld",
                    "--nofork",
                    "--nopid",
                ])
                .arg("--system-config")
                .arg(dir.join("etc"))
                .args(["--log-target", "file", "--log-file"])
                .arg(dir.join("firewalld.log"))
                .env("DBUS_SYSTEM_BUS_ADDRESS", &fw.bus),
        ));
        let running = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(200));
            fw.cmd(&["--state"]).is_ok_and(|s| s.trim() == "running")
        });
        assert!(running, "firewalld did not start");
        Some(fw)
    }

    /// `firewall-cmd <args>` in the node: its stdout, or its output as the error.
    pub fn cmd(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.host, "firewall-cmd"])
            .args(args)
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(text)
        } else {
            Err(text + &String::from_utf8_lossy(&out.stderr))
        }
    }
}
