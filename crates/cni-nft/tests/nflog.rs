//! Kernel test: a `log group` rule built over netlink sends packets to a reader of the group,
//! which gets each one with its prefix, headers and sequence number; a named limit holds the
//! records back while named counters count what it let through and what it did not; the
//! group has one reader, and dropping the reader releases it (checked in the namespace's
//! `/proc/net/netfilter/nfnetlink_log`, the kernel's own list of bound groups).
//!
//! ```text
//!  ns: lo with 198.18.77.1/32 and 2001:db8:77::1/128
//!  output: udp dport 9999 ct state new counter name seen limit name lim
//!          counter name logged log group 4242 prefix "rcni:test"
//! ```

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use cni_nft::nflog::{NflogGroup, NflogOptions, Transport};
use cni_nft::{ct_state, Batch, Chain, ChainType, Family, Hook, L4Proto, Limit, Rule};
use common::TestNs;

const GROUP: u16 = 4242;
const T: &str = "flowlog";

fn program(ns: &TestNs, limit: Limit) {
    let f = Family::Inet;
    let mut b = Batch::new();
    b.add_table(f, T).unwrap();
    b.add_counter(f, T, "seen").unwrap();
    b.add_counter(f, T, "logged").unwrap();
    b.add_limit(f, T, "lim", limit).unwrap();
    b.add_chain(&Chain::base(
        f,
        T,
        "out",
        ChainType::Filter,
        Hook::Output,
        0,
    ))
    .unwrap();
    b.add_rule(
        &Rule::builder(f, T, "out")
            .dport(L4Proto::Udp, 9999)
            .ct_state(ct_state::NEW)
            .counter_named("seen")
            .limit_named("lim")
            .counter_named("logged")
            .log_group(GROUP, "rcni:test", 96)
            .build()
            .unwrap(),
    );
    ns.nft().commit(&b).unwrap();
}

fn setup() -> Option<TestNs> {
    let ns = TestNs::new()?;
    ns.ip(&["addr", "add", "198.18.77.1/32", "dev", "lo"]);
    ns.ip(&["addr", "add", "2001:db8:77::1/128", "dev", "lo"]);
    Some(ns)
}

/// Sends one datagram from a fresh socket (a new source port: a new connection).
fn send(ns: &TestNs, from: &str, to: &str, count: usize) {
    ns.run(|| {
        for _ in 0..count {
            let s = UdpSocket::bind(from).unwrap();
            s.send_to(b"x", to).unwrap();
        }
    });
}

/// The groups bound in the namespace, from the kernel's own list.
fn bound_groups(ns: &TestNs) -> Vec<u16> {
    ns.exec_ok(&["cat", "/proc/net/netfilter/nfnetlink_log"])
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Receives until `want` records came or 5 s passed.
fn receive(g: &mut NflogGroup, want: usize) -> (Vec<cni_nft::nflog::LogRecord>, u64) {
    let (mut records, mut lost) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while records.len() < want && Instant::now() < deadline {
        let got = g.receive(Duration::from_millis(200)).unwrap();
        lost += got.lost;
        records.extend(got.records);
    }
    (records, lost)
}

#[test]
fn logged_packets_reach_the_reader_with_prefix_headers_and_sequence() {
    let Some(ns) = setup() else { return };
    program(&ns, Limit::per_second(1000, 1000));
    let mut group = ns.run(|| NflogGroup::bind(GROUP, &NflogOptions::default()).unwrap());
    assert_eq!(bound_groups(&ns), [GROUP]);
    send(&ns, "198.18.77.1:0", "198.18.77.1:9999", 3);
    send(&ns, "[2001:db8:77::1]:0", "[2001:db8:77::1]:9999", 1);
    let (records, lost) = receive(&mut group, 4);
    assert_eq!(records.len(), 4, "{records:#?}");
    assert_eq!(lost, 0);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.prefix, "rcni:test");
        assert_eq!(r.group, GROUP);
        assert_eq!(r.hook, Some(3), "NF_INET_LOCAL_OUT");
        let h = r.headers().expect("IP and UDP headers copied");
        assert_eq!(h.protocol, 17);
        assert!(matches!(h.transport, Transport::Udp { dst_port: 9999, .. }));
        if i < 3 {
            assert_eq!((r.family, h.dst.to_string()), (2, "198.18.77.1".into()));
        } else {
            assert_eq!((r.family, h.dst.to_string()), (10, "2001:db8:77::1".into()));
        }
        assert!(r.payload.len() <= 96, "the rule's snap length");
    }
    let seqs: Vec<u32> = records.iter().filter_map(|r| r.seq).collect();
    assert_eq!(seqs.len(), 4);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // The group has one reader.
    let second = ns.run(|| NflogGroup::bind(GROUP, &NflogOptions::default()));
    assert_eq!(second.unwrap_err().errno(), Some(libc::EPERM));
    drop(group);
    assert_eq!(bound_groups(&ns), Vec::<u16>::new());
    // Released: another reader takes it.
    let again = ns.run(|| NflogGroup::bind(GROUP, &NflogOptions::default()));
    assert!(again.is_ok());
}

#[test]
fn a_named_limit_holds_records_back_and_the_counters_say_how_many() {
    let Some(ns) = setup() else { return };
    program(&ns, Limit::per_second(1, 3));
    let mut group = ns.run(|| NflogGroup::bind(GROUP, &NflogOptions::default()).unwrap());
    send(&ns, "198.18.77.1:0", "198.18.77.1:9999", 40);
    let mut nft = ns.nft();
    let seen = nft.counter(Family::Inet, T, "seen").unwrap().unwrap();
    let logged = nft.counter(Family::Inet, T, "logged").unwrap().unwrap();
    assert_eq!(seen.packets, 40);
    assert!((3..=5).contains(&logged.packets), "{logged:?}");
    let (records, lost) = receive(&mut group, logged.packets as usize);
    assert_eq!((records.len() as u64, lost), (logged.packets, 0));
    // Nothing more comes: the limit held the rest back in the kernel.
    assert!(group
        .receive(Duration::from_millis(300))
        .unwrap()
        .records
        .is_empty());
    // nft reads the same counters.
    let listed = ns.exec_ok(&["nft", "list", "counter", "inet", T, "seen"]);
    assert!(listed.contains("packets 40 "), "{listed}");
    assert_eq!(nft.counter(Family::Inet, T, "none").unwrap(), None);
    assert_eq!(nft.counter(Family::Inet, "no-table", "seen").unwrap(), None);
}

/// Set in the child process of [`a_killed_readers_group_is_released_with_its_socket`].
const CHILD: &str = "RCNI_NFLOG_TEST_CHILD";

#[test]
fn a_killed_readers_group_is_released_with_its_socket() {
    let Some(ns) = setup() else { return };
    // This test binary again, in the namespace, as a reader that never unbinds.
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_binds_and_waits", "--nocapture"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while bound_groups(&ns) != [GROUP] && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(bound_groups(&ns), [GROUP], "the child bound the group");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(bound_groups(&ns), Vec::<u16>::new());
    assert!(ns
        .run(|| NflogGroup::bind(GROUP, &NflogOptions::default()))
        .is_ok());
}

/// The child of [`a_killed_readers_group_is_released_with_its_socket`]; nothing without it.
#[test]
fn child_binds_and_waits() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let _group = NflogGroup::bind(GROUP, &NflogOptions::default()).unwrap();
    std::thread::sleep(Duration::from_secs(30));
}
