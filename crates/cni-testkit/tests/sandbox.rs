//! The sandbox makes and removes its namespaces and temp dir (run as root).

use std::process::Command;

use cni_testkit::{link, Sandbox};

/// Names printed by `ip netns list` (lines look like `name (id: 3)` or `name`).
fn netns_list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn creates_and_removes_namespaces_and_dir() {
    let sb = Sandbox::new().unwrap();
    let a = sb.add_container().unwrap();
    let b = sb.add_container().unwrap();
    let names = [sb.host().name.clone(), a.name.clone(), b.name.clone()];
    let dir = sb.dir().to_path_buf();

    let listed = netns_list();
    for name in &names {
        assert!(name.starts_with("rcnit-") && name.len() < 40, "{name}");
        assert!(listed.contains(name), "{name} not in {listed:?}");
    }
    assert_eq!(a.path, std::path::Path::new("/run/netns").join(&a.name));
    assert!(a.path.exists());
    assert_ne!(a, b);
    assert!(dir.is_dir());

    // lo is up in the host namespace only
    let host_lo = link(&sb.host().name, "lo").unwrap().unwrap();
    assert!(host_lo["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));
    let pod_lo = link(&a.name, "lo").unwrap().unwrap();
    assert!(!pod_lo["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));

    drop(sb);
    let listed = netns_list();
    for name in &names {
        assert!(!listed.contains(name), "{name} left behind");
    }
    assert!(!dir.exists());
}

#[test]
fn drop_during_panic_still_removes_everything() {
    let mut created = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let sb = Sandbox::new().unwrap();
        let c = sb.add_container().unwrap();
        created.push(sb.host().name.clone());
        created.push(c.name.clone());
        panic!("test failure inside the sandbox");
    }));
    assert!(result.is_err());
    assert_eq!(created.len(), 2);
    let listed = netns_list();
    for name in &created {
        assert!(!listed.contains(name), "{name} left behind after panic");
    }
}

#[test]
fn namespaces_removed_early_are_tolerated() {
    let sb = Sandbox::new().unwrap();
    let gone_by_hand = sb.add_container().unwrap();
    let removed = sb.add_container().unwrap();
    let kept = sb.add_container().unwrap();

    let out = Command::new("ip")
        .args(["netns", "del", &gone_by_hand.name])
        .output()
        .unwrap();
    assert!(out.status.success());

    sb.remove_container(&removed).unwrap();
    assert!(!removed.path.exists());
    sb.remove_container(&removed)
        .expect_err("no longer part of the sandbox");
    assert!(kept.path.exists());

    let other = Sandbox::new().unwrap();
    other
        .remove_container(&kept)
        .expect_err("a sandbox removes only its own namespaces");
    assert!(kept.path.exists());

    drop(sb);
    assert!(!kept.path.exists());
    assert!(!netns_list().contains(&gone_by_hand.name));
}

#[test]
fn parallel_sandboxes_get_distinct_names() {
    let sandboxes: Vec<Sandbox> = (0..3).map(|_| Sandbox::new().unwrap()).collect();
    let mut names: Vec<&str> = sandboxes.iter().map(|s| s.host().name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3);
    let mut dirs: Vec<_> = sandboxes.iter().map(|s| s.dir()).collect();
    dirs.sort();
    dirs.dedup();
    assert_eq!(dirs.len(), 3);
}

#[test]
fn exec_in_runs_inside_the_namespace() {
    let sb = Sandbox::new().unwrap();
    let c = sb.add_container().unwrap();
    let out = sb
        .exec_in(
            &c.name,
            [
                "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
            ],
        )
        .unwrap();
    out.assert_success();
    assert!(link(&c.name, "v0").unwrap().is_some());
    assert!(link(&sb.host().name, "v0").unwrap().is_none());

    let out = sb.exec_host(["sh", "-c", "echo hi; exit 4"]).unwrap();
    assert_eq!((out.status, out.stdout.as_str()), (4, "hi\n"));

    let out = sb.exec_in("rcnit-does-not-exist", ["true"]).unwrap();
    assert!(!out.success());
    assert!(sb.exec_in("", ["true"]).is_err());
}

#[test]
fn leftovers_of_dead_processes_are_swept() {
    // pid_max is at most 2^22, so no process 99999999 can exist.
    let stale = format!("rcnit-99999999-0-{:04x}", std::process::id() as u16);
    let out = Command::new("ip")
        .args(["netns", "add", &stale])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stale_dir = std::env::temp_dir().join(&stale);
    std::fs::create_dir_all(&stale_dir).unwrap();

    let sb = Sandbox::new().unwrap();
    assert!(!netns_list().contains(&stale), "stale namespace kept");
    assert!(!stale_dir.exists(), "stale temp dir kept");
    // live ones are not swept
    assert!(netns_list().contains(&sb.host().name));
}

#[test]
fn a_processs_unnamed_namespace_is_attached_and_the_name_removed() {
    // A process in a network namespace nothing names (as a container runtime makes them).
    let mut child = Command::new("unshare")
        .args(["--net", "sh", "-c"])
        .arg("ip link add v0 type veth peer name v1 && echo ready && exec sleep 60")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready, "ready\n");
    let sb = Sandbox::new().unwrap();
    let attached = sb.attach_container(child.id()).unwrap();
    assert!(netns_list().contains(&attached.name));
    assert!(
        link(&attached.name, "v0").unwrap().is_some(),
        "the process's namespace"
    );
    assert!(sb.attach_container(u32::MAX).is_err(), "no such process");
    drop(sb);
    assert!(!netns_list().contains(&attached.name), "name removed");
    child.kill().unwrap();
    child.wait().unwrap();
}
