//! Range canonicalisation, membership, overlap, capacity and the candidate order, through the
//! public API.

use std::net::IpAddr;

use cni_ipam::{Range, RangeSet, RangeSpec};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn spec(subnet: &str, start: Option<&str>, end: Option<&str>, gateway: Option<&str>) -> RangeSpec {
    RangeSpec {
        subnet: Some(subnet.parse().unwrap()),
        range_start: start.map(ip),
        range_end: end.map(ip),
        gateway: gateway.map(ip),
    }
}

fn set(specs: &[RangeSpec]) -> RangeSet {
    RangeSet::canonicalize(0, specs).unwrap()
}

fn order(set: &RangeSet, last: Option<&str>) -> Vec<IpAddr> {
    set.candidates(last.map(ip)).map(|(addr, _)| addr).collect()
}

#[test]
fn membership_is_by_allocation_bounds() {
    let range = Range::canonicalize(
        0,
        &spec(
            "198.18.128.0/24",
            Some("198.18.128.10"),
            Some("198.18.128.20"),
            None,
        ),
    )
    .unwrap();
    assert!(range.contains(ip("198.18.128.10")));
    assert!(range.contains(ip("198.18.128.20")));
    assert!(range.contains(ip("::ffff:198.18.128.15")));
    assert!(!range.contains(ip("198.18.128.9")));
    assert!(!range.contains(ip("198.18.128.21")));
    assert!(!range.contains(ip("fd00::10")));
    assert_eq!(range.to_string(), "198.18.128.10-198.18.128.20");
}

#[test]
fn start_can_equal_gateway_and_is_then_skipped() {
    let s = set(&[spec("198.18.128.0/29", None, None, None)]);
    assert_eq!(s.ranges()[0].range_start, ip("198.18.128.1"));
    assert_eq!(
        order(&s, None),
        [
            ip("198.18.128.2"),
            ip("198.18.128.3"),
            ip("198.18.128.4"),
            ip("198.18.128.5"),
            ip("198.18.128.6")
        ]
    );
    assert_eq!(s.capacity(), 5);
}

#[test]
fn order_resumes_after_the_hint_and_ends_with_it() {
    let s = set(&[spec("198.18.128.0/29", None, None, None)]);
    assert_eq!(
        order(&s, Some("198.18.128.4")),
        [
            ip("198.18.128.5"),
            ip("198.18.128.6"),
            ip("198.18.128.2"),
            ip("198.18.128.3"),
            ip("198.18.128.4")
        ]
    );
    // A hint outside the set restarts at the first range's start.
    assert_eq!(order(&s, Some("198.19.25.9"))[0], ip("198.18.128.2"));
}

#[test]
fn order_crosses_ranges_and_wraps() {
    let s = set(&[
        spec(
            "198.18.128.0/24",
            Some("198.18.128.20"),
            Some("198.18.128.21"),
            None,
        ),
        spec(
            "198.18.129.0/24",
            Some("198.18.129.5"),
            Some("198.18.129.6"),
            None,
        ),
    ]);
    assert_eq!(
        order(&s, Some("198.18.128.21")),
        [
            ip("198.18.129.5"),
            ip("198.18.129.6"),
            ip("198.18.128.20"),
            ip("198.18.128.21")
        ]
    );
    assert_eq!(
        s.to_string(),
        "198.18.128.20-198.18.128.21,198.18.129.5-198.18.129.6"
    );
    assert_eq!(s.capacity(), 4);
}

#[test]
fn single_address_that_is_the_gateway_yields_nothing() {
    let s = set(&[spec(
        "198.18.128.0/24",
        Some("198.18.128.1"),
        Some("198.18.128.1"),
        None,
    )]);
    assert!(order(&s, None).is_empty());
    assert!(order(&s, Some("198.18.128.1")).is_empty());
    assert_eq!(s.capacity(), 0);
}

#[test]
fn ipv6_all_ones_is_allocatable() {
    let s = set(&[spec("fd00::/126", None, None, None)]);
    assert_eq!(order(&s, None), [ip("fd00::2"), ip("fd00::3")]);
    let top = set(&[spec(
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126",
        None,
        None,
        None,
    )]);
    assert_eq!(
        order(&top, Some("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
        [
            ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"),
            ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
        ]
    );
}

#[test]
fn huge_ranges_do_not_overflow() {
    let s = set(&[spec("::/0", None, None, Some("::1"))]);
    assert_eq!(s.capacity(), u128::MAX - 1);
    let first: Vec<IpAddr> = s.candidates(None).take(2).map(|(addr, _)| addr).collect();
    assert_eq!(first, [ip("::2"), ip("::3")]);
    let v4 = set(&[spec("0.0.0.0/0", None, None, None)]);
    assert_eq!(v4.capacity(), (1u128 << 32) - 3);
}

#[test]
fn overlap_is_on_bounds_not_subnets() {
    let a = set(&[spec(
        "198.18.128.0/24",
        Some("198.18.128.1"),
        Some("198.18.128.100"),
        None,
    )]);
    let b = set(&[spec(
        "198.18.128.0/24",
        Some("198.18.128.101"),
        Some("198.18.128.200"),
        None,
    )]);
    let c = set(&[spec(
        "198.18.128.0/20",
        Some("198.18.128.50"),
        Some("198.18.128.60"),
        None,
    )]);
    let v6 = set(&[spec("fd00::/64", None, None, None)]);
    assert!(!a.overlaps(&b));
    assert!(a.overlaps(&c));
    assert!(!a.overlaps(&v6));
    // Disjoint bounds in one subnet are fine within a set too.
    RangeSet::canonicalize(
        0,
        &[
            spec(
                "198.18.128.0/24",
                Some("198.18.128.1"),
                Some("198.18.128.100"),
                None,
            ),
            spec(
                "198.18.128.0/24",
                Some("198.18.128.101"),
                Some("198.18.128.200"),
                None,
            ),
        ],
    )
    .unwrap();
}
