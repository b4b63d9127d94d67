//! Root-only: what the agent promises the node's runtime. A dead agent makes ADD fail with code
//! 11 naming it (DEL still works, attached pods keep their traffic); the conflist offers 1.0.0
//! plus `cniVersions`, which rcni's runtime runs at 1.1.0 with rcni's plugins and at 1.0.0 with
//! the Go plugins; `--cni-version` pins one version and is refused when a plugin lacks it; and
//! the conf dir, watched with inotify, sees no name but the conflist's.

mod harness;

use std::os::unix::ffi::OsStrExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use cni_testkit::ping;
use harness::*;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use serde_json::{json, Value};

#[test]
fn a_killed_agent_makes_add_fail_with_code_11_naming_it_and_del_and_traffic_go_on() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::with_nodes(json!({"Type": "host-gw"}), 2);
    let a = c.add_pod(0);
    let before = c.add_pod(0);
    let b = c.add_pod(1);
    assert!(ping(&a.ns.name, b.ip));

    c.nodes[0].agent.kill();
    let killed = Instant::now();
    let mut added_meanwhile = 0;
    let refusal = loop {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "ADD still accepted 30 s after the agent was killed"
        );
        match c.try_add_pod(0) {
            Ok((pod, _)) => {
                // Still within the status file's validity: undo and try again.
                c.rcni(0, "del", &pod.ns).unwrap();
                added_meanwhile += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => break e,
        }
    };
    let refused_after = killed.elapsed();
    eprintln!(
        "dead agent: ADD refused {refused_after:.2?} after SIGKILL ({added_meanwhile} ADDs \
         accepted before); error: {refusal}"
    );
    assert_eq!(refusal["code"], 11, "{refusal}");
    let msg = refusal["msg"].as_str().unwrap();
    assert!(msg.contains("rcni-node on node1 is not running"), "{msg}");
    // With NetworkPolicy on, the bridge finds the agent's pod socket dead at once; else the
    // status file expires.
    assert!(
        msg.contains("status expired") || msg.contains("its pod socket"),
        "{msg}"
    );
    assert!(msg.contains("try again later"), "{msg}");
    // STATUS says the same with 50.
    assert_eq!(c.status_code(0), 50);
    // Pods attached before keep their traffic, and DEL is never refused.
    assert!(ping(&a.ns.name, b.ip), "pod traffic with the agent dead");
    assert!(ping(&b.ns.name, a.ip), "pod traffic with the agent dead");
    c.rcni(0, "del", &before.ns)
        .unwrap_or_else(|e| panic!("DEL with the agent dead: {e}"));

    // Back: ADD works again, and the new pod reaches the other node.
    c.restart_agent(0);
    let (pod, _) = c
        .try_add_pod(0)
        .unwrap_or_else(|e| panic!("ADD after the restart: {e}"));
    assert!(ping(&pod.ns.name, b.ip));
}

/// Waits for the agent of node `i` to exit; its exit status.
fn exit_of(c: &mut Cluster, i: usize) -> Option<ExitStatus> {
    let mut status = None;
    wait_for(Duration::from_secs(20), || {
        status = c.nodes[i]
            .agent
            .0
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten());
        status.is_some()
    });
    c.nodes[i].agent.0 = None;
    status
}

fn conflist(c: &Cluster, i: usize) -> Value {
    let text = std::fs::read(c.nodes[i].conf_dir().join("10-rcni.conflist")).unwrap();
    serde_json::from_slice(&text).unwrap()
}

/// Every (name, mask) the watch has seen so far.
fn events(watch: &Inotify) -> Vec<(String, AddWatchFlags)> {
    let mut seen = Vec::new();
    while let Ok(batch) = watch.read_events() {
        for e in batch {
            let name = e
                .name
                .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
                .unwrap_or_default();
            seen.push((name, e.mask));
        }
    }
    seen
}

/// The conf dir's events since the last call: only the conflist's name may appear (besides
/// events of the directory itself, which carry no name: its opening to be read or fsynced, and
/// the temp subdirectory's creation and reading (the sweep of dead writers' temp files), which
/// runtimes do not take for a config change).
fn only_the_conflist(watch: &Inotify, step: &str) -> Vec<(String, AddWatchFlags)> {
    let subdir_made_or_read = AddWatchFlags::IN_ISDIR
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_OPEN
        | AddWatchFlags::IN_ACCESS
        | AddWatchFlags::IN_CLOSE_NOWRITE;
    let seen = events(watch);
    for (name, mask) in &seen {
        let subdir = name == ".rcni-tmp" && subdir_made_or_read.contains(*mask);
        assert!(
            name == "10-rcni.conflist" || name.is_empty() || subdir,
            "{step}: event {mask:?} for {name:?} in the conf dir: {seen:?}"
        );
    }
    seen
}

/// Whether the events hold a rename into place followed by a write of the final name (what
/// makes containerd reload).
fn replaced_and_announced(seen: &[(String, AddWatchFlags)]) -> bool {
    let moved = seen
        .iter()
        .position(|(_, m)| m.contains(AddWatchFlags::IN_MOVED_TO));
    moved.is_some_and(|at| {
        seen[at..]
            .iter()
            .any(|(_, m)| m.contains(AddWatchFlags::IN_MODIFY))
    })
}

#[test]
fn the_conflist_runs_at_1_1_0_with_rcni_plugins_and_1_0_0_with_go_plugins_written_without_noise() {
    if skip_unless_root() {
        return;
    }
    let Some(go) = cni_testkit::go_plugins_dir() else {
        eprintln!("skipped: Go reference plugins not installed in /usr/lib/cni");
        return;
    };
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    let i = c.add_node();
    std::fs::create_dir_all(c.nodes[i].conf_dir()).unwrap();
    let watch = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
    watch
        .add_watch(&c.nodes[i].conf_dir(), AddWatchFlags::IN_ALL_EVENTS)
        .unwrap();

    // rcni's plugins: 1.0.0 for old runtimes, the list up to 1.1.0; rcni's runtime picks 1.1.0.
    c.start_agent(i);
    let list = conflist(&c, i);
    assert_eq!(list["cniVersion"], "1.0.0");
    assert_eq!(list["cniVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
    let (_, result) = c.try_add_pod(i).unwrap();
    assert_eq!(result["cniVersion"], "1.1.0", "{result}");
    let first = only_the_conflist(&watch, "first start");
    assert!(replaced_and_announced(&first), "{first:?}");

    // A restart with the same plugins leaves the file alone.
    c.nodes[i].agent.terminate();
    c.restart_agent(i);
    let same = only_the_conflist(&watch, "restart");
    assert!(
        !same.iter().any(|(_, m)| m.intersects(
            AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE
        )),
        "an unchanged conflist was rewritten: {same:?}"
    );

    // The Go plugins know no 1.1.0: the list stops at 1.0.0 and the runtime runs 1.0.0.
    c.nodes[i].agent.terminate();
    c.plugins = go.clone();
    c.restart_agent(i);
    let list = conflist(&c, i);
    assert_eq!(list["cniVersion"], "1.0.0");
    assert_eq!(list["cniVersions"], json!(["0.4.0", "1.0.0"]));
    let (pod, result) = c.try_add_pod(i).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0", "{result}");
    c.rcni(i, "del", &pod.ns).unwrap();
    let rewrite = only_the_conflist(&watch, "rewrite");
    assert!(replaced_and_announced(&rewrite), "{rewrite:?}");

    // A pin: only that version; a pin the plugins lack, or an unknown one, stops the agent.
    c.nodes[i].agent.terminate();
    c.nodes[i].extra = vec!["--cni-version".into(), "0.4.0".into()];
    c.restart_agent(i);
    let list = conflist(&c, i);
    assert_eq!(list["cniVersion"], "0.4.0");
    assert_eq!(list.get("cniVersions"), None);
    let (_, result) = c.try_add_pod(i).unwrap();
    assert_eq!(result["cniVersion"], "0.4.0", "{result}");
    c.nodes[i].agent.terminate();
    for (pin, why) in [
        ("1.1.0", format!("{}/bridge supports only", go.display())),
        ("1.2.0", "not a CNI version rcni knows".to_string()),
    ] {
        c.nodes[i].extra = vec!["--cni-version".into(), pin.into()];
        let log_before = c.nodes[i].agent_log().len();
        c.spawn_agent(i);
        let status = exit_of(&mut c, i).expect("the agent exits");
        assert!(!status.success(), "--cni-version {pin}: {status}");
        let log = c.nodes[i].agent_log()[log_before..].to_string();
        let last = log.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("rcni-node: --cni-version {pin}: ")) && last.contains(&why),
            "--cni-version {pin}: {log}"
        );
    }
    only_the_conflist(&watch, "pins");
}
