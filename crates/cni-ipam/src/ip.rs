//! Address helpers that reproduce Go's `net.IP` semantics where host-local depends on them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Go canonicalises an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) to plain IPv4 before using or
/// printing it; every address that enters this crate goes through here.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Go's `net.ParseIP` followed by canonicalisation. No surrounding whitespace, no zone.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>().ok().map(canonical)
}

/// Go's `ip.ParseIP` (plugins `pkg/ip`): an address with an optional `/prefix`, which is checked but
/// then ignored by host-local.
pub fn parse_ip_with_optional_prefix(text: &str) -> Option<IpAddr> {
    if text.contains('/') {
        text.parse::<IpNet>().ok().map(|net| canonical(net.addr()))
    } else {
        parse_ip(text)
    }
}

/// The address as an unsigned integer, for ordering and arithmetic within one family.
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Rebuilds an address of the same family as `like` from an integer (truncated to the family's width).
fn from_u128_like(like: IpAddr, value: u128) -> IpAddr {
    match like {
        // Truncation is intended: callers only pass values produced from this family.
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((value & u128::from(u32::MAX)) as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// The next address of the same family, wrapping from all-ones to zero like Go's `ip.NextIP`.
pub fn next_ip(ip: IpAddr) -> IpAddr {
    from_u128_like(ip, to_u128(ip).wrapping_add(1))
}

/// True when both addresses are of the same family.
pub fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// The text Go's `net.IP.String()` prints for a canonical address. Rust's formatting of both families
/// matches Go once mapped addresses are converted to IPv4, which `canonical` does.
pub fn go_string(ip: IpAddr) -> String {
    canonical(ip).to_string()
}

/// Host address `ip` with the prefix length of `subnet` (what host-local returns as an IP config).
pub fn with_prefix(ip: IpAddr, subnet: &IpNet) -> IpNet {
    // The prefix comes from a subnet of the same family, so it is always valid for `ip`.
    IpNet::new(ip, subnet.prefix_len()).unwrap_or_else(|_| IpNet::from(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn mapped_addresses_become_ipv4() {
        assert_eq!(canonical(ip("::ffff:198.18.146.3")), ip("198.18.146.3"));
        assert_eq!(go_string(ip("::ffff:198.18.146.3")), "198.18.146.3");
        // IPv4-compatible (deprecated) addresses are not mapped; Go keeps them as IPv6 too.
        assert_eq!(canonical(ip("::198.18.146.3")), ip("::c612:9203"));
    }

    #[test]
    fn go_text_form_of_ipv6() {
        for (input, go) in [
            ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
            ("2001:db8:0:1:0:0:0:1", "2001:db8:0:1::1"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("2001:db8:1:1:1:1:1:0", "2001:db8:1:1:1:1:1:0"),
            ("FD00::ABCD", "fd00::abcd"),
            ("::", "::"),
        ] {
            assert_eq!(go_string(ip(input)), go, "{input}");
        }
    }

    #[test]
    fn next_ip_wraps_and_carries() {
        assert_eq!(next_ip(ip("198.18.128.255")), ip("198.18.129.0"));
        assert_eq!(next_ip(ip("255.255.255.255")), ip("0.0.0.0"));
        assert_eq!(next_ip(ip("fd00::ffff")), ip("fd00::1:0"));
        assert_eq!(
            next_ip(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
            ip("::")
        );
    }

    #[test]
    fn optional_prefix_is_dropped() {
        assert_eq!(
            parse_ip_with_optional_prefix("198.18.128.5/24"),
            Some(ip("198.18.128.5"))
        );
        assert_eq!(
            parse_ip_with_optional_prefix("198.18.128.5"),
            Some(ip("198.18.128.5"))
        );
        assert_eq!(parse_ip_with_optional_prefix("198.18.128.5/33"), None);
        assert_eq!(parse_ip_with_optional_prefix(""), None);
        assert_eq!(parse_ip_with_optional_prefix(" 198.18.128.5"), None);
    }
}
