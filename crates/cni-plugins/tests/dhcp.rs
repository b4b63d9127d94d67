//! Integration tests of the dhcp IPAM plugin and its daemon against a real DHCP server.
//!
//! Each test builds a throwaway "LAN" (the sandbox's host namespace): a bridge `lan0` with
//! 198.18.0.1/24 on which a real `dnsmasq` (Debian `dnsmasq-base`) serves 198.18.0.50–150 with
//! a 2-minute lease, T1 forced to 4 s (so renewals come quickly) and option-121 routes, and a
//! veth `m0` whose peer is a bridge port: the macvlan master. The daemon under test runs with
//! its socket and state dir in the sandbox's scratch dir. dnsmasq and the daemon are killed by
//! PID in guards that also run when a test fails. Needs root.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_testkit::{routes, IpFamily, Netns, PluginCall, PluginOutput, Sandbox};
use common::dhcp_daemon::{spawn_in, DhcpDaemon, Killed};
use common::BIN;
use serde_json::{json, Value};

const NET: &str = "dhcpnet";
const T1_SECS: u64 = 4;

struct Lan {
    // Processes first: they are dropped (killed) before the sandbox removes the namespaces.
    daemon: Option<DhcpDaemon>,
    _dnsmasq: Killed,
    sb: Sandbox,
    cni_dir: PathBuf,
    socket: PathBuf,
    state_dir: PathBuf,
    lease_file: PathBuf,
}

impl Lan {
    fn new() -> Lan {
        Lan::with_t2(100)
    }

    /// A LAN whose server sets T2 (rebinding) to `t2` seconds.
    fn with_t2(t2: u64) -> Lan {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let cni_dir = sb
            .link_plugins(BIN, &["macvlan", "bridge", "dhcp"])
            .expect("plugin links");
        for args in [
            "link add name lan0 type bridge",
            "addr add 198.18.0.1/24 dev lan0",
            "link set lan0 up",
            "link add name m0 type veth peer name m0p",
            "link set m0p master lan0",
            "link set m0p up",
            "link set m0 up",
        ] {
            let mut argv = vec!["ip"];
            argv.extend(args.split(' '));
            sb.exec_host(argv).unwrap().assert_success();
        }
        let dir = sb.dir().to_path_buf();
        let lease_file = dir.join("dnsmasq.leases");
        let dnsmasq = spawn_in(
            &sb.host().name,
            &[
                "dnsmasq",
                "--keep-in-foreground",
                "--no-daemon",
                "--conf-file=/dev/null",
                "--port=0",
                "--interface=lan0",
                "--bind-interfaces",
                "--no-ping",
                "--dhcp-authoritative",
                "--dhcp-range=198.18.0.50,198.18.0.150,255.255.255.0,2m",
                &format!("--dhcp-leasefile={}", lease_file.display()),
                &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
                &format!("--dhcp-option=option:T1,{T1_SECS}"),
                &format!("--dhcp-option=option:T2,{t2}"),
                "--dhcp-option=option:classless-static-route,198.19.0.0/16,198.18.0.1,\
                 198.19.128.0/24,0.0.0.0,0.0.0.0/0,198.18.0.1",
                "--log-dhcp",
                &format!("--log-facility={}", dir.join("dnsmasq.log").display()),
            ],
            &dir.join("dnsmasq.out"),
        );
        let lan = Lan {
            daemon: None,
            _dnsmasq: dnsmasq,
            cni_dir,
            socket: dir.join("dhcp.sock"),
            state_dir: dir.join("dhcp-state"),
            lease_file,
            sb,
        };
        wait_for("dnsmasq to start", Duration::from_secs(10), || {
            fs::read_to_string(lan.sb.dir().join("dnsmasq.out"))
                .is_ok_and(|s| s.contains("DHCP, IP range"))
        });
        lan
    }

    /// Starts the daemon (with a 1 s liveness check) and waits for its socket.
    fn start_daemon(&mut self) {
        let daemon = DhcpDaemon::start(
            &self.sb.host().name,
            self.sb.dir(),
            &["--check-interval", "1"],
        );
        assert_eq!(
            (&daemon.socket, &daemon.state_dir),
            (&self.socket, &self.state_dir)
        );
        self.daemon = Some(daemon);
    }

    /// A LAN with the daemon running and one pod attached as `c1` by `plugin`: the pod, the
    /// config and the ADD result.
    fn with_one_pod(plugin: &str) -> (Lan, Netns, Value, Value) {
        let mut lan = Lan::new();
        lan.start_daemon();
        let pod = lan.pod();
        let conf = lan.conf(plugin);
        let r = lan.add(&pod, "c1", &conf);
        (lan, pod, conf, r)
    }

    /// DEL of `c1`, then waits for dnsmasq to see the DHCPRELEASE.
    fn del_and_wait_release(&self, pod: &Netns, conf: &Value) {
        let del = self.run("DEL", pod, "c1", conf);
        assert!(del.success(), "{}", del.stdout);
        wait_for_with(
            "dnsmasq to free the lease",
            Duration::from_secs(5),
            || self.server_leases().is_empty(),
            || self.logs(),
        );
    }

    fn daemon_pid(&self) -> u32 {
        let daemon = self.daemon.as_ref().expect("a running daemon");
        daemon.pid().as_raw() as u32
    }

    /// Kills the daemon with SIGKILL: nothing of it runs on exit.
    fn kill_daemon(&mut self) {
        self.daemon = None;
    }

    fn pod(&self) -> Netns {
        self.sb.add_container().expect("container namespace")
    }

    fn conf(&self, plugin: &str) -> Value {
        let ipam = json!({
            "type": "dhcp",
            "daemonSocketPath": self.socket,
            "request": [{"option": "121"}],
            "provide": [
                {"option": "host-name", "fromArg": "K8S_POD_NAME"},
                {"option": "vendor-class-identifier", "value": "rcni-test-vendor"},
            ],
            "priority": 50,
        });
        match plugin {
            // The attachment record goes to the sandbox, not the machine's /run/rcni.
            "macvlan" => json!({
                "cniVersion": "1.1.0", "name": NET, "type": "macvlan", "master": "m0",
                "ipam": ipam, "dataDir": self.sb.dir().join("sublink-records"),
            }),
            _ => json!({
                "cniVersion": "1.1.0", "name": NET, "type": "bridge", "bridge": "lan0",
                "ipam": ipam,
            }),
        }
    }

    fn run(&self, command: &str, pod: &Netns, cid: &str, conf: &Value) -> PluginOutput {
        let plugin = conf["type"].as_str().unwrap();
        let call = PluginCall::new(command)
            .container_id(cid)
            .netns(&pod.path)
            .ifname("eth0")
            .args(format!("IgnoreUnknown=1;K8S_POD_NAME=pod-{cid}"))
            .path(&self.cni_dir)
            .stdin(conf.to_string());
        self.sb
            .run_plugin(self.cni_dir.join(plugin), &call)
            .expect("run plugin")
    }

    #[track_caller]
    fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        let out = self.run("ADD", pod, cid, conf);
        assert!(out.success(), "ADD failed: {}\n{}", out.stdout, self.logs());
        common::assert_no_record_in_default_dirs(NET, cid, "eth0");
        out.json().unwrap()
    }

    /// The dhcp plugin itself (STATUS and GC are not chained through macvlan here).
    fn dhcp(&self, command: &str, conf: &Value) -> PluginOutput {
        let mut c = conf["ipam"].clone();
        c["cniVersion"] = json!("1.1.0");
        c["name"] = json!(NET);
        c["type"] = json!("dhcp");
        c["ipam"] = conf["ipam"].clone();
        if let Some(v) = conf.get("cni.dev/valid-attachments") {
            c["cni.dev/valid-attachments"] = v.clone();
        }
        let call = PluginCall::new(command)
            .path(&self.cni_dir)
            .stdin(c.to_string());
        self.sb
            .run_plugin(self.cni_dir.join("dhcp"), &call)
            .expect("run dhcp")
    }

    /// dnsmasq's leases: (expiry, mac, address, hostname).
    fn server_leases(&self) -> Vec<(u64, String, String, String)> {
        fs::read_to_string(&self.lease_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.parse().ok()?,
                    f.get(1)?.to_string(),
                    f.get(2)?.to_string(),
                    f.get(3)?.to_string(),
                ))
            })
            .collect()
    }

    fn server_expiry_of(&self, addr: &str) -> Option<u64> {
        self.server_leases()
            .into_iter()
            .find(|l| l.2 == addr)
            .map(|l| l.0)
    }

    /// The daemon's lease records (temp files of a write in progress, or of a killed daemon,
    /// are not records: see [`Lan::temp_files`]).
    fn state_files(&self) -> Vec<String> {
        self.dir_names()
            .into_iter()
            .filter(|n| !cni_persist::is_temp(n.as_ref()))
            .collect()
    }

    fn temp_files(&self) -> Vec<String> {
        self.dir_names()
            .into_iter()
            .filter(|n| cni_persist::is_temp(n.as_ref()))
            .collect()
    }

    fn dir_names(&self) -> Vec<String> {
        let Ok(rd) = fs::read_dir(&self.state_dir) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect()
    }

    fn daemon_log(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.sb.dir().join(name)).unwrap_or_default();
        read("dhcp-daemon.log") + &read("dhcp-daemon.last.log")
    }

    fn logs(&self) -> String {
        let dnsmasq = fs::read_to_string(self.sb.dir().join("dnsmasq.log")).unwrap_or_default();
        format!(
            "--- daemon log\n{}\n--- dnsmasq log\n{dnsmasq}",
            self.daemon_log()
        )
    }

    /// Waits until dnsmasq's expiry for `addr` moves past `after` (a renewal), returning it.
    #[track_caller]
    fn wait_renewal(&self, addr: &str, after: u64) -> u64 {
        let deadline = Duration::from_secs(T1_SECS * 4 + 5);
        let mut seen = after;
        wait_for_with(
            &format!("a renewal of {addr} (expiry past {after})"),
            deadline,
            || {
                seen = self.server_expiry_of(addr).unwrap_or(0);
                seen > after
            },
            || self.logs(),
        );
        seen
    }
}

#[track_caller]
fn wait_for(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    wait_for_with(what, limit, cond, String::new);
}

#[track_caller]
fn wait_for_with(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn addr_of(result: &Value) -> String {
    let cidr = result["ips"][0]["address"].as_str().unwrap();
    cidr.split('/').next().unwrap().to_string()
}

fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

#[test]
fn lease_is_acquired_with_option_121_routes_and_released_on_del() {
    let (lan, pod, conf, r) = Lan::with_one_pod("macvlan");

    // The result: an address of the range on /24, the router as gateway, and only the
    // option-121 routes, the on-link one with gw 0.0.0.0 and scope link.
    let addr = addr_of(&r);
    let host: u8 = addr.strip_prefix("198.18.0.").unwrap().parse().unwrap();
    assert!((50..=150).contains(&host), "{r}");
    assert_eq!(r["ips"][0]["address"], format!("{addr}/24"));
    assert_eq!(r["ips"][0]["gateway"], "198.18.0.1");
    assert_eq!(
        r["routes"],
        json!([
            {"dst": "198.19.0.0/16", "gw": "198.18.0.1", "priority": 50},
            {"dst": "198.19.128.0/24", "gw": "0.0.0.0", "priority": 50, "scope": 253},
            {"dst": "0.0.0.0/0", "gw": "198.18.0.1", "priority": 50},
        ])
    );

    // The kernel (read with iproute2): the on-link route has link scope and no gateway.
    let rts = routes(&pod.name, IpFamily::V4).unwrap();
    let onlink = rts
        .iter()
        .find(|r| r["dst"] == "198.19.128.0/24")
        .expect("on-link route");
    assert_eq!(onlink["scope"], "link", "{onlink}");
    assert!(onlink.get("gateway").is_none(), "{onlink}");
    assert_eq!(onlink["metric"], 50, "{onlink}");
    assert!(rts
        .iter()
        .any(|r| r["dst"] == "198.19.0.0/16" && r["gateway"] == "198.18.0.1" && r["metric"] == 50));
    // The literal `provide` value reached the server (dnsmasq logs the vendor class).
    let dnsmasq_log = fs::read_to_string(lan.sb.dir().join("dnsmasq.log")).unwrap();
    assert!(dnsmasq_log.contains("rcni-test-vendor"), "{dnsmasq_log}");

    // dnsmasq holds the lease for the pod's MAC, with the host name from CNI_ARGS.
    let mac = r["interfaces"][0]["mac"].as_str().unwrap().to_string();
    let leases = lan.server_leases();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(
        (&leases[0].1, &leases[0].2, &leases[0].3),
        (&mac, &addr, &"pod-c1".to_string())
    );
    assert_eq!(lan.state_files().len(), 1);

    // CHECK passes; a repeated ADD of the attachment answers the same lease.
    let check = lan.run("CHECK", &pod, "c1", &with_prev(&conf, &r));
    assert!(check.success(), "{}", check.stdout);
    let dhcp_only = lan.dhcp("STATUS", &conf);
    assert!(dhcp_only.success(), "{}", dhcp_only.stdout);

    // DEL sends DHCPRELEASE: dnsmasq drops the lease, the daemon forgets it.
    lan.del_and_wait_release(&pod, &conf);
    assert_eq!(lan.state_files(), Vec::<String>::new());
    // DEL is idempotent.
    assert!(lan.run("DEL", &pod, "c1", &conf).success());
}

#[test]
fn lease_is_renewed_and_survives_a_daemon_restart() {
    let (mut lan, pod, conf, r) = Lan::with_one_pod("macvlan");
    let addr = addr_of(&r);
    let first = lan.server_expiry_of(&addr).expect("lease in dnsmasq");

    // A renewal at T1 moves dnsmasq's expiry forward.
    let renewed = lan.wait_renewal(&addr, first);

    // SIGKILL: the daemon has no chance to save anything more; the lease is on disk. A kill
    // mid-save leaves a temp file; one is planted under the killed daemon's pid so that the
    // restart's cleanup is always exercised.
    let killed = lan.daemon_pid();
    lan.kill_daemon();
    let records = lan.state_files();
    assert_eq!(records.len(), 1, "{records:?}");
    let planted = cni_persist::TempName::file_name(killed, &records[0]);
    fs::write(lan.state_dir.join(&planted), b"{\"partial").unwrap();
    lan.start_daemon();
    assert_eq!(
        lan.temp_files(),
        Vec::<String>::new(),
        "left by the killed daemon"
    );
    assert_eq!(lan.state_files(), records);

    // The restarted daemon holds the same lease (CHECK, and ADD answers it unchanged)...
    let check = lan.run("CHECK", &pod, "c1", &with_prev(&conf, &r));
    assert!(check.success(), "{}\n{}", check.stdout, lan.logs());
    let again = lan.dhcp_add_same(&pod, &conf);
    assert_eq!(addr_of(&again), addr);
    // ...and keeps renewing it.
    lan.wait_renewal(&addr, renewed);
    assert!(
        lan.daemon_log().contains("resuming lease"),
        "{}",
        lan.logs()
    );

    lan.del_and_wait_release(&pod, &conf);
}

impl Lan {
    /// ADD of the dhcp plugin alone for an attachment macvlan already made (macvlan itself
    /// would refuse a second eth0).
    fn dhcp_add_same(&self, pod: &Netns, conf: &Value) -> Value {
        let mut c = conf.clone();
        c["type"] = json!("dhcp");
        self.add(pod, "c1", &c)
    }
}

#[test]
fn without_the_daemon_add_fails_clearly_and_status_is_50() {
    let mut lan = Lan::new();
    let pod = lan.pod();
    let conf = lan.conf("macvlan");

    let out = lan.run("ADD", &pod, "c1", &conf);
    assert_eq!(out.error_code(), Some(11), "{}", out.stdout);
    let msg = out.json().unwrap()["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("not reachable"), "{msg}");
    assert!(msg.contains(lan.socket.to_str().unwrap()), "{msg}");
    // The failed ADD left nothing in the pod.
    let links = cni_testkit::links(&pod.name).unwrap();
    assert!(links.iter().all(|l| l["ifname"] == "lo"), "{links:?}");

    let status = lan.dhcp("STATUS", &conf);
    assert_eq!(status.error_code(), Some(50), "{}", status.stdout);

    lan.start_daemon();
    let status = lan.dhcp("STATUS", &conf);
    assert!(status.success(), "{}", status.stdout);
    lan.add(&pod, "c1", &conf);
    assert!(lan.run("DEL", &pod, "c1", &conf).success());
}

#[test]
fn maintenance_stops_when_the_interface_or_the_container_goes_away() {
    let mut lan = Lan::new();
    lan.start_daemon();
    let conf = lan.conf("macvlan");
    let (p1, p2) = (lan.pod(), lan.pod());
    lan.add(&p1, "link-gone", &conf);
    lan.add(&p2, "netns-gone", &conf);
    assert_eq!(lan.state_files().len(), 2);

    let out = lan
        .sb
        .exec_in(&p1.name, ["ip", "link", "del", "eth0"])
        .unwrap();
    assert!(out.success(), "{}", out.stderr);
    lan.sb.remove_container(&p2).unwrap();
    wait_for_with(
        "the daemon to drop both leases",
        Duration::from_secs(10),
        || lan.state_files().is_empty(),
        || lan.logs(),
    );
    let log = lan.daemon_log();
    assert!(
        log.contains("link-gone/dhcpnet/eth0: maintenance stops: interface"),
        "{log}"
    );
    assert!(
        log.contains("netns-gone/dhcpnet/eth0: maintenance stops: network namespace"),
        "{log}"
    );
}

#[test]
fn gc_releases_the_leases_of_attachments_not_in_the_valid_list() {
    let mut lan = Lan::new();
    lan.start_daemon();
    let conf = lan.conf("macvlan");
    let (p1, p2) = (lan.pod(), lan.pod());
    let a1 = addr_of(&lan.add(&p1, "keep", &conf));
    let a2 = addr_of(&lan.add(&p2, "drop", &conf));
    assert_ne!(a1, a2);
    assert_eq!(lan.server_leases().len(), 2);

    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "eth0"}]);
    let out = lan.dhcp("GC", &gc);
    assert!(out.success(), "{}", out.stdout);
    wait_for_with(
        "dnsmasq to free the collected lease",
        Duration::from_secs(5),
        || lan.server_leases().iter().all(|l| l.2 != a2),
        || lan.logs(),
    );
    assert!(lan.server_leases().iter().any(|l| l.2 == a1));
    assert_eq!(lan.state_files().len(), 1);
    assert!(lan.run("DEL", &p1, "keep", &conf).success());
    assert!(lan.run("DEL", &p2, "drop", &conf).success());
}

#[test]
fn bridge_attachment_gets_a_lease_and_del_forgets_it() {
    let (lan, pod, conf, r) = Lan::with_one_pod("bridge");
    let addr = addr_of(&r);
    assert!(lan.server_expiry_of(&addr).is_some(), "{r}");
    // The bridge plugin removes the container link before IPAM DEL (as Go does), so no
    // DHCPRELEASE can leave the container: the daemon forgets the lease, the server keeps
    // it until it expires.
    assert!(lan.run("DEL", &pod, "c1", &conf).success());
    assert_eq!(lan.state_files(), Vec::<String>::new());
}

#[test]
fn daemon_runs_under_the_plugin_name_once_and_removes_its_socket_on_sigterm() {
    let mut lan = Lan::new();
    lan.start_daemon();
    // `dhcp daemon` under the plugin's own name (Go's `/opt/cni/bin/dhcp daemon`), on the same
    // socket: refused, the running daemon keeps it.
    let dhcp = lan.cni_dir.join("dhcp");
    let second = lan
        .sb
        .exec_host([
            dhcp.to_str().unwrap(),
            "daemon",
            "--socket",
            lan.socket.to_str().unwrap(),
            "--state-dir",
            lan.state_dir.to_str().unwrap(),
        ])
        .unwrap();
    assert_eq!(second.status, 1, "{}", second.stderr);
    assert!(
        second.stderr.contains("already listening"),
        "{}",
        second.stderr
    );
    assert!(lan.dhcp("STATUS", &lan.conf("macvlan")).success());

    // SIGTERM: the socket goes, so STATUS answers 50 instead of hanging on a stale file.
    let pid = lan.daemon.as_ref().unwrap().pid();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_for("the socket to be removed", Duration::from_secs(5), || {
        !lan.socket.exists()
    });
    let status = lan.dhcp("STATUS", &lan.conf("macvlan"));
    assert_eq!(status.error_code(), Some(50), "{}", status.stdout);
}

#[test]
fn rebinding_broadcasts_after_t2_when_the_granting_server_is_silent() {
    // T1 4 s, T2 8 s: renewals (unicast to 198.18.0.1) are dropped in the pod, so the lease
    // is rebound by broadcast after T2, which the server answers.
    let mut lan = Lan::with_t2(8);
    lan.start_daemon();
    let pod = lan.pod();
    let conf = lan.conf("macvlan");
    let addr = addr_of(&lan.add(&pod, "c1", &conf));
    let first = lan.server_expiry_of(&addr).unwrap();
    let nft = "add table ip rcnitest\n\
               add chain ip rcnitest out { type filter hook output priority 0; }\n\
               add rule ip rcnitest out ip daddr 198.18.0.1 udp dport 67 drop\n";
    let mut f = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut f, nft.as_bytes()).unwrap();
    let out = lan
        .sb
        .exec_in(&pod.name, ["nft", "-f", f.path().to_str().unwrap()])
        .unwrap();
    assert!(out.success(), "{}", out.stderr);

    wait_for_with(
        "the lease to be rebound",
        Duration::from_secs(30),
        || lan.daemon_log().contains("rebound"),
        || lan.logs(),
    );
    assert!(lan.server_expiry_of(&addr).unwrap() > first);
    // The renewal attempt failed first (the nft drop answers the unicast send with EPERM).
    assert!(lan.daemon_log().contains("WARN"), "{}", lan.logs());
    assert!(lan.run("DEL", &pod, "c1", &conf).success());
}

// Whatever answers on the daemon's socket is not trusted: a lease whose prefix length is
// longer than 32 is a clear error (the daemon answered badly, code 5), not a panic (999).
#[test]
fn a_lease_with_a_prefix_longer_than_32_is_a_clear_error() {
    let setup = common::Setup::new(&["dhcp"]);
    let socket = setup.sb.dir().join("fake-daemon.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let fake_daemon = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        stream.read_to_end(&mut request).unwrap();
        let lease = json!({
            "address": "198.18.0.77", "prefixLen": 40, "server": "198.18.0.1",
            "routers": ["198.18.0.1"], "staticRoutes": [], "classlessRoutes": [],
            "boundAt": 0, "leaseSecs": 120, "t1Secs": 60, "t2Secs": 105,
        });
        let answer = json!({"ok": {"lease": lease}});
        stream.write_all(answer.to_string().as_bytes()).unwrap();
        String::from_utf8(request).unwrap()
    });
    let ipam = json!({"type": "dhcp", "daemonSocketPath": socket});
    let conf = json!({"cniVersion": "1.1.0", "name": NET, "type": "dhcp", "ipam": ipam});

    let out = setup.run("dhcp", &setup.call("ADD", &conf.to_string()));
    let request = fake_daemon.join().unwrap();
    assert!(request.contains(r#""op":"allocate""#), "{request}");
    assert_eq!(out.error_code(), Some(5), "{}", out.stdout);
    let msg = out.json().unwrap()["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("answered badly"), "{msg}");
    assert!(msg.contains("prefix length 40, longer than 32"), "{msg}");
}
