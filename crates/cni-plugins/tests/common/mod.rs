//! Shared setup of the integration tests: a sandbox with the real `rcni-plugins` binary linked
//! under plugin names, and checks on what a plugin printed.

#![allow(dead_code)]

pub mod dhcp_daemon;

use std::path::PathBuf;

use cni_attribution::{names, AttachmentId};
use cni_testkit::{Netns, PluginCall, PluginOutput, Sandbox};

/// The multi-call binary cargo built for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");

/// A sandbox, one container namespace and a CNI_PATH dir with `names` linked to [`BIN`].
pub struct Setup {
    pub sb: Sandbox,
    pub pod: Netns,
    pub cni_dir: PathBuf,
}

impl Setup {
    pub fn new(names: &[&str]) -> Setup {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let pod = sb.add_container().expect("container namespace");
        let cni_dir = sb.link_plugins(BIN, names).expect("plugin links");
        Setup { sb, pod, cni_dir }
    }

    /// A call with every attachment variable set for the pod (container `c1`, ifname `lo`).
    pub fn call(&self, command: &str, stdin: &str) -> PluginCall {
        PluginCall::new(command)
            .container_id("c1")
            .netns(&self.pod.path)
            .ifname("lo")
            .path(&self.cni_dir)
            .stdin(stdin)
    }

    pub fn run(&self, plugin: &str, call: &PluginCall) -> PluginOutput {
        self.sb
            .run_plugin(self.cni_dir.join(plugin), call)
            .expect("run plugin")
    }
}

/// Asserts that no record of the attachment is in the sub-link or bandwidth plugins' default
/// directories (`/run/rcni/sublink`, `/run/rcni/bandwidth`): a test gives those plugins a
/// `dataDir` of its own, so the suite never creates the machine's directories. Call it while
/// the attachment is live (after its ADD).
#[track_caller]
pub fn assert_no_record_in_default_dirs(network: &str, container_id: &str, ifname: &str) {
    let file = AttachmentId::new(network, container_id, ifname).record_file_name();
    for dir in [names::SUBLINK_RECORD_DIR, names::BANDWIDTH_RECORD_DIR] {
        let path = std::path::Path::new(dir).join(&file);
        assert!(
            !path.exists(),
            "{} was written: give the plugin a dataDir in the test's own directory",
            path.display()
        );
    }
}

/// True when `ifname` in namespace `ns` exists and is administratively up, read with `ip -j`.
pub fn is_up(ns: &str, ifname: &str) -> bool {
    cni_testkit::is_up(ns, ifname).expect("ip -j link")
}
