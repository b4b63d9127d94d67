//! Root-only: named namespaces, entering them, and identity checks.

mod common;

use cni_linux::netns::named_path;
use cni_linux::{NetNs, NsError};
use common::TestNs;

#[test]
fn create_open_run_and_delete_named_namespace() {
    let name;
    {
        let t = TestNs::new();
        name = t.name.clone();
        let path = named_path(&name).unwrap();
        let again = NetNs::open(&path).unwrap();
        assert!(again.same_as(&t.ns).unwrap());

        let host = NetNs::current().unwrap();
        assert!(!host.same_as(&t.ns).unwrap());

        // Inside the namespace, the thread's own namespace is the test namespace...
        let inside = t.ns.run(|| NetNs::current().unwrap()).unwrap();
        assert!(inside.same_as(&t.ns).unwrap());
        // ...and the calling thread never moved.
        assert!(NetNs::current().unwrap().same_as(&host).unwrap());

        // A fresh namespace has only `lo`, seen by the independent tool too.
        let links = t.ip_json(&["link", "show"]);
        let names: Vec<_> = links
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["lo"]);

        assert!(matches!(
            NetNs::create_named(&name),
            Err(NsError::AlreadyExists(_))
        ));
    }
    // Dropped: the name is gone, and opening it is "not found".
    assert!(NetNs::open(named_path(&name).unwrap())
        .unwrap_err()
        .is_not_found());
    assert!(NetNs::delete_named(&name).unwrap_err().is_not_found());
}

#[test]
fn proc_pid_path_is_accepted() {
    let ns = NetNs::open(format!("/proc/{}/ns/net", std::process::id())).unwrap();
    assert!(ns.path().ends_with("ns/net"));
}

#[test]
fn panic_inside_run_reaches_the_caller() {
    let t = TestNs::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.ns.run(|| panic!("boom")).unwrap();
    }));
    assert!(result.is_err());
    // The namespace is still usable afterwards (and removed by the guard).
    assert_eq!(t.ns.run(|| 7).unwrap(), 7);
}

/// Runs `NetNs::open(path)` on a thread and fails the test if it has not answered within two
/// seconds (the old blocking open never answers for a FIFO).
fn open_bounded(path: &std::path::Path) -> Result<NetNs, NsError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(NetNs::open(&owned));
    });
    rx.recv_timeout(std::time::Duration::from_secs(2))
        .unwrap_or_else(|_| panic!("NetNs::open({}) blocked", path.display()))
}

fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rcnil-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    dir
}

#[test]
fn a_fifo_is_refused_at_once_not_opened() {
    let dir = scratch_dir("fifo");
    let fifo = dir.join("netns");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = open_bounded(&fifo).unwrap_err();
    assert!(matches!(err, NsError::NotANamespace(_)), "{err}");
    assert!(err.is_not_a_network_namespace());
    assert!(
        err.to_string().contains("is not a network namespace"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_and_directories_are_not_namespaces() {
    let dir = scratch_dir("files");
    let file = dir.join("regular");
    std::fs::write(&file, "x").unwrap();
    for path in [
        file.as_path(),
        dir.as_path(),
        "/proc".as_ref(),
        "/proc/self/status".as_ref(),
    ] {
        let err = open_bounded(path).unwrap_err();
        assert!(
            matches!(err, NsError::NotANamespace(_)),
            "{}: {err}",
            path.display()
        );
        assert!(
            err.to_string().contains("is not a network namespace"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn namespaces_of_other_types_are_named_in_the_error() {
    for (path, kind) in [("/proc/self/ns/mnt", "mnt"), ("/proc/self/ns/uts", "uts")] {
        let err = open_bounded(path.as_ref()).unwrap_err();
        assert!(err.is_not_a_network_namespace(), "{err}");
        assert_eq!(
            err.to_string(),
            format!("{path} is not a network namespace (it is a {kind} namespace)")
        );
    }
}

#[test]
fn a_bind_mounted_namespace_of_another_type_is_refused() {
    // Bind-mounted namespace files read back as their mount point, so this takes the setns
    // probe. The mount lives in a private mount namespace of this thread only.
    let dir = scratch_dir("bind");
    let target = dir.join("uts");
    std::fs::write(&target, "").unwrap();
    let t = target.clone();
    let (err, net) = std::thread::spawn(move || {
        use nix::mount::{mount, MsFlags};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_PRIVATE | MsFlags::MS_REC,
            None::<&str>,
        )
        .unwrap();
        mount(
            Some("/proc/self/ns/uts"),
            &t,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let err = open_bounded(&t).unwrap_err();
        mount(
            Some("/proc/thread-self/ns/net"),
            &t,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let net = open_bounded(&t).map(|_| ());
        (err, net)
    })
    .join()
    .unwrap();
    assert!(
        matches!(err, NsError::OtherNamespace { kind: None, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("is not a network namespace"),
        "{err}"
    );
    net.expect("a bind-mounted network namespace opens");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unusable_paths_are_not_network_namespaces() {
    let dir = scratch_dir("paths");
    let a = dir.join("a");
    let b = dir.join("b");
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let long = dir.join("n".repeat(300));
    let file = dir.join("f");
    std::fs::write(&file, "").unwrap();
    for path in [a, long, file.join("below")] {
        let err = open_bounded(&path).unwrap_err();
        assert!(
            matches!(err, NsError::BadPath { .. }),
            "{}: {err}",
            path.display()
        );
        assert!(err.is_not_a_network_namespace());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
