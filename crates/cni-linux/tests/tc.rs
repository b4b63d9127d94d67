//! Root-only: TBF, ingress qdisc, u32 redirect filter and IFB creation inside a throwaway
//! namespace, checked through the crate and independently through `tc -j`.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::tc::{TbfParams, TcHandle, INGRESS_HANDLE};
use cni_linux::{Handle, NetNs};

use serde_json::Value;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A named namespace `rcnitc-<pid>-<n>`, deleted on drop even when the test panics.
struct TcNs {
    name: String,
    ns: NetNs,
}

impl TcNs {
    fn new() -> Self {
        let name = format!(
            "rcnitc-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let ns = NetNs::create_named(&name).expect("create test namespace (run as root)");
        TcNs { name, ns }
    }

    fn tc_json(&self, args: &[&str]) -> Value {
        let out = Command::new("tc")
            .args(["-j", "-n", &self.name])
            .args(args)
            .output()
            .expect("run tc");
        assert!(
            out.status.success(),
            "tc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        if text.trim().is_empty() {
            return Value::Array(vec![]);
        }
        serde_json::from_str(&text).expect("tc -j output is JSON")
    }
}

impl Drop for TcNs {
    fn drop(&mut self) {
        if let Err(e) = NetNs::delete_named(&self.name) {
            eprintln!("cleanup of namespace {} failed: {e}", self.name);
        }
    }
}

fn veth_pair(h: &mut Handle) -> (u32, u32) {
    h.add_link(&LinkAdd::veth("tca", VethPeer::named("tcb")))
        .unwrap();
    let a = h.link_by_name("tca").unwrap().index;
    let b = h.link_by_name("tcb").unwrap().index;
    h.change_link(&LinkChange::of(a).up()).unwrap();
    h.change_link(&LinkChange::of(b).up()).unwrap();
    (a, b)
}

#[test]
fn root_tbf_is_installed_replaced_and_deleted() {
    let t = TcNs::new();
    let mut h = Handle::in_netns(&t.ns).unwrap();
    let (a, _) = veth_pair(&mut h);

    let params = TbfParams::from_bits(1_000_000, 8_000_000).unwrap();
    h.replace_root_tbf(a, &params).unwrap();
    let q = t.tc_json(&["qdisc", "show", "dev", "tca"]);
    let tbf = q
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["kind"] == "tbf")
        .unwrap_or_else(|| panic!("no tbf in {q}"));
    assert_eq!(tbf["handle"], "1:");
    assert_eq!(tbf["root"], true);
    assert_eq!(tbf["options"]["rate"], 125_000);
    // tc shows the limit as the queueing latency it allows: the reference's 25 ms.
    assert_eq!(tbf["options"]["lat"], 25_000);
    // tc prints the bucket in bytes: 1 MB at 125 kB/s.
    assert_eq!(tbf["options"]["burst"], 1_000_000);

    let ours = h.qdiscs(a).unwrap();
    let found = ours.iter().find(|q| q.kind == "tbf").unwrap();
    assert_eq!(found.tbf, Some(params));
    assert_eq!(found.parent, TcHandle::ROOT);

    // Replacing changes the rate in place.
    let faster = TbfParams::from_bits(80_000_000, 8_000_000).unwrap();
    h.replace_root_tbf(a, &faster).unwrap();
    let q = t.tc_json(&["qdisc", "show", "dev", "tca"]);
    assert_eq!(q[0]["options"]["rate"], 10_000_000, "{q}");

    assert!(h.delete_qdisc(a, TcHandle::ROOT).unwrap());
    assert!(!h.qdiscs(a).unwrap().iter().any(|q| q.kind == "tbf"));
    assert!(!h.delete_qdisc(a, TcHandle::ROOT).unwrap());
}

#[test]
fn ingress_redirect_to_ifb() {
    let t = TcNs::new();
    let mut h = Handle::in_netns(&t.ns).unwrap();
    let (a, _) = veth_pair(&mut h);
    h.add_link(&LinkAdd::ifb("tcifb").mtu(1400).txqlen(0).up())
        .unwrap();
    let ifb = h.link_by_name("tcifb").unwrap();
    assert_eq!(ifb.kind.as_deref(), Some("ifb"));
    assert!(ifb.up);
    assert_eq!(ifb.mtu, 1400);
    assert_eq!(ifb.txqlen, 0);

    h.add_ingress_qdisc(a).unwrap();
    assert!(h.add_ingress_qdisc(a).unwrap_err().is_exists());
    h.add_ingress_redirect(a, ifb.index).unwrap();

    let q = h.qdiscs(a).unwrap();
    let ingress = q.iter().find(|q| q.kind == "ingress").expect("ingress");
    assert_eq!(ingress.handle, INGRESS_HANDLE);

    let filters = t.tc_json(&["filter", "show", "dev", "tca", "ingress"]);
    let with_action = filters
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["options"]["actions"].is_array())
        .unwrap_or_else(|| panic!("no filter with actions: {filters}"));
    assert_eq!(with_action["kind"], "u32");
    assert_eq!(with_action["protocol"], "all");
    assert_eq!(with_action["pref"], 1);
    assert_eq!(with_action["options"]["flowid"], "1:1");
    let action = &with_action["options"]["actions"][0];
    assert_eq!(action["kind"], "mirred");
    assert_eq!(action["mirred_action"], "redirect");
    assert_eq!(action["direction"], "egress");
    assert_eq!(action["to_dev"], "tcifb");

    assert!(h.delete_qdisc(a, TcHandle::INGRESS).unwrap());
    let filters = t.tc_json(&["filter", "show", "dev", "tca", "ingress"]);
    assert_eq!(filters.as_array().map(Vec::len), Some(0), "{filters}");
    assert!(h.delete_link_by_name("tcifb").unwrap());
}
