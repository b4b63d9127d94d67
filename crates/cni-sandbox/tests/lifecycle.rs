//! The lifecycle without privileges: plugins are shell scripts that log what they were asked
//! (command, ifname, netns, CNI_ARGS, stdin) and namespaces are a fake that records creations
//! and removals. The kernel side is proven by rcni's `pod` tests; these prove the ordering,
//! the arguments and recovery of records left by killed processes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_runtime::Runtime;
use cni_sandbox::record::{NetworkRecord, SandboxRecord};
use cni_sandbox::{
    Namespaces, NetnsOwner, PodMeta, PortMapping, Recovery, RunRequest, Sandboxes, SetupMode, State,
};

/// Logs one line per call: `<type> <command> <ifname> netns=<netns> args=<CNI_ARGS>`, and the
/// request on the next line (and, when `list-held` exists, the sandbox locks it holds open to
/// `held`); ADD answers with an address, unless `fail-<type>` exists.
const PLUGIN: &str = r#"#!/bin/sh
conf=$(cat)
dir=$(dirname "$0")
me=$(basename "$0")
echo "$me $CNI_COMMAND $CNI_IFNAME netns=$CNI_NETNS args=$CNI_ARGS" >> "$dir/log"
echo "$conf" >> "$dir/log"
if [ -e "$dir/list-held" ]; then
  echo "$me $CNI_COMMAND $(readlink /proc/$$/fd/* | grep /locks/ | tr '\n' ' ')" >> "$dir/held"
fi
if [ "$CNI_COMMAND" = ADD ]; then
  if [ -e "$dir/fail-$me" ]; then echo '{"cniVersion":"1.0.0","code":11,"msg":"refused"}'; exit 1; fi
  if [ -e "$dir/noip-$me" ]; then echo '{"cniVersion":"1.0.0","interfaces":[{"name":"'"$CNI_IFNAME"'"}]}'; exit 0; fi
  echo '{"cniVersion":"1.0.0","interfaces":[{"name":"'"$CNI_IFNAME"'","sandbox":"'"$CNI_NETNS"'"}],"ips":[{"address":"198.18.0.7/24","interface":0}]}'
fi
exit 0
"#;

#[derive(Default)]
struct FakeNamespaces {
    events: Mutex<Vec<String>>,
    existing: Mutex<Vec<PathBuf>>,
}

impl Namespaces for FakeNamespaces {
    fn create(&self, name: &str) -> Result<PathBuf, String> {
        self.events.lock().unwrap().push(format!("create {name}"));
        let path = self.path(name);
        self.existing.lock().unwrap().push(path.clone());
        Ok(path)
    }
    fn remove(&self, name: &str) -> Result<(), String> {
        self.events.lock().unwrap().push(format!("remove {name}"));
        let path = self.path(name);
        self.existing.lock().unwrap().retain(|p| *p != path);
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        self.existing.lock().unwrap().iter().any(|p| p == path)
    }
}

struct World {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    ns: Arc<FakeNamespaces>,
    sb: Sandboxes,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    for name in ["loopback", "main", "tail"] {
        let p = bin.join(name);
        fs::write(&p, PLUGIN).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let conf = dir.path().join("net.d");
    fs::create_dir_all(&conf).unwrap();
    fs::write(
        conf.join("10-net.conflist"),
        r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"main"},{"type":"tail","capabilities":{"portMappings":true}}]}"#,
    )
    .unwrap();
    let ns = Arc::new(FakeNamespaces::default());
    let rt = Runtime::new(vec![bin.clone()], dir.path().join("cache"));
    let mut sb = Sandboxes::new(rt, dir.path().join("state"), conf, ns.clone());
    sb.mode = SetupMode::Serial;
    World {
        _dir: dir,
        bin,
        ns,
        sb,
    }
}

fn log(bin: &Path) -> Vec<String> {
    fs::read_to_string(bin.join("log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The call lines only (not the requests).
fn calls(bin: &Path) -> Vec<String> {
    log(bin)
        .into_iter()
        .filter(|l| !l.starts_with('{'))
        .map(|l| l.split(" netns=").next().unwrap().to_string())
        .collect()
}

fn request(id: &str) -> RunRequest {
    RunRequest {
        id: Some(id.into()),
        pod: PodMeta {
            name: "web".into(),
            namespace: "shop".into(),
            uid: "u1".into(),
            labels: [("app".to_string(), "web".to_string())].into(),
        },
        port_mappings: vec![PortMapping::parse("18080:80").unwrap()],
        ..Default::default()
    }
}

#[test]
fn run_attaches_loopback_then_the_default_network_with_containerds_arguments() {
    let w = world();
    let st = w.sb.run(&request("s1")).unwrap();
    assert_eq!(st.ips, ["198.18.0.7"]);
    assert_eq!(st.netns, Path::new("/run/netns/rcni-s1"));
    assert_eq!(
        calls(&w.bin),
        ["loopback ADD lo", "main ADD eth0", "tail ADD eth0"]
    );
    let lines = log(&w.bin);
    let main = lines.iter().find(|l| l.starts_with("main ADD")).unwrap();
    for part in [
        "netns=/run/netns/rcni-s1",
        "IgnoreUnknown=1",
        "K8S_POD_NAMESPACE=shop",
        "K8S_POD_NAME=web",
        "K8S_POD_INFRA_CONTAINER_ID=s1",
        "K8S_POD_UID=u1",
    ] {
        assert!(main.contains(part), "{part} missing in {main}");
    }
    // Only the plugin that declares the capability gets the port mappings.
    let tail_req = &lines[lines
        .iter()
        .position(|l| l.starts_with("tail ADD"))
        .unwrap()
        + 1];
    assert!(tail_req.contains(r#""runtimeConfig":{"portMappings":[{"hostPort":18080,"containerPort":80,"protocol":"tcp"}]}"#), "{tail_req}");
    let main_req = &lines[lines
        .iter()
        .position(|l| l.starts_with("main ADD"))
        .unwrap()
        + 1];
    assert!(!main_req.contains("runtimeConfig"), "{main_req}");
    assert_eq!(*w.ns.events.lock().unwrap(), ["create rcni-s1"]);

    // The labels are recorded for the node agent, but no plugin sees them.
    assert_eq!(w.sb.status("s1").pod.labels["app"], "web");
    assert!(lines.iter().all(|l| !l.contains("app=web")), "{lines:?}");

    // Again: its status, no new ADD.
    w.sb.run(&request("s1")).unwrap();
    assert_eq!(calls(&w.bin).len(), 3);
}

#[test]
fn a_failed_run_deletes_every_network_in_reverse_and_removes_its_namespace() {
    let w = world();
    fs::write(w.bin.join("fail-tail"), "").unwrap();
    let e = w.sb.run(&request("s2")).unwrap_err();
    assert_eq!(e.code(), 11, "{e}");
    let c = calls(&w.bin);
    // The runtime rolled back the failing chain; the sandbox then DELs every network.
    let after_add: Vec<&String> = c.iter().skip_while(|l| !l.contains("tail ADD")).collect();
    assert!(after_add.len() > 1, "{c:?}");
    let last_two: Vec<&str> = c[c.len() - 3..].iter().map(String::as_str).collect();
    assert_eq!(
        last_two,
        ["tail DEL eth0", "main DEL eth0", "loopback DEL lo"]
    );
    assert_eq!(
        *w.ns.events.lock().unwrap(),
        ["create rcni-s2", "remove rcni-s2"]
    );
    assert!(w.sb.store.ids().unwrap().is_empty());
    assert!(w.sb.status("s2").state.is_none());
}

#[test]
fn stop_sends_an_empty_netns_when_the_namespace_is_gone_and_is_idempotent() {
    let w = world();
    w.sb.run(&request("s3")).unwrap();
    w.ns.existing.lock().unwrap().clear();
    fs::remove_file(w.bin.join("log")).unwrap();
    w.sb.stop("s3").unwrap();
    let lines: Vec<String> = log(&w.bin)
        .into_iter()
        .filter(|l| !l.starts_with('{'))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("netns= ")), "{lines:?}");
    assert_eq!(w.sb.status("s3").state, Some(State::Stopped));
    w.sb.stop("s3").unwrap();
    assert_eq!(
        log(&w.bin).len(),
        6,
        "a stopped sandbox is not torn down again"
    );
    w.sb.remove("s3").unwrap();
    w.sb.remove("s3").unwrap();
    assert!(w.sb.store.ids().unwrap().is_empty());
    assert!(!w.sb.store.dir().join("locks/s3").exists());
}

/// What a process killed in the middle of `run` leaves: a record in `setting-up`.
fn killed_run_record(w: &World, id: &str) -> SandboxRecord {
    w.sb.run(&request(id)).unwrap();
    let mut rec = w.sb.store.load(id).unwrap().unwrap();
    rec.state = State::SettingUp;
    w.sb.store.save(&rec).unwrap();
    rec
}

/// Recovery, run again until `done` holds (for at most 10 s). Just after a test lets go of a
/// sandbox lock, a child that another test of this process is starting may still hold a copy
/// of it for an instant (from its fork until its exec closes the close-on-exec descriptors),
/// and recovery rightly leaves a locked record alone. No child keeps it longer: see
/// `each_plugin_holds_the_lock_of_its_own_sandbox_only` and the store's unit tests.
fn recover_until(w: &World, done: impl Fn(&Recovery) -> bool) -> Recovery {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = w.sb.recover().unwrap();
        if done(&r) || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn recovery_undoes_a_killed_run_and_finishes_a_killed_stop() {
    let w = world();
    killed_run_record(&w, "killedrun");
    w.sb.run(&request("killedstop")).unwrap();
    let mut rec = w.sb.store.load("killedstop").unwrap().unwrap();
    rec.state = State::Stopping;
    w.sb.store.save(&rec).unwrap();
    w.sb.run(&request("fine")).unwrap();
    fs::remove_file(w.bin.join("log")).unwrap();

    let r = w.sb.recover().unwrap();
    assert_eq!(r.undone, ["killedrun"]);
    assert_eq!(r.finished, ["killedstop"]);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(w.sb.status("killedrun").state.is_none());
    assert_eq!(w.sb.status("killedstop").state, Some(State::Stopped));
    assert_eq!(w.sb.status("fine").state, Some(State::Ready));
    let c = calls(&w.bin);
    assert_eq!(c.len(), 6, "{c:?}");
    assert!(w
        .ns
        .events
        .lock()
        .unwrap()
        .contains(&"remove rcni-killedrun".to_string()));
    // Nothing left to recover.
    let again = w.sb.recover().unwrap();
    assert!(again.undone.is_empty() && again.finished.is_empty());
}

#[test]
fn recovery_clears_the_marker_of_a_verb_killed_before_it_wrote_its_record() {
    let w = world();
    w.sb.run(&request("early")).unwrap();
    // What a stop killed between making its pending marker and writing `stopping` leaves.
    let marker = w.sb.store.dir().join("early.pending");
    fs::write(&marker, b"").unwrap();
    // A live verb (lock held) may be between those two steps: the marker stays.
    let held = w.sb.store.lock_sandbox("early", true).unwrap().unwrap();
    w.sb.recover().unwrap();
    assert!(marker.exists());
    drop(held);
    let r = recover_until(&w, |_| !marker.exists());
    assert!(r.undone.is_empty() && r.finished.is_empty() && r.errors.is_empty());
    assert!(!marker.exists());
    assert_eq!(w.sb.status("early").state, Some(State::Ready));
}

#[test]
fn recovery_leaves_a_record_whose_verb_is_still_running() {
    let w = world();
    killed_run_record(&w, "busy");
    let held = w.sb.store.lock_sandbox("busy", true).unwrap().unwrap();
    let r = w.sb.recover().unwrap();
    assert!(r.undone.is_empty());
    assert_eq!(w.sb.status("busy").state, Some(State::SettingUp));
    drop(held);
    assert_eq!(recover_until(&w, |r| !r.undone.is_empty()).undone, ["busy"]);
}

#[test]
fn gc_keeps_recorded_sandboxes_and_deletes_cached_attachments_of_gone_ones() {
    let w = world();
    w.sb.run(&request("keep")).unwrap();
    w.sb.run(&request("gone")).unwrap();
    // The record of "gone" vanished (say, a wiped state dir); its cache entries did not.
    w.sb.store.remove("gone").unwrap();
    fs::remove_file(w.bin.join("log")).unwrap();
    let report = w.sb.gc().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.valid, 2);
    let c = calls(&w.bin);
    assert!(c.contains(&"main DEL eth0".to_string()), "{c:?}");
    assert!(c.contains(&"loopback DEL lo".to_string()), "{c:?}");
    let dels: Vec<String> = log(&w.bin)
        .into_iter()
        .filter(|l| l.contains(" DEL "))
        .collect();
    assert!(
        dels.iter()
            .all(|l| l.contains("K8S_POD_INFRA_CONTAINER_ID=gone")),
        "{dels:?}"
    );
    assert_eq!(w.sb.status("keep").state, Some(State::Ready));
    // Another runtime's attachment in the same cache is not this GC's to delete.
    let foreign_net = cni_runtime::Network::from_list_bytes(
        br#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"main"}]}"#,
    )
    .unwrap();
    w.sb.runtime
        .add(
            &foreign_net,
            &cni_runtime::Attachment::new("containerd1", "/run/netns/x", "eth0"),
        )
        .unwrap();
    fs::remove_file(w.bin.join("log")).unwrap();
    let report = w.sb.gc().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.valid, 3);
    assert!(
        !calls(&w.bin).iter().any(|c| c.contains(" DEL ")),
        "{:?}",
        calls(&w.bin)
    );
}

#[test]
fn the_record_holds_each_network_with_its_interface_and_chain() {
    let w = world();
    w.sb.run(&request("sub")).unwrap();
    let rec = w.sb.store.load("sub").unwrap().unwrap();
    let net: &NetworkRecord = &rec.networks[1];
    assert_eq!(net.ifname, "eth0");
    assert_eq!(net.network().unwrap().plugin_types(), ["main", "tail"]);
    assert_eq!(rec.netns_owner, NetnsOwner::Sandbox);
    assert_eq!(rec.networks[0].ifname, "lo");
}

#[test]
fn a_namespace_given_by_the_caller_is_used_and_never_removed() {
    let w = world();
    w.ns.existing
        .lock()
        .unwrap()
        .push("/run/netns/theirs".into());
    let mut req = request("given");
    req.netns = Some("/run/netns/theirs".into());
    let st = w.sb.run(&req).unwrap();
    assert_eq!(st.netns, Path::new("/run/netns/theirs"));
    assert_eq!(calls(&w.bin).len(), 3);
    assert!(log(&w.bin)
        .iter()
        .filter(|l| l.contains(" ADD "))
        .all(|l| l.contains("netns=/run/netns/theirs")));
    w.sb.remove("given").unwrap();
    assert!(
        w.ns.events.lock().unwrap().is_empty(),
        "created or removed a namespace"
    );
    assert_eq!(
        w.sb.store.load("given").unwrap().map(|r| r.netns_owner),
        None::<NetnsOwner>
    );
}

// A given netns that is not UTF-8 could not be recorded (the record, the cache and every
// result hold it as JSON text): refused with code 4 before any record, namespace or plugin.
#[test]
fn a_given_netns_that_is_not_utf8_is_refused_before_anything_runs() {
    use std::os::unix::ffi::OsStrExt;
    let w = world();
    let mut req = request("badns");
    req.netns = Some(Path::new(std::ffi::OsStr::from_bytes(b"/run/netns/\xff")).into());
    let e = w.sb.run(&req).unwrap_err();
    assert_eq!(e.code(), 4, "{e}");
    assert!(
        e.to_string().contains("CNI_NETNS is not valid UTF-8"),
        "{e}"
    );
    assert!(calls(&w.bin).is_empty());
    assert!(w.ns.events.lock().unwrap().is_empty());
    assert!(w.sb.store.load("badns").unwrap().is_none());
}

#[test]
fn a_run_whose_default_interface_gets_no_address_fails_and_is_undone() {
    let w = world();
    fs::write(w.bin.join("noip-tail"), "").unwrap();
    let e = w.sb.run(&request("noip")).unwrap_err();
    assert!(e.to_string().contains("gave eth0 no IP address"), "{e}");
    assert!(w.sb.store.ids().unwrap().is_empty());
    let c = calls(&w.bin);
    assert_eq!(
        c[c.len() - 3..],
        ["tail DEL eth0", "main DEL eth0", "loopback DEL lo"]
    );
}

/// The sandbox lock files each plugin call held open: `<type> <command> <paths...>`.
fn held(bin: &Path) -> Vec<String> {
    fs::read_to_string(bin.join("held"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

// The plugins of a verb inherit its sandbox's lock (so that plugins outliving a killed verb keep
// the sandbox locked), and only that one: no lock of another sandbox, even one whose verb runs
// in this process at the same time (the other tests of this file).
#[test]
fn each_plugin_holds_the_lock_of_its_own_sandbox_only() {
    let w = world();
    fs::write(w.bin.join("list-held"), b"").unwrap();
    w.sb.run(&request("h1")).unwrap();
    w.sb.stop("h1").unwrap();
    let lock = w.sb.store.dir().join("locks/h1");
    let lock = lock.display();
    assert_eq!(
        held(&w.bin),
        [
            format!("loopback ADD {lock}"),
            format!("main ADD {lock}"),
            format!("tail ADD {lock}"),
            format!("tail DEL {lock}"),
            format!("main DEL {lock}"),
            format!("loopback DEL {lock}"),
        ]
    );
}
