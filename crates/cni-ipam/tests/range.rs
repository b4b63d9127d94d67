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
        &spec("10.0.0.0/24", Some("10.0.0.10"), Some("10.0.0.20"), None),
    )
    .unwrap();
    assert!(range.contains(ip("10.0.0.10")));
    assert!(range.contains(ip("10.0.0.20")));
    assert!(range.contains(ip("::ffff:10.0.0.15")));
    assert!(!range.contains(ip("10.0.0.9")));
    assert!(!range.contains(ip("10.0.0.21")));
    assert!(!range.contains(ip("fd00::10")));
    assert_eq!(range.to_string(), "10.0.0.10-10.0.0.20");
}

#[test]
fn start_can_equal_gateway_and_is_then_skipped() {
    let s = set(&[spec("10.0.0.0/29", None, None, None)]);
    assert_eq!(s.ranges()[0].range_start, ip("10.0.0.1"));
    assert_eq!(
        order(&s, None),
        [
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("10.0.0.4"),
            ip("10.0.0.5"),
            ip("10.0.0.6")
        ]
    );
    assert_eq!(s.capacity(), 5);
}

#[test]
fn order_resumes_after_the_hint_and_ends_with_it() {
    let s = set(&[spec("10.0.0.0/29", None, None, None)]);
    assert_eq!(
        order(&s, Some("10.0.0.4")),
        [
            ip("10.0.0.5"),
            ip("10.0.0.6"),
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("10.0.0.4")
        ]
    );
    // A hint outside the set restarts at the first range's start.
    assert_eq!(order(&s, Some("10.9.9.9"))[0], ip("10.0.0.2"));
}

#[test]
fn order_crosses_ranges_and_wraps() {
    let s = set(&[
        spec("10.0.0.0/24", Some("10.0.0.20"), Some("10.0.0.21"), None),
        spec("10.0.1.0/24", Some("10.0.1.5"), Some("10.0.1.6"), None),
    ]);
    assert_eq!(
        order(&s, Some("10.0.0.21")),
        [
            ip("10.0.1.5"),
            ip("10.0.1.6"),
            ip("10.0.0.20"),
            ip("10.0.0.21")
        ]
    );
    assert_eq!(s.to_string(), "10.0.0.20-10.0.0.21,10.0.1.5-10.0.1.6");
    assert_eq!(s.capacity(), 4);
}

#[test]
fn single_address_that_is_the_gateway_yields_nothing() {
    let s = set(&[spec(
        "10.0.0.0/24",
        Some("10.0.0.1"),
        Some("10.0.0.1"),
        None,
    )]);
    assert!(order(&s, None).is_empty());
    assert!(order(&s, Some("10.0.0.1")).is_empty());
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
        "10.0.0.0/24",
        Some("10.0.0.1"),
        Some("10.0.0.100"),
        None,
    )]);
    let b = set(&[spec(
        "10.0.0.0/24",
        Some("10.0.0.101"),
        Some("10.0.0.200"),
        None,
    )]);
    let c = set(&[spec(
        "10.0.0.0/16",
        Some("10.0.0.50"),
        Some("10.0.0.60"),
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
            spec("10.0.0.0/24", Some("10.0.0.1"), Some("10.0.0.100"), None),
            spec("10.0.0.0/24", Some("10.0.0.101"), Some("10.0.0.200"), None),
        ],
    )
    .unwrap();
}
