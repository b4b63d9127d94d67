//! Real packets between two namespaces joined by a veth (run as root).

use std::net::IpAddr;

use cni_testkit::{http_get, http_server, ping, Netns, Sandbox, HTTP_BODY};

/// host ns `h0` (198.18.99.1, 2001:2:0:99::1) <-veth-> container `c0` (198.18.99.2, 2001:2:0:99::2).
fn connected() -> (Sandbox, Netns) {
    let sb = Sandbox::new().unwrap();
    let c = sb.add_container().unwrap();
    let host = sb.host().name.clone();
    let script = [
        vec![
            "ip", "link", "add", "h0", "type", "veth", "peer", "name", "c0", "netns", &c.name,
        ],
        vec!["ip", "addr", "add", "198.18.99.1/24", "dev", "h0"],
        vec![
            "ip",
            "addr",
            "add",
            "2001:2:0:99::1/64",
            "dev",
            "h0",
            "nodad",
        ],
        vec!["ip", "link", "set", "h0", "up"],
    ];
    for argv in script {
        sb.exec_in(&host, argv).unwrap().assert_success();
    }
    for argv in [
        vec!["ip", "addr", "add", "198.18.99.2/24", "dev", "c0"],
        vec![
            "ip",
            "addr",
            "add",
            "2001:2:0:99::2/64",
            "dev",
            "c0",
            "nodad",
        ],
        vec!["ip", "link", "set", "c0", "up"],
        vec!["ip", "link", "set", "lo", "up"],
    ] {
        sb.exec_in(&c.name, argv).unwrap().assert_success();
    }
    (sb, c)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn ping_over_a_veth() {
    let (sb, c) = connected();
    assert!(ping(&c.name, ip("198.18.99.1")));
    assert!(ping(&sb.host().name, ip("198.18.99.2")));
    assert!(ping(&c.name, ip("2001:2:0:99::1")));
    assert!(ping(&c.name, ip("127.0.0.1")));
    // nobody has this address
    assert!(!ping(&c.name, ip("198.18.99.3")));
    // the container has no route there
    assert!(!ping(&c.name, ip("192.0.2.1")));

    sb.exec_in(&c.name, ["ip", "link", "set", "c0", "down"])
        .unwrap()
        .assert_success();
    assert!(!ping(&c.name, ip("198.18.99.1")));
}

#[test]
fn http_round_trip_and_stop_on_drop() {
    let (sb, c) = connected();
    let server = http_server(&sb.host().name, ip("198.18.99.1"), 0).unwrap();
    assert_eq!(server.local_addr().ip(), ip("198.18.99.1"));
    assert_ne!(server.local_addr().port(), 0);
    let url = server.url();

    assert_eq!(http_get(&c.name, &url).unwrap(), HTTP_BODY);
    // more than one request
    assert_eq!(
        http_get(&c.name, &format!("{url}some/path")).unwrap(),
        HTTP_BODY
    );

    let v6 = http_server(&c.name, ip("2001:2:0:99::2"), 8080).unwrap();
    assert_eq!(
        http_get(&sb.host().name, "http://[2001:2:0:99::2]:8080/").unwrap(),
        HTTP_BODY
    );
    drop(v6);

    drop(server);
    assert!(http_get(&c.name, &url).is_err());
}

#[test]
fn http_server_cannot_bind_a_foreign_address() {
    let (sb, _c) = connected();
    // 198.18.99.2 belongs to the container, not to the host namespace
    assert!(http_server(&sb.host().name, ip("198.18.99.2"), 0).is_err());
}
