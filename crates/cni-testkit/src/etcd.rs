//! etcd for tests, as production runs it: member processes started in a namespace of the
//! test's ([`Member`]), and a one-member store killed on drop with `etcdctl` beside it
//! ([`Etcd`]).

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::process::{run, PROCESS_TIMEOUT};
use crate::{Netns, PluginOutput};

/// One etcd member: its name, client URL and peer URL.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
}

impl Member {
    /// `name=peer_url`, an `--initial-cluster` entry.
    pub fn initial_cluster_entry(&self) -> String {
        format!("{}={}", self.name, self.peer_url)
    }

    /// Starts the member in namespace `ns`, its data in `<dir>/etcd-<name>` (kept across
    /// restarts) and its log in `<dir>/etcd-<name>.log`. The caller stops it by PID.
    pub fn spawn(&self, ns: &str, dir: &Path, initial_cluster: &str, extra: &[String]) -> Child {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("etcd-{}.log", self.name)))
            .unwrap();
        Command::new("ip")
            .args(["netns", "exec", ns, "etcd", "--name", &self.name])
            .arg("--data-dir")
            .arg(dir.join(format!("etcd-{}", self.name)))
            .args(["--listen-client-urls", &self.client_url])
            .args(["--advertise-client-urls", &self.client_url])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", initial_cluster])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (Debian package etcd-server)")
    }
}

/// A one-member etcd on the loopback of namespace `ns` (plain http), killed on drop.
pub struct Etcd {
    child: Option<Child>,
    ns: String,
    /// The client URL (`http://127.0.0.1:2379`), reachable from inside `ns` only.
    pub url: String,
}

impl Etcd {
    /// Starts it with its data and log in `dir` and waits until it answers.
    pub fn start(ns: &Netns, dir: &Path) -> anyhow::Result<Etcd> {
        let member = Member {
            name: "t".into(),
            client_url: "http://127.0.0.1:2379".into(),
            peer_url: "http://127.0.0.1:2380".into(),
        };
        let child = member.spawn(&ns.name, dir, &member.initial_cluster_entry(), &[]);
        let etcd = Etcd {
            child: Some(child),
            ns: ns.name.clone(),
            url: member.client_url,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !etcd
            .etcdctl(&["--command-timeout=1s", "endpoint", "health"])
            .is_ok_and(|o| o.status == 0)
        {
            if Instant::now() > deadline {
                let log = fs::read_to_string(dir.join("etcd-t.log")).unwrap_or_default();
                bail!("etcd did not come up in {}; its log:\n{log}", ns.name);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(etcd)
    }

    /// `etcdctl --endpoints <url> ARGS` in the namespace (v3 API).
    pub fn etcdctl(&self, args: &[&str]) -> anyhow::Result<PluginOutput> {
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.ns,
            "etcdctl",
            "--endpoints",
            &self.url,
        ])
        .args(args)
        .env("ETCDCTL_API", "3");
        run(cmd, b"", PROCESS_TIMEOUT).context("etcdctl")
    }

    /// The keys under `prefix`, in order, each with its value (`etcdctl get --prefix`).
    pub fn entries(&self, prefix: &str) -> anyhow::Result<Vec<(String, String)>> {
        let out = self.etcdctl(&["get", "--prefix", prefix])?;
        if out.status != 0 {
            bail!("etcdctl get --prefix {prefix}: {}", out.stderr);
        }
        let lines: Vec<&str> = out.stdout.lines().collect();
        Ok(lines
            .chunks(2)
            .map(|kv| (kv[0].to_string(), kv.get(1).unwrap_or(&"").to_string()))
            .collect())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
