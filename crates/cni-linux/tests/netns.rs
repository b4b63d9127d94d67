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
