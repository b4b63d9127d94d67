//! The real `rcni-plugins` binary run as `tuning` against veth pairs in throwaway
//! namespaces: kernel state read with `ip -j` and `/proc/sys` inside the pod, DEL restoring,
//! CHECK catching drift, bad input refused with the right code, and interop with Go's tuning.
//! Needs root.

mod common;

use std::path::{Path, PathBuf};

use cni_testkit::{assert_cni_error, assert_silent_success};
use cni_testkit::{go_plugins_dir, Netns, PluginCall, PluginOutput};
use common::Setup;
use serde_json::{json, Value};

const TUNING: &str = "tuning";
/// The MAC each test veth is created with, so restores can be checked exactly.
const ORIG_MAC: &str = "02:11:22:33:44:55";

/// A sandbox with `tuning` linked, pods with an `eth0` veth, and a backup directory.
struct Lab {
    s: Setup,
    data_dir: PathBuf,
}

impl Lab {
    fn new() -> Lab {
        let s = Setup::new(&[TUNING]);
        let data_dir = s.sb.dir().join("tuning-data");
        let lab = Lab { s, data_dir };
        lab.add_veth(&lab.s.pod);
        lab
    }

    /// Gives `pod` an `eth0` (MAC [`ORIG_MAC`], MTU 1500, up) with its peer `peer0` beside it.
    fn add_veth(&self, pod: &Netns) {
        let out = self.s.sb.exec_in(
            &pod.name,
            [
                "sh",
                "-c",
                &format!(
                    "ip link add eth0 address {ORIG_MAC} mtu 1500 txqueuelen 1000 type veth peer name peer0 \
                     && ip link set eth0 up && ip link set peer0 up"
                ),
            ],
        );
        out.unwrap().assert_success();
    }

    fn new_pod(&self) -> Netns {
        let pod = self.s.sb.add_container().expect("pod namespace");
        self.add_veth(&pod);
        pod
    }

    fn pod(&self) -> &Netns {
        &self.s.pod
    }

    /// A prevResult like bridge's: host veth, container eth0, one address.
    fn prev(&self, pod: &Netns) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "peer0", "mac": "02:00:00:00:00:aa"},
                {"name": "eth0", "mac": ORIG_MAC, "sandbox": pod.path},
            ],
            "ips": [{"address": "198.18.9.2/24", "gateway": "198.18.9.1", "interface": 1}],
        })
    }

    /// A tuning config with `keys`, the lab's dataDir and (unless null) a prevResult.
    fn conf(&self, pod: &Netns, keys: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.0.0", "name": "tune-net", "type": "tuning",
            "dataDir": self.data_dir, "prevResult": self.prev(pod),
        });
        for (k, v) in keys.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    }

    fn call(&self, command: &str, pod: &Netns, conf: &Value) -> PluginCall {
        PluginCall::new(command)
            .container_id("ctr1")
            .netns(&pod.path)
            .ifname("eth0")
            .path(&self.s.cni_dir)
            .stdin(conf.to_string())
    }

    fn run(&self, call: &PluginCall) -> PluginOutput {
        self.s.run(TUNING, call)
    }

    fn run_go(&self, call: &PluginCall) -> PluginOutput {
        let go = go_plugins_dir()
            .expect("checked by the caller")
            .join(TUNING);
        self.s.sb.run_plugin(go, call).expect("run Go tuning")
    }

    fn backup_file(&self) -> PathBuf {
        self.data_dir.join("ctr1_eth0.json")
    }

    /// `/proc/sys/<path>` read inside `pod`.
    fn sysctl(&self, pod: &Netns, path: &str) -> String {
        let out = self
            .s
            .sb
            .exec_in(&pod.name, ["cat", &format!("/proc/sys/{path}")])
            .unwrap();
        out.assert_success();
        out.stdout.trim().to_string()
    }

    fn set_sysctl(&self, pod: &Netns, path: &str, value: &str) {
        let cmd = format!("echo {value} > /proc/sys/{path}");
        let out = self.s.sb.exec_in(&pod.name, ["sh", "-c", &cmd]).unwrap();
        out.assert_success();
    }

    fn ip(&self, pod: &Netns, cmd: &str) {
        let out = self
            .s
            .sb
            .exec_in(&pod.name, ["sh", "-c", &format!("ip {cmd}")])
            .unwrap();
        out.assert_success();
    }
}

/// What `ip -j -d link` says about a link: MAC, MTU, txqueuelen, PROMISC, ALLMULTI.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LinkState {
    mac: String,
    mtu: u64,
    txqlen: u64,
    promisc: bool,
    allmulti: bool,
}

fn link_state(pod: &Netns, ifname: &str) -> LinkState {
    let l = cni_testkit::link(&pod.name, ifname)
        .unwrap()
        .unwrap_or_else(|| panic!("{ifname} missing in {}", pod.name));
    let flag = |f: &str| {
        l["flags"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == f))
    };
    LinkState {
        mac: l["address"].as_str().unwrap().to_string(),
        mtu: l["mtu"].as_u64().unwrap(),
        // `ip -j` leaves txqlen out when it is 0.
        txqlen: l["txqlen"].as_u64().unwrap_or(0),
        promisc: flag("PROMISC"),
        allmulti: flag("ALLMULTI"),
    }
}

fn original() -> LinkState {
    LinkState {
        mac: ORIG_MAC.into(),
        mtu: 1500,
        txqlen: 1000,
        promisc: false,
        allmulti: false,
    }
}

fn everything() -> Value {
    json!({
        "sysctl": {
            "net.ipv4.conf.IFNAME.arp_filter": "1",
            "net.core.somaxconn": "777",
            "net/ipv4/tcp_rmem": "4096 65536 1048576",
        },
        "mac": "02:aa:bb:cc:dd:01",
        "promisc": true,
        "mtu": 1400,
        "txQLen": 123,
        "allmulti": true,
    })
}

// ADD changes every key in the pod, updates the MAC in the result and saves the old
// values; CHECK passes; DEL restores the link (not the sysctls) and removes the backup.
#[test]
fn add_check_del_round_trip() {
    let lab = Lab::new();
    let pod = lab.pod();
    let conf = lab.conf(pod, everything());
    let before_if = lab.sysctl(pod, "net/ipv4/conf/eth0/arp_filter");
    assert_eq!(before_if, "0");

    let out = lab.run(&lab.call("ADD", pod, &conf));
    out.assert_success();
    let result = out.json().unwrap();
    let mut want = lab.prev(pod);
    want["interfaces"][1]["mac"] = json!("02:aa:bb:cc:dd:01");
    assert_eq!(result, want, "prevResult passed through with the new MAC");

    assert_eq!(
        link_state(pod, "eth0"),
        LinkState {
            mac: "02:aa:bb:cc:dd:01".into(),
            mtu: 1400,
            txqlen: 123,
            promisc: true,
            allmulti: true,
        }
    );
    let peer = link_state(pod, "peer0");
    assert_eq!(
        (peer.mtu, peer.promisc),
        (1500, false),
        "the peer is untouched"
    );
    assert_eq!(lab.sysctl(pod, "net/ipv4/conf/eth0/arp_filter"), "1");
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), "777");
    assert_eq!(lab.sysctl(pod, "net/ipv4/tcp_rmem"), "4096\t65536\t1048576");

    let mut saved: Value =
        serde_json::from_str(&std::fs::read_to_string(lab.backup_file()).unwrap()).unwrap();
    assert_eq!(saved["rcniOwner"], tag("tune-net", "ctr1", "eth0"));
    saved.as_object_mut().unwrap().remove("rcniOwner");
    assert_eq!(
        saved,
        json!({"mac": ORIG_MAC, "promisc": false, "mtu": 1500, "allmulti": false, "txQLen": 1000})
    );

    assert_silent_success(&lab.run(&lab.call("CHECK", pod, &conf)));

    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    assert_eq!(link_state(pod, "eth0"), original());
    assert!(!lab.backup_file().exists());
    // Sysctls are never reverted (Go neither).
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), "777");
    // DEL again, and DEL without prevResult or netns, succeed.
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    let bare = lab.conf(pod, json!({"prevResult": null}));
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &bare).netns("")));
}

// podman's `{type: tuning}` changes nothing, writes no backup, passes the result on
// in the requested version.
/// A repeated ADD inside tuning: a repeated ADD is refused and the first ADD's backup (the
/// original values) and link state are kept, so DEL still restores the original.
#[test]
fn a_repeated_add_keeps_the_first_backup() {
    let lab = Lab::new();
    let pod = lab.pod();
    let conf = lab.conf(pod, everything());
    lab.run(&lab.call("ADD", pod, &conf)).assert_success();
    let backup = std::fs::read_to_string(lab.backup_file()).unwrap();
    let tuned = link_state(pod, "eth0");

    let again = lab.run(&lab.call("ADD", pod, &conf));
    assert!(!again.success(), "{again}");
    assert!(again.stdout.contains("already exists"), "{again}");
    assert_eq!(std::fs::read_to_string(lab.backup_file()).unwrap(), backup);
    assert_eq!(link_state(pod, "eth0"), tuned);

    lab.run(&lab.call("DEL", pod, &conf)).assert_success();
    assert_eq!(link_state(pod, "eth0"), original());
}

#[test]
fn empty_config_passes_the_result_through() {
    let lab = Lab::new();
    let pod = lab.pod();
    let mut conf = lab.conf(pod, json!({"cniVersion": "0.4.0"}));
    conf["prevResult"]["cniVersion"] = json!("0.4.0");
    let out = lab.run(&lab.call("ADD", pod, &conf));
    out.assert_success();
    let result = out.json().unwrap();
    assert_eq!(result["cniVersion"], "0.4.0");
    assert_eq!(result["ips"][0]["version"], "4", "0.4.0 layout");
    assert_eq!(result["interfaces"][1]["mac"], ORIG_MAC);
    assert_eq!(link_state(pod, "eth0"), original());
    assert!(!lab.data_dir.exists(), "no backup without link changes");
    assert_silent_success(&lab.run(&lab.call("CHECK", pod, &conf)));
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
}

// CHECK is strict (Go): each drifted attribute or sysctl is reported; `promisc: false` means
// promiscuous mode must be off.
#[test]
fn check_detects_drift() {
    let lab = Lab::new();
    let pod = lab.pod();
    let conf = lab.conf(pod, everything());
    lab.run(&lab.call("ADD", pod, &conf)).assert_success();
    let check = || lab.run(&lab.call("CHECK", pod, &conf));
    assert_silent_success(&check());

    let drifts = [
        ("link set eth0 mtu 1300", "link set eth0 mtu 1400", "MTU"),
        (
            "link set eth0 address 02:aa:bb:cc:dd:02",
            "link set eth0 address 02:aa:bb:cc:dd:01",
            "Ethernet",
        ),
        (
            "link set eth0 promisc off",
            "link set eth0 promisc on",
            "promisc",
        ),
        (
            "link set eth0 allmulticast off",
            "link set eth0 allmulticast on",
            "all-multicast",
        ),
        (
            "link set eth0 txqueuelen 5",
            "link set eth0 txqueuelen 123",
            "transmit queue length",
        ),
    ];
    for (drift, repair, what) in drifts {
        lab.ip(pod, drift);
        let e = assert_cni_error(&check(), 999);
        assert!(e["msg"].as_str().unwrap().contains(what), "{what}: {e}");
        lab.ip(pod, repair);
        assert_silent_success(&check());
    }

    lab.set_sysctl(pod, "net/ipv4/conf/eth0/arp_filter", "0");
    let e = assert_cni_error(&check(), 999);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("/proc/sys/net/ipv4/conf/eth0/arp_filter"),
        "{e}"
    );
    lab.set_sysctl(pod, "net/ipv4/conf/eth0/arp_filter", "1");
    assert_silent_success(&check());

    // promisc not requested: CHECK requires it off.
    let quiet = lab.conf(
        pod,
        json!({"sysctl": null, "promisc": null, "mac": null, "mtu": null,
        "txQLen": null, "allmulti": null}),
    );
    let e = assert_cni_error(&lab.run(&lab.call("CHECK", pod, &quiet)), 999);
    assert!(e["msg"].as_str().unwrap().contains("promisc"), "{e}");

    lab.ip(pod, "link del eth0");
    let e = assert_cni_error(&lab.run(&lab.call("CHECK", pod, &quiet)), 999);
    assert!(e["msg"]
        .as_str()
        .unwrap()
        .contains("Cannot find container link eth0"));
}

// Bad input is refused before anything changes, with typed codes.
#[test]
fn bad_input_is_refused_with_codes() {
    let lab = Lab::new();
    let pod = lab.pod();
    let somaxconn = lab.sysctl(pod, "net/core/somaxconn");
    let add = |keys: Value| lab.run(&lab.call("ADD", pod, &lab.conf(pod, keys)));

    // Keys outside /proc/sys/net/ (even after a valid one): code 7, nothing written.
    for key in ["kernel.hostname", "vm.swappiness", "net", "netfilter.x"] {
        let out = add(json!({"sysctl": {"net.core.somaxconn": "901", key: "1"}, "mtu": 1400}));
        let e = assert_cni_error(&out, 7);
        assert!(
            e["msg"]
                .as_str()
                .unwrap()
                .contains("invalid net sysctl key"),
            "{e}"
        );
    }
    // The only way to `..` is the interface name, which the skeleton refuses.
    let out = lab.run(
        &lab.call(
            "ADD",
            pod,
            &lab.conf(pod, json!({"sysctl": {"net.IFNAME.x": "1"}})),
        )
        .ifname(".."),
    );
    assert_cni_error(&out, 4);

    // Missing prevResult.
    let e = assert_cni_error(&add(json!({"prevResult": null, "mtu": 1400})), 7);
    assert!(e["msg"].as_str().unwrap().contains("prevResult"), "{e}");
    // Duplicated sysctl key (a raw request: JSON maps cannot hold the duplicate).
    let dup = lab.conf(pod, json!({})).to_string().replacen(
        "{",
        r#"{"sysctl":{"net.core.somaxconn":"902","net.core.somaxconn":"903"},"#,
        1,
    );
    let out = lab.run(&lab.call("ADD", pod, &json!(null)).stdin(dup));
    let e = assert_cni_error(&out, 7);
    assert!(e["msg"].as_str().unwrap().contains("duplicated"), "{e}");
    // Wrong types and bad values.
    for keys in [
        json!({"mtu": "1400"}),
        json!({"mtu": -1}),
        json!({"txQLen": -1}),
        json!({"promisc": "true"}),
        json!({"mac": "not-a-mac"}),
        json!({"sysctl": {"net.core.somaxconn": 5}}),
        json!({"args": {"cni": {"allmulti": "yes"}}}),
    ] {
        assert_cni_error(&add(keys.clone()), 7);
    }
    // Unknown CNI_ARGS without IgnoreUnknown (Go's LoadArgs): code 4.
    let out = lab.run(
        &lab.call("ADD", pod, &lab.conf(pod, json!({})))
            .args("FOO=bar"),
    );
    assert_cni_error(&out, 4);
    // A missing netns is code 3.
    let gone = lab.new_pod();
    lab.s.sb.remove_container(&gone).unwrap();
    assert_cni_error(
        &lab.run(&lab.call("ADD", &gone, &lab.conf(&gone, json!({})))),
        3,
    );

    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), somaxconn);
    assert_eq!(link_state(pod, "eth0"), original());
    assert!(!lab.backup_file().exists());
}

// A failed ADD undoes what it did: sysctls back, link attributes back, no backup file left.
#[test]
fn failed_add_rolls_back() {
    let lab = Lab::new();
    let pod = lab.pod();
    let somaxconn = lab.sysctl(pod, "net/core/somaxconn");
    // veth refuses an MTU above 65535 after the MAC and promisc changed.
    let conf = lab.conf(
        pod,
        json!({"sysctl": {"net.core.somaxconn": "555"}, "mac": "02:aa:bb:cc:dd:09",
               "promisc": true, "mtu": 70000}),
    );
    let e = assert_cni_error(&lab.run(&lab.call("ADD", pod, &conf)), 999);
    assert!(e["msg"].as_str().unwrap().contains("MTU"), "{e}");
    assert_eq!(link_state(pod, "eth0"), original());
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), somaxconn);
    assert!(!lab.backup_file().exists());

    // A link attribute for an interface that is not there: error, the sysctl is undone.
    lab.ip(pod, "link del eth0");
    let conf = lab.conf(
        pod,
        json!({"sysctl": {"net.core.somaxconn": "556"}, "mtu": 1400}),
    );
    let e = assert_cni_error(&lab.run(&lab.call("ADD", pod, &conf)), 999);
    assert!(e["msg"].as_str().unwrap().contains("eth0"), "{e}");
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), somaxconn);
    assert!(!lab.backup_file().exists());
}

// For the MAC, args.cni wins over runtimeConfig, which wins over CNI_ARGS, which
// wins over the `mac` key; args.cni overrides the other keys too.
#[test]
fn mac_sources_and_args_overrides() {
    let lab = Lab::new();
    let pod = lab.pod();
    let cases = [
        (json!({"mac": "02:00:00:00:00:01"}), "", "02:00:00:00:00:01"),
        (
            json!({"mac": "02:00:00:00:00:01"}),
            "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:00:00:00:00:02",
            "02:00:00:00:00:02",
        ),
        (
            json!({"runtimeConfig": {"mac": "02:00:00:00:00:03"}}),
            "MAC=02:00:00:00:00:02",
            "02:00:00:00:00:03",
        ),
        (
            json!({"RuntimeConfig": {"mac": "02:00:00:00:00:03"},
                   "args": {"cni": {"mac": "02:00:00:00:00:04"}}}),
            "MAC=02:00:00:00:00:02",
            "02:00:00:00:00:04",
        ),
    ];
    for (keys, env, want) in cases {
        let conf = lab.conf(pod, keys);
        let out = lab.run(&lab.call("ADD", pod, &conf).args(env));
        out.assert_success();
        assert_eq!(out.json().unwrap()["interfaces"][1]["mac"], want);
        assert_eq!(link_state(pod, "eth0").mac, want);
        assert_silent_success(&lab.run(&lab.call("CHECK", pod, &conf).args(env)));
        assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf).args(env)));
        assert_eq!(link_state(pod, "eth0"), original());
    }

    // args.cni overrides every key; a null `sysctl` with args.cni.sysctl works (Go panics).
    let conf = lab.conf(
        pod,
        json!({"sysctl": null, "mtu": 1400, "promisc": true, "allmulti": false,
               "args": {"cni": {"sysctl": {"net.core.somaxconn": "612"}, "mtu": 1280,
                                "promisc": false, "allmulti": true, "txQLen": 0}}}),
    );
    lab.run(&lab.call("ADD", pod, &conf)).assert_success();
    assert_eq!(
        link_state(pod, "eth0"),
        LinkState {
            mtu: 1280,
            txqlen: 0,
            allmulti: true,
            ..original()
        }
    );
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), "612");
    assert_silent_success(&lab.run(&lab.call("CHECK", pod, &conf)));
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    assert_eq!(link_state(pod, "eth0"), original());
}

// The allowlist (debug builds read it from RCNI_TUNING_ALLOWLIST): every key must match one
// of its patterns; a missing file allows everything.
#[test]
fn allowlist_restricts_keys() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: release builds read only /etc/cni/tuning/allowlist.conf");
        return;
    }
    let lab = Lab::new();
    let pod = lab.pod();
    let list = lab.s.sb.dir().join("allowlist.conf");
    std::fs::write(
        &list,
        "^net.ipv4.conf.IFNAME.[a-z_]*$\n\n^net.core.somaxconn$\n",
    )
    .unwrap();
    let add = |sysctl: Value| {
        let call = lab
            .call("ADD", pod, &lab.conf(pod, json!({ "sysctl": sysctl })))
            .env("RCNI_TUNING_ALLOWLIST", &list);
        lab.run(&call)
    };
    add(json!({"net.ipv4.conf.IFNAME.arp_filter": "1", "net.core.somaxconn": "444"}))
        .assert_success();
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), "444");
    let e = assert_cni_error(
        &add(json!({"net.core.somaxconn": "445", "net.ipv4.ip_forward": "1"})),
        7,
    );
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("net.ipv4.ip_forward is not allowed"),
        "{e}"
    );
    assert_eq!(lab.sysctl(pod, "net/core/somaxconn"), "444");
    std::fs::remove_file(&list).unwrap();
    add(json!({"net.ipv4.ip_forward": "1"})).assert_success();
    assert_eq!(lab.sysctl(pod, "net/ipv4/ip_forward"), "1");
}

// DEL never fails: a vanished netns or interface, or an unreadable backup, drops the file.
#[test]
fn del_always_succeeds_and_cleans_the_backup() {
    let lab = Lab::new();
    let pod = lab.new_pod();
    let conf = lab.conf(&pod, json!({"mtu": 1400}));
    lab.run(&lab.call("ADD", &pod, &conf)).assert_success();
    assert!(lab.backup_file().exists());
    lab.s.sb.remove_container(&pod).unwrap();
    assert_silent_success(&lab.run(&lab.call("DEL", &pod, &conf)));
    assert!(!lab.backup_file().exists(), "nothing left to restore to");

    let pod = lab.pod();
    let conf = lab.conf(pod, json!({"mtu": 1400}));
    lab.run(&lab.call("ADD", pod, &conf)).assert_success();
    lab.ip(pod, "link del eth0");
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    assert!(!lab.backup_file().exists());

    std::fs::create_dir_all(&lab.data_dir).unwrap();
    std::fs::write(lab.backup_file(), "garbage").unwrap();
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    assert!(!lab.backup_file().exists());
    // Unknown CNI_ARGS do not fail DEL (it reads none, as host-local's DEL); a known key of
    // the wrong type is refused, as every plugin refuses it (tests/decoding.rs).
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf).args("FOO=bar")));
    let bad = lab.conf(pod, json!({"mtu": "x", "dataDir": 5}));
    assert_cni_error(&lab.run(&lab.call("DEL", pod, &bad)), 7);
}

/// The owner tag rcni writes into backups and temp names: the first 16 hex digits of
/// SHA-512 of the network, `-`, and of `ifname:containerID` (computed here independently).
fn tag(net: &str, cid: &str, ifname: &str) -> String {
    use sha2::{Digest, Sha512};
    let h = |s: &str| -> String {
        Sha512::digest(s.as_bytes())
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    format!("{}-{}", h(net), h(&format!("{ifname}:{cid}")))
}

/// Names in the lab's backup directory, sorted.
fn data_files(lab: &Lab) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&lab.data_dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn del_with_an_unreadable_or_corrupt_backup_fails_and_keeps_the_link_changed() {
    let lab = Lab::new();
    let pod = lab.pod();
    let conf = lab.conf(pod, json!({"mtu": 1400}));
    lab.run(&lab.call("ADD", pod, &conf)).assert_success();
    let good = std::fs::read(lab.backup_file()).unwrap();

    // Corrupt: DEL reports it (Go fails too) and keeps the file for a retry.
    std::fs::write(lab.backup_file(), "{\"mtu\": 15").unwrap();
    let err = assert_cni_error(&lab.run(&lab.call("DEL", pod, &conf)), 5);
    assert!(
        err["msg"].as_str().unwrap().contains("cannot restore eth0"),
        "{err}"
    );
    assert_eq!(link_state(pod, "eth0").mtu, 1400, "nothing restored");
    assert!(lab.backup_file().exists());

    // Unreadable: a directory, then a symlink (never followed) in its place.
    std::fs::remove_file(lab.backup_file()).unwrap();
    std::fs::create_dir(lab.backup_file()).unwrap();
    assert_cni_error(&lab.run(&lab.call("DEL", pod, &conf)), 5);
    std::fs::remove_dir(lab.backup_file()).unwrap();
    let elsewhere = lab.s.sb.dir().join("elsewhere.json");
    std::fs::write(&elsewhere, &good).unwrap();
    std::os::unix::fs::symlink(&elsewhere, lab.backup_file()).unwrap();
    assert_cni_error(&lab.run(&lab.call("DEL", pod, &conf)), 5);
    assert_eq!(link_state(pod, "eth0").mtu, 1400);

    // Repaired, the retried DEL restores and removes it.
    std::fs::remove_file(lab.backup_file()).unwrap();
    std::fs::write(lab.backup_file(), &good).unwrap();
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    assert_eq!(link_state(pod, "eth0"), original());
    assert!(data_files(&lab).is_empty(), "{:?}", data_files(&lab));
}

#[test]
fn del_with_a_path_that_is_not_a_network_namespace_is_del_of_a_gone_one() {
    let lab = Lab::new();
    let pod = lab.pod();
    let conf = lab.conf(pod, json!({"mtu": 1400}));
    let dir = lab.s.sb.dir().join("odd");
    std::fs::create_dir(&dir).unwrap();
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for path in [
        fifo,
        PathBuf::from("/proc/self/ns/mnt"),
        dir.join("x".repeat(300)),
    ] {
        lab.run(&lab.call("ADD", pod, &conf)).assert_success();
        assert!(lab.backup_file().exists());
        let out = lab.run(&lab.call("DEL", pod, &conf).netns(&path));
        assert_silent_success(&out);
        assert!(!lab.backup_file().exists(), "{}", path.display());
        lab.ip(pod, "link set eth0 mtu 1500");
    }
}

#[test]
fn an_unsafe_backup_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    let pod = lab.pod();
    let open = lab.s.sb.dir().join("world-writable");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let real = lab.s.sb.dir().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = lab.s.sb.dir().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for dir in [&open, &link] {
        let mut conf = lab.conf(pod, json!({"mtu": 1400}));
        conf["dataDir"] = json!(dir);
        let err = assert_cni_error(&lab.run(&lab.call("ADD", pod, &conf)), 5);
        assert!(
            err["msg"]
                .as_str()
                .unwrap()
                .contains("unsafe backup directory"),
            "{err}"
        );
        assert_eq!(link_state(pod, "eth0"), original(), "nothing changed");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0);
        // DEL does not trust a backup found there either.
        assert_cni_error(&lab.run(&lab.call("DEL", pod, &conf)), 5);
    }
}

#[test]
fn backups_are_renamed_into_place_and_a_killed_adds_temp_file_is_removed_by_its_del() {
    let lab = Lab::new();
    let pod = lab.pod();
    let conf = lab.conf(pod, json!({"mtu": 1400}));
    lab.run(&lab.call("ADD", pod, &conf)).assert_success();
    // Only the backup: no temp file left, and the old fixed-pattern name was never used.
    assert_eq!(data_files(&lab), ["ctr1_eth0.json"]);
    // What a kill between create and rename leaves: a temp file tagged with the attachment.
    let mine = killed_adds_temp(&tag("tune-net", "ctr1", "eth0"));
    let other = killed_adds_temp(&tag("tune-net", "ctr2", "eth0"));
    for name in [&mine, &other] {
        std::fs::write(lab.data_dir.join(name), "{\"mt").unwrap();
    }
    assert_silent_success(&lab.run(&lab.call("DEL", pod, &conf)));
    assert_eq!(link_state(pod, "eth0"), original());
    assert_eq!(
        data_files(&lab),
        [other],
        "only this attachment's temp file goes"
    );
}

/// The name of a temp file a killed ADD (a pid no process has) left for attachment `tag`.
fn killed_adds_temp(tag: &str) -> String {
    cni_persist::TempName::file_name(u32::MAX >> 1, tag)
}

#[test]
fn gc_removes_a_dead_attachments_tuning_backup() {
    let lab = Lab::new();
    let live = lab.pod().clone();
    let dead = lab.new_pod();
    let conf = |pod: &Netns| lab.conf(pod, json!({"mtu": 1400}));
    lab.run(&lab.call("ADD", &live, &conf(&live)).container_id("live"))
        .assert_success();
    lab.run(&lab.call("ADD", &dead, &conf(&dead)).container_id("dead"))
        .assert_success();
    // The dead pod's sandbox goes without a DEL (a crash, a killed runtime).
    lab.s.sb.remove_container(&dead).unwrap();
    // Another network sharing the directory, a Go-written backup (no owner), and temp files
    // of a killed ADD of a dead attachment of this network and of one of the other network.
    let mut other = conf(&live);
    other["name"] = json!("other-net");
    lab.run(
        &lab.call("ADD", &live, &other)
            .container_id("o1")
            .ifname("eth0"),
    )
    .assert_success();
    std::fs::write(
        lab.data_dir.join("gowrote_eth0.json"),
        "{\n \"mtu\": 1500\n}",
    )
    .unwrap();
    let dead_tmp = killed_adds_temp(&tag("tune-net", "killed", "eth0"));
    let other_tmp = killed_adds_temp(&tag("other-net", "killed", "eth0"));
    for name in [&dead_tmp, &other_tmp] {
        std::fs::write(lab.data_dir.join(name), "").unwrap();
    }
    assert_eq!(data_files(&lab).len(), 6, "{:?}", data_files(&lab));

    let gc = json!({
        "cniVersion": "1.1.0", "name": "tune-net", "type": "tuning", "dataDir": lab.data_dir,
        "cni.dev/valid-attachments": [{"containerID": "live", "ifname": "eth0"}],
    });
    let out = lab.run(
        &PluginCall::new("GC")
            .path(&lab.s.cni_dir)
            .stdin(gc.to_string()),
    );
    assert_silent_success(&out);
    let mut want = vec![
        other_tmp,
        "gowrote_eth0.json".to_string(),
        "live_eth0.json".to_string(),
        "o1_eth0.json".to_string(),
    ];
    want.sort();
    assert_eq!(data_files(&lab), want);
    // The live attachment's backup still restores.
    assert_silent_success(&lab.run(&lab.call("DEL", &live, &conf(&live)).container_id("live")));
    assert_eq!(link_state(&live, "eth0").mtu, 1500);
    assert!(!data_files(&lab).contains(&"live_eth0.json".to_string()));
}

fn go_tuning_or_skip() -> bool {
    let ok = go_plugins_dir().is_some_and(|d| d.join(TUNING).is_file());
    if !ok {
        eprintln!("skipped: Go reference tuning not installed in /usr/lib/cni");
    }
    ok
}

/// A result with the sandbox path replaced, so two pods compare. Known difference: Go's 1.x
/// results always carry `"dns": {}`, rcni leaves an empty DNS section out (both are valid).
fn normalized(result: &Value, pod: &Netns) -> Value {
    let text = result
        .to_string()
        .replace(pod.path.to_str().unwrap(), "<netns>");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    if v["dns"] == json!({}) {
        v.as_object_mut().unwrap().remove("dns");
    }
    v
}

// Interop (tier 3): the same config through Go's tuning and rcni's gives the same result, the
// same kernel state and equivalent backups; DEL of either restores what the other saved.
// Keys Debian's v1.1.1 lacks are left out: `txQLen` (added upstream later), and `IFNAME`
// sysctl keys under CHECK (its CHECK reads the key without substituting IFNAME).
#[test]
fn interop_with_go_tuning() {
    if !go_tuning_or_skip() {
        return;
    }
    let lab = Lab::new();
    let keys = json!({
        "sysctl": {"net.core.somaxconn": "321", "net.ipv4.conf.eth0.arp_ignore": "2"},
        "mac": "02:aa:bb:cc:dd:07", "promisc": true, "mtu": 1450, "allmulti": true,
    });
    let go_pod = lab.new_pod();
    let rcni_pod = lab.pod().clone();
    let go_dir = lab.s.sb.dir().join("go-data");
    let go_conf = |pod: &Netns| {
        let mut c = lab.conf(pod, keys.clone());
        c["dataDir"] = json!(go_dir);
        c
    };

    let go_out = lab.run_go(&lab.call("ADD", &go_pod, &go_conf(&go_pod)));
    go_out.assert_success();
    let rcni_conf = lab.conf(&rcni_pod, keys.clone());
    let rcni_out = lab.run(&lab.call("ADD", &rcni_pod, &rcni_conf));
    rcni_out.assert_success();
    assert_eq!(
        normalized(&rcni_out.json().unwrap(), &rcni_pod),
        normalized(&go_out.json().unwrap(), &go_pod),
        "results"
    );
    assert_eq!(link_state(&rcni_pod, "eth0"), link_state(&go_pod, "eth0"));
    for key in ["net/core/somaxconn", "net/ipv4/conf/eth0/arp_ignore"] {
        assert_eq!(
            lab.sysctl(&rcni_pod, key),
            lab.sysctl(&go_pod, key),
            "{key}"
        );
    }
    // rcni's backup has one key more, its owner tag, which Go ignores.
    let read = |p: &Path| -> Value {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("rcniOwner");
        v
    };
    let go_backup = go_dir.join("ctr1_eth0.json");
    assert_eq!(read(&lab.backup_file()), read(&go_backup), "backups");

    // Both CHECKs agree, in both directions.
    assert_silent_success(&lab.run_go(&lab.call("CHECK", &go_pod, &go_conf(&go_pod))));
    assert_silent_success(&lab.run(&lab.call("CHECK", &go_pod, &go_conf(&go_pod))));
    lab.ip(&go_pod, "link set eth0 mtu 1300");
    assert!(!lab
        .run_go(&lab.call("CHECK", &go_pod, &go_conf(&go_pod)))
        .success());
    assert_cni_error(
        &lab.run(&lab.call("CHECK", &go_pod, &go_conf(&go_pod))),
        999,
    );
    lab.ip(&go_pod, "link set eth0 mtu 1450");

    // Cross DEL: rcni restores Go's backup and Go restores rcni's.
    assert_silent_success(&lab.run(&lab.call("DEL", &go_pod, &go_conf(&go_pod))));
    assert_eq!(link_state(&go_pod, "eth0"), original());
    assert!(!go_backup.exists());
    assert_silent_success(&lab.run_go(&lab.call("DEL", &rcni_pod, &rcni_conf)));
    assert_eq!(link_state(&rcni_pod, "eth0"), original());
    assert!(!lab.backup_file().exists());

    // Both refuse a key outside /proc/sys/net/ (Go with code 999, rcni with 7).
    let bad = lab.conf(&rcni_pod, json!({"sysctl": {"kernel.domainname": "x"}}));
    let go_bad = lab.run_go(&lab.call("ADD", &rcni_pod, &bad));
    assert_eq!(go_bad.error_code(), Some(999), "{go_bad}");
    assert_cni_error(&lab.run(&lab.call("ADD", &rcni_pod, &bad)), 7);
}
