//! A real containerd per simulated node, as a Kubernetes node runs it: its CRI plugin executes
//! the CNI plugins of the node's bin dir with the conflist the node's agent wrote.
//!
//! containerd runs inside the node's network namespace and in a private mount namespace
//! (`ip netns exec NODE unshare -m --propagation private`) where `/run` and `/etc/cni` are fresh
//! tmpfs and `/var/lib` is the node's `var-lib` directory: its image store, its metadata and
//! the libcni cache (`/var/lib/cni`) stay readable by the test and survive a restart of
//! containerd (a node reboot empties `/run` and keeps `/var/lib`). `/opt` is the node's `opt`
//! directory, so a DaemonSet's init container installing plugins into the hostPath
//! `/opt/cni/bin` writes there and not into the machine's `/opt`. Cgroups are disabled through
//! the OCI runtime (crun `--cgroup-manager=disabled`, the CRI plugin's `disable_cgroup`), so
//! nothing is written to the machine's cgroup tree. The sandbox image is a static `pause`
//! built from `pause.c` and packed by `scripts/oci-image`.
//!
//! The CRI socket is reached from the test through `/proc/<containerd pid>/root`. containerd,
//! its shims and everything they started are SIGKILLed by PID when the [`Containerd`] drops
//! (also on a failed assertion); the pods' network namespaces, bind-mounted in the private
//! `/run/netns`, vanish with their processes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{sh, skip_unless_root, wait_for, Guard};

/// The sandbox image every node's containerd is configured with.
pub const PAUSE_IMAGE: &str = "rcni.test/pause:1";
/// The containerd namespace of the CRI plugin.
const CRI_NAMESPACE: &str = "k8s.io";

/// Whether a containerd test must be skipped here (not root, or a tool missing), saying why.
pub fn skip_without_containerd() -> bool {
    if skip_unless_root() {
        return true;
    }
    if let Some(why) = missing_tools() {
        eprintln!("skipping: the containerd tests need containerd, ctr, crun and gcc ({why})");
        return true;
    }
    false
}

/// Why the containerd tests cannot run here, if they cannot (a missing tool).
pub fn missing_tools() -> Option<String> {
    let missing: Vec<&str> = ["containerd", "ctr", "crun"]
        .into_iter()
        .filter(|tool| !on_path(tool))
        .collect();
    (!missing.is_empty()).then(|| format!("not installed: {}", missing.join(", ")))
}

/// Whether `tool` is an executable in a directory of `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

/// Builds the pause image archive in `dir` (a static binary packed as a one-layer image) and
/// returns its path.
pub fn build_pause_image(dir: &Path) -> PathBuf {
    let root = dir.join("pause-rootfs");
    fs::create_dir_all(&root).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harness/pause.c");
    let binary = root.join("pause");
    sh(&[
        "gcc",
        "-static",
        "-O2",
        "-o",
        binary.to_str().unwrap(),
        source.to_str().unwrap(),
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/oci-image");
    let archive = dir.join("pause.tar");
    sh(&[
        script.to_str().unwrap(),
        PAUSE_IMAGE,
        root.to_str().unwrap(),
        archive.to_str().unwrap(),
        "/pause",
    ]);
    archive
}

/// Where a node's containerd takes its CNI plugins and configs.
pub struct CniDirs<'a> {
    pub bin_dir: &'a Path,
    pub conf_dir: &'a Path,
}

/// One node's containerd.
pub struct Containerd {
    process: Guard,
    /// The node's network namespace.
    netns: String,
    /// The node's containerd directory (config, OCI runtime wrapper, log).
    dir: PathBuf,
    /// The directory mounted as `/var/lib` in containerd's mount namespace.
    var_lib: PathBuf,
    /// containerd's mount namespace (`/proc/PID/ns/mnt`), which its shims share.
    mount_ns: Option<PathBuf>,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Containerd {
    /// Starts containerd in network namespace `netns` with its files under `node_dir`, waits
    /// for its socket and imports the pause image `pause_tar`.
    pub fn start(netns: &str, node_dir: &Path, cni: CniDirs, pause_tar: &Path) -> Containerd {
        let dir = node_dir.join("containerd");
        let var_lib = node_dir.join("var-lib");
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(&var_lib).unwrap();
        fs::create_dir_all(node_dir.join("opt")).unwrap();
        let runtime = dir.join("crun-no-cgroups");
        fs::write(
            &runtime,
            "#!/bin/sh\nexec /usr/bin/crun --cgroup-manager=disabled \"$@\"\n",
        )
        .unwrap();
        sh(&["chmod", "755", runtime.to_str().unwrap()]);
        let config = dir.join("config.toml");
        fs::write(&config, config_toml(&runtime, &cni)).unwrap();
        let mut c = Containerd {
            process: Guard(None),
            netns: netns.to_string(),
            dir,
            var_lib,
            mount_ns: None,
        };
        c.spawn();
        c.import(pause_tar);
        c
    }

    /// Kills containerd with its shims and pods and starts it again, as after a node reboot:
    /// `/run` (its state, the pods' namespaces) starts empty, `/var/lib` is kept.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        // The private mount namespace's setup, then containerd itself (exec keeps the PID).
        // `ip netns exec` mounted a fresh sysfs over /sys, without the cgroup2 mount the OCI
        // runtime checks (read-only: cgroups stay disabled).
        let script = r#"set -e
mount -t cgroup2 -o ro,nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
mount -t tmpfs tmpfs /run
mkdir -p /var/lib && mount --bind "$1" /var/lib
mkdir -p /etc/cni && mount -t tmpfs tmpfs /etc/cni
mount --bind "$3" /opt
exec containerd --config "$2"
"#;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .args(["unshare", "--mount", "--propagation", "private"])
            .args(["sh", "-c", script, "containerd-node"])
            .arg(&self.var_lib)
            .arg(self.dir.join("config.toml"))
            .arg(self.opt())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        self.process = Guard(Some(child));
        let up = wait_for(Duration::from_secs(30), || {
            self.socket().exists()
                && Command::new("ctr")
                    .arg("--address")
                    .arg(self.socket())
                    .arg("version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
        });
        assert!(up.is_some(), "containerd did not come up:\n{}", self.log());
        self.mount_ns = fs::read_link(format!("/proc/{}/ns/mnt", self.pid())).ok();
    }

    /// Imports an image archive into the CRI plugin's namespace, unpacked for its snapshotter.
    pub fn import(&self, archive: &Path) {
        self.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "native",
            archive.to_str().unwrap(),
        ]);
    }

    /// `ctr ARGS` on this containerd, in the CRI plugin's namespace: its output.
    pub fn ctr(&self, args: &[&str]) -> String {
        let socket = self.socket();
        let mut full = vec![
            "ctr",
            "--address",
            socket.to_str().unwrap(),
            "--namespace",
            CRI_NAMESPACE,
        ];
        full.extend_from_slice(args);
        sh(&full)
    }

    /// containerd's PID.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("containerd is running")
    }

    /// The CRI (and containerd API) socket, seen from the test's mount namespace.
    pub fn socket(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root/run/containerd/containerd.sock",
            self.pid()
        ))
    }

    /// The directory mounted as `/opt` in containerd's mount namespace.
    pub fn opt(&self) -> PathBuf {
        self.var_lib.with_file_name("opt")
    }

    /// `path` (absolute) as containerd and its containers' host paths see it, from the test.
    pub fn host_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.pid()))
    }

    /// The libcni cache of this containerd (`/var/lib/cni` inside its mount namespace).
    pub fn cni_cache(&self) -> PathBuf {
        self.var_lib.join("cni")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGKILLs containerd, its shims and every process they started (the pods), by PID.
    pub fn kill(&mut self) {
        let mut pids = self
            .mount_ns
            .as_deref()
            .map(processes_in_mount_ns)
            .unwrap_or_default();
        pids.extend(self.process.pid());
        let all = with_descendants(pids);
        if !all.is_empty() {
            // A process gone meanwhile only makes kill report it.
            let _ = Command::new("kill")
                .arg("-KILL")
                .args(all.iter().map(u32::to_string))
                .stderr(Stdio::null())
                .status();
        }
        self.process.kill();
        self.mount_ns = None;
    }
}

/// The PIDs of the processes whose mount namespace is `mount_ns`.
fn processes_in_mount_ns(mount_ns: &Path) -> BTreeSet<u32> {
    all_pids()
        .filter(|pid| fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns == mount_ns))
        .collect()
}

/// `roots` and every process below them (children of children...).
fn with_descendants(roots: BTreeSet<u32>) -> BTreeSet<u32> {
    let parents: Vec<(u32, u32)> = all_pids()
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut all = roots;
    loop {
        let before = all.len();
        let children: Vec<u32> = parents
            .iter()
            .filter(|(_, parent)| all.contains(parent))
            .map(|(pid, _)| *pid)
            .collect();
        all.extend(children);
        if all.len() == before {
            return all;
        }
    }
}

fn all_pids() -> impl Iterator<Item = u32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

fn parent_of(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))?
        .trim()
        .parse()
        .ok()
}

/// containerd's config: the CRI plugin with the pause image, no cgroups, no AppArmor, the
/// native snapshotter (no overlay mounts on the test's temp dir), crun through the wrapper
/// without cgroups, and the node's CNI dirs.
fn config_toml(runtime: &Path, cni: &CniDirs) -> String {
    let cri = r#"plugins."io.containerd.grpc.v1.cri""#;
    format!(
        r#"version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_cgroup = true
  disable_apparmor = true
  restrict_oom_score_adj = true

[{cri}.containerd]
  snapshotter = "native"
  default_runtime_name = "crun"

[{cri}.containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.crun.options]
  BinaryName = "{runtime}"

[{cri}.cni]
  bin_dir = "{bin_dir}"
  conf_dir = "{conf_dir}"
  max_conf_num = 1
"#,
        runtime = runtime.display(),
        bin_dir = cni.bin_dir.display(),
        conf_dir = cni.conf_dir.display(),
    )
}
