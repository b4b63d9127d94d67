//! ptp (Go: containernetworking/plugins `plugins/main/ptp/ptp.go`): a veth pair per container,
//! routed rather than bridged. The container gets its IPAM address with all traffic (its own subnet
//! included) sent via the gateway; the host veth carries the gateway as a /32 (/128) and a host
//! route to the container address.
//!
//! - [`add`]: transactional ADD; [`del`]: DEL in Go's order (IPAM first), best effort, and
//!   GC; [`check`]: CHECK, and rcni's repair of the `ipMasq` rules. STATUS always goes to the
//!   IPAM plugin, GC too.
//!
//! `ipMasq` rules are nf_tables rules made over netlink (`common::masquerade`); GC removes
//! those of attachments that are no longer valid.
//!
//! Deliberate differences from the Go plugin: a failed ADD removes the veth pair and releases
//! the lease (Go leaks both in places); the namespace is opened and the interface name
//! checked before IPAM ADD; an IPAM result without a gateway is a clear error; the host veth
//! gets an explicit MAC and its IPv6 gateway address skips DAD; DEL keeps going after a failed
//! IPAM DEL and reports every error at the end.

pub mod add;
pub mod check;
pub mod del;

use cni_plugin::{ipam, FnPlugin};
use cni_types::CniError;

/// The ptp plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: ipam::ipam_status,
    gc: del::gc,
    repair: check::repair,
    ..FnPlugin::new(add::add, del::del, check::check)
};

/// The ptp config keys (besides `ipam` and `dns`, which every config has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtpConf {
    pub ip_masq: bool,
    pub ip_masq_backend: Option<String>,
    pub mtu: Option<u32>,
}

impl PtpConf {
    pub fn parse(conf: &cni_types::NetConf) -> Result<PtpConf, CniError> {
        use crate::common::conf::{field, flag, mtu};
        Ok(PtpConf {
            ip_masq: flag(&conf.raw, "ipMasq")?,
            ip_masq_backend: field::<String>(&conf.raw, "ipMasqBackend")?,
            mtu: mtu("ptp", &conf.raw)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys() {
        let c = cni_types::NetConf::parse(
            br#"{"name":"n","type":"ptp","IPMasq":false,"Mtu":1400,"ipam":{"type":"host-local"}}"#,
        )
        .unwrap();
        assert_eq!(
            PtpConf::parse(&c).unwrap(),
            PtpConf {
                ip_masq: false,
                ip_masq_backend: None,
                mtu: Some(1400)
            }
        );
        let bad = cni_types::NetConf::parse(br#"{"name":"n","ipMasq":1}"#).unwrap();
        assert_eq!(PtpConf::parse(&bad).unwrap_err().code, 7);
    }
}
