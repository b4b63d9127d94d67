//! A bound lease: what the server's DHCPACK granted, its RFC 2131 timers, and the CNI result
//! it answers with (as Go's dhcp plugin builds it).

use std::net::{IpAddr, Ipv4Addr};

use super::message::{code, Message};
use cni_types::{CniResult, IpConfig, Route, SpecVersion};
use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Serialize};

use super::conf::LeaseParams;

/// The lease time assumed when the server sends none (as Go).
const DEFAULT_LEASE_SECS: u32 = 3600;

/// Route scope `link` (RT_SCOPE_LINK) for option-121 routes without a router, as Go v1.8.
const SCOPE_LINK: u32 = 253;

/// Why a DHCPACK cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AckError {
    #[error("DHCP option Subnet Mask not found in DHCPACK")]
    NoMask,
    #[error("DHCPACK subnet mask {0} is not a contiguous prefix")]
    BadMask(Ipv4Addr),
    #[error("DHCPACK carries no address (yiaddr 0.0.0.0)")]
    NoAddress,
}

/// A lease that cannot be answered with: its prefix length is longer than an IPv4 address
/// (a daemon, or anything else on its socket, answering garbage).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("lease {address} has prefix length {prefix_len}, longer than 32")]
pub struct BadPrefix {
    pub address: Ipv4Addr,
    pub prefix_len: u8,
}

/// The granted lease, persisted as is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub address: Ipv4Addr,
    pub prefix_len: u8,
    /// The server identifier (option 54), where renewals go.
    pub server: Ipv4Addr,
    /// Option 3.
    pub routers: Vec<Ipv4Addr>,
    /// Option 33: classful destination and router.
    pub static_routes: Vec<(Ipv4Addr, Ipv4Addr)>,
    /// Option 121: destination and router (0.0.0.0 for on-link).
    pub classless_routes: Vec<(Ipv4Net, Ipv4Addr)>,
    /// When the ACK arrived, seconds since the Unix epoch (wall clock, so it survives a
    /// daemon restart).
    pub bound_at: u64,
    pub lease_secs: u32,
    /// Renewal (T1) and rebinding (T2) times after `bound_at`.
    pub t1_secs: u32,
    pub t2_secs: u32,
}

/// Where a lease stands at some instant (RFC 2131 §4.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before T1: nothing to do until `renew_at`.
    Bound,
    /// Between T1 and T2: ask the server that granted it (unicast).
    Renewing,
    /// Between T2 and the end: ask any server (broadcast).
    Rebinding,
    /// Past the lease time.
    Expired,
}

impl Lease {
    /// The lease a DHCPACK grants, bound at `now` (Unix seconds); `server` is the address
    /// the ACK's server identifier names, or the one it came from.
    pub fn from_ack(ack: &Message, now: u64, fallback_server: Ipv4Addr) -> Result<Lease, AckError> {
        let address = ack.yiaddr;
        if address.is_unspecified() {
            return Err(AckError::NoAddress);
        }
        let mask = ack.ipv4(code::SUBNET_MASK).ok_or(AckError::NoMask)?;
        let prefix_len = ipnet::ipv4_mask_to_prefix(mask).map_err(|_| AckError::BadMask(mask))?;
        let server = ack.ipv4(code::SERVER_ID).unwrap_or(fallback_server);
        let routers = ack.ipv4s(code::ROUTER).unwrap_or_default();
        let static_routes = ack.static_routes().unwrap_or_default();
        let classless_routes = ack.classless_routes().unwrap_or_default();
        let lease_secs = ack.u32(code::LEASE_TIME).unwrap_or(DEFAULT_LEASE_SECS);
        let t1 = ack.u32(code::RENEWAL_TIME);
        let t2 = ack.u32(code::REBINDING_TIME);
        let (t1_secs, t2_secs) = timers(lease_secs, t1, t2);
        Ok(Lease {
            address,
            prefix_len,
            server,
            routers,
            static_routes,
            classless_routes,
            bound_at: now,
            lease_secs,
            t1_secs,
            t2_secs,
        })
    }

    pub fn renew_at(&self) -> u64 {
        self.bound_at + u64::from(self.t1_secs)
    }

    pub fn rebind_at(&self) -> u64 {
        self.bound_at + u64::from(self.t2_secs)
    }

    pub fn expires_at(&self) -> u64 {
        self.bound_at + u64::from(self.lease_secs)
    }

    pub fn phase(&self, now: u64) -> Phase {
        if now >= self.expires_at() {
            Phase::Expired
        } else if now >= self.rebind_at() {
            Phase::Rebinding
        } else if now >= self.renew_at() {
            Phase::Renewing
        } else {
            Phase::Bound
        }
    }

    /// The first router, the result's gateway.
    pub fn gateway(&self) -> Option<Ipv4Addr> {
        self.routers.first().copied()
    }

    /// The IPAM result: one address with the first router as gateway; option-121 routes when
    /// there are any (RFC 3442: then options 3 and 33 are ignored for routing), else the
    /// option-33 routes and a default route via the first router. Every route gets the
    /// configured `priority`; `suppress: ["gateway"]` drops the gateway and default routes.
    /// A lease read from elsewhere than a DHCPACK may hold any prefix length: one over 32 is
    /// an error, not a result.
    pub fn to_result(
        &self,
        params: &LeaseParams,
        version: SpecVersion,
    ) -> Result<CniResult, BadPrefix> {
        let mut result = CniResult::new(version);
        let gateway = self.gateway().filter(|_| !params.suppress_gateway);
        let address = Ipv4Net::new(self.address, self.prefix_len).map_err(|_| BadPrefix {
            address: self.address,
            prefix_len: self.prefix_len,
        })?;
        result.ips = vec![IpConfig {
            interface: None,
            address: IpNet::V4(address),
            gateway: gateway.map(IpAddr::V4),
        }];
        let mut routes: Vec<Route> = if !self.classless_routes.is_empty() {
            self.classless_routes
                .iter()
                .map(|(dst, gw)| {
                    // On-link (router 0.0.0.0): Go v1.8 keeps gw 0.0.0.0 and adds scope link,
                    // so no consumer substitutes the default gateway.
                    let mut r = Route::new(IpNet::V4(*dst), Some(IpAddr::V4(*gw)));
                    if gw.is_unspecified() {
                        r.scope = Some(SCOPE_LINK);
                    }
                    r
                })
                .collect()
        } else {
            let mut v: Vec<Route> = self
                .static_routes
                .iter()
                .filter_map(|(dst, gw)| Some(Route::new(classful(*dst)?, Some(IpAddr::V4(*gw)))))
                .collect();
            if let Some(gw) = self.gateway() {
                v.push(Route::new(
                    "0.0.0.0/0".parse().expect("literal"),
                    Some(IpAddr::V4(gw)),
                ));
            }
            v
        };
        if params.suppress_gateway {
            routes.retain(|r| r.dst.prefix_len() != 0);
        }
        for r in &mut routes {
            r.priority = params.priority;
        }
        result.routes = routes;
        Ok(result)
    }
}

/// T1 and T2 after the start of a lease of `lease` seconds: the server's values when they are
/// consistent (T1 <= T2 <= lease), else RFC 2131's 0.5 and 0.875 of the lease.
pub fn timers(lease: u32, t1: Option<u32>, t2: Option<u32>) -> (u32, u32) {
    let frac = |num: u64, den: u64| u32::try_from(u64::from(lease) * num / den).unwrap_or(lease);
    let t2 = t2.filter(|t| *t <= lease).unwrap_or_else(|| frac(7, 8));
    let t1 = t1
        .filter(|t| *t <= t2)
        .unwrap_or_else(|| frac(1, 2).min(t2));
    (t1, t2)
}

/// The destination of an option-33 route: its classful network. Class D and E destinations
/// have none and are skipped.
fn classful(dst: Ipv4Addr) -> Option<IpNet> {
    let prefix = match dst.octets()[0] {
        0..=127 => 8,
        128..=191 => 16,
        192..=223 => 24,
        _ => {
            log::warn!("dhcp: option 33 route to {dst} has no classful network; skipped");
            return None;
        }
    };
    Some(IpNet::V4(Ipv4Net::new(dst, prefix).ok()?.trunc()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::message::{classless_routes_value, MessageType, BOOT_REPLY};

    fn ack(opts: Vec<(u8, Vec<u8>)>) -> Message {
        let mut m = Message::new(BOOT_REPLY, 1, [2, 0, 0, 0, 0, 9]);
        m.yiaddr = Ipv4Addr::new(198, 18, 0, 77);
        m.set_type(MessageType::Ack);
        for (code, value) in opts {
            m.set(code, value);
        }
        m
    }

    fn secs(n: u32) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }

    fn base() -> Vec<(u8, Vec<u8>)> {
        vec![
            (code::SUBNET_MASK, vec![255, 255, 255, 0]),
            (code::SERVER_ID, vec![198, 18, 0, 1]),
            (code::ROUTER, vec![198, 18, 0, 1]),
            (code::LEASE_TIME, secs(120)),
        ]
    }

    #[test]
    fn timers_follow_rfc_2131_defaults_and_accept_consistent_server_values() {
        assert_eq!(timers(120, None, None), (60, 105));
        assert_eq!(timers(120, Some(10), Some(100)), (10, 100));
        // T2 beyond the lease, T1 beyond T2: the defaults.
        assert_eq!(timers(120, Some(10), Some(500)), (10, 105));
        assert_eq!(timers(120, Some(110), Some(100)), (60, 100));
        assert_eq!(timers(u32::MAX, None, None).1, 3_758_096_383);
    }

    #[test]
    fn phases_move_with_the_clock() {
        let mut opts = base();
        opts.push((code::RENEWAL_TIME, secs(10)));
        opts.push((code::REBINDING_TIME, secs(100)));
        let l = Lease::from_ack(&ack(opts), 1000, Ipv4Addr::UNSPECIFIED).unwrap();
        assert_eq!(l.phase(1000), Phase::Bound);
        assert_eq!(l.phase(1009), Phase::Bound);
        assert_eq!(l.phase(1010), Phase::Renewing);
        assert_eq!(l.phase(1100), Phase::Rebinding);
        assert_eq!(l.phase(1120), Phase::Expired);
    }

    #[test]
    fn ack_without_mask_or_address_is_refused() {
        let e = Lease::from_ack(&ack(vec![]), 0, Ipv4Addr::UNSPECIFIED).unwrap_err();
        assert_eq!(e, AckError::NoMask);
        let mut m = ack(base());
        m.yiaddr = Ipv4Addr::UNSPECIFIED;
        assert_eq!(
            Lease::from_ack(&m, 0, Ipv4Addr::UNSPECIFIED).unwrap_err(),
            AckError::NoAddress
        );
    }

    #[test]
    fn result_without_option_121_has_static_and_default_routes() {
        let mut opts = base();
        // A class A destination (its network is the /8): no address of the test range
        // 198.18.0.0/15 is one.
        opts.push((code::STATIC_ROUTES, vec![10, 1, 2, 3, 198, 18, 0, 2]));
        let l = Lease::from_ack(&ack(opts), 0, Ipv4Addr::UNSPECIFIED).unwrap();
        let params = LeaseParams {
            priority: 5,
            ..LeaseParams::default()
        };
        let r = l.to_result(&params, SpecVersion::V1_0_0).unwrap();
        assert_eq!(r.ips[0].address.to_string(), "198.18.0.77/24");
        assert_eq!(r.ips[0].gateway.unwrap().to_string(), "198.18.0.1");
        let routes: Vec<String> = r
            .routes
            .iter()
            .map(|r| format!("{} {:?} {}", r.dst, r.gw, r.priority))
            .collect();
        assert_eq!(
            routes,
            [
                "10.0.0.0/8 Some(198.18.0.2) 5",
                "0.0.0.0/0 Some(198.18.0.1) 5"
            ]
        );
    }

    #[test]
    fn option_121_replaces_other_routes_and_on_link_routes_get_link_scope() {
        let mut opts = base();
        opts.push((
            code::CLASSLESS_ROUTES,
            classless_routes_value(&[
                (
                    "198.19.0.0/16".parse().unwrap(),
                    Ipv4Addr::new(198, 18, 0, 1),
                ),
                ("198.19.128.0/24".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
                ("0.0.0.0/0".parse().unwrap(), Ipv4Addr::new(198, 18, 0, 1)),
            ]),
        ));
        let l = Lease::from_ack(&ack(opts), 0, Ipv4Addr::UNSPECIFIED).unwrap();
        let r = l
            .to_result(&LeaseParams::default(), SpecVersion::V1_0_0)
            .unwrap();
        assert_eq!(r.routes.len(), 3);
        assert_eq!(r.routes[1].gw, Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
        assert_eq!(r.routes[1].scope, Some(SCOPE_LINK));
        assert_eq!(r.routes[0].scope, None);

        let suppressed = LeaseParams {
            suppress_gateway: true,
            ..LeaseParams::default()
        };
        let r = l.to_result(&suppressed, SpecVersion::V1_0_0).unwrap();
        assert_eq!(r.ips[0].gateway, None);
        assert_eq!(r.routes.len(), 2);
    }

    // A lease from elsewhere than an ACK (the daemon's socket, its state dir) with a prefix
    // length over 32 is an error, not a panic.
    #[test]
    fn a_prefix_longer_than_32_is_an_error() {
        let mut l = Lease::from_ack(&ack(base()), 0, Ipv4Addr::UNSPECIFIED).unwrap();
        l.prefix_len = 33;
        let e = l
            .to_result(&LeaseParams::default(), SpecVersion::V1_0_0)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "lease 198.18.0.77 has prefix length 33, longer than 32"
        );
        l.prefix_len = 32;
        assert!(l
            .to_result(&LeaseParams::default(), SpecVersion::V1_0_0)
            .is_ok());
    }
}
