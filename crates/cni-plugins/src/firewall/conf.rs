//! The firewall configuration: `backend`, `iptablesAdminChainName`,
//! `ingressPolicy` (`firewalldZone` is accepted with a warning: firewalld is refused).

use cni_types::{CniError, NetConf};

use crate::common::conf::{field, warn_not_honoured};

/// Go's default admin chain.
pub use cni_attribution::names::firewall_iptables::DEFAULT_ADMIN_CHAIN;

/// Bridge isolation (`ingressPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressPolicy {
    /// `open` or empty: no isolation.
    Open,
    /// `same-bridge`: traffic from other isolated bridges is dropped.
    SameBridge,
    /// `isolated`: also traffic between ports of the same bridge that the host routes.
    Isolated,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConf {
    pub admin_chain: String,
    pub ingress_policy: IngressPolicy,
}

fn invalid(msg: impl std::fmt::Display) -> CniError {
    CniError::invalid_config(format!("firewall: {msg}"))
}

impl FirewallConf {
    pub fn parse(conf: &NetConf) -> Result<FirewallConf, CniError> {
        let raw = &conf.raw;
        match field::<String>(raw, "backend")?.as_deref() {
            None | Some("") | Some("iptables") => {}
            Some("firewalld") => {
                return Err(invalid(
                    "firewalld is not supported by rcni (backend \"firewalld\"); use backend \
                     \"iptables\" or \"\", both served by rcni's iptables-nft rules",
                ))
            }
            Some(other) => {
                return Err(invalid(format!(
                    "unknown backend {other:?} (expected \"iptables\", \"firewalld\" or \"\")"
                )))
            }
        }
        if let Some(zone) = field::<String>(raw, "firewalldZone")?.filter(|z| !z.is_empty()) {
            warn_not_honoured(
                "firewall",
                &format!("firewalldZone {zone:?}"),
                "rcni has no firewalld backend; the accept rules go to iptables-nft's filter \
                 table (CNI-FORWARD)",
            );
        }
        let admin_chain = field::<String>(raw, "iptablesAdminChainName")?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_ADMIN_CHAIN.to_string());
        if admin_chain.len() > 64 || !admin_chain.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid(format!(
                "invalid iptablesAdminChainName {admin_chain:?}"
            )));
        }
        let ingress_policy = match field::<String>(raw, "ingressPolicy")?.as_deref() {
            None | Some("") | Some("open") => IngressPolicy::Open,
            Some("same-bridge") => IngressPolicy::SameBridge,
            Some("isolated") => IngressPolicy::Isolated,
            Some(other) => {
                return Err(invalid(format!(
                    "unknown ingressPolicy {other:?} (expected \"open\", \"same-bridge\" or \"isolated\")"
                )))
            }
        };
        Ok(FirewallConf {
            admin_chain,
            ingress_policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<FirewallConf, CniError> {
        FirewallConf::parse(&NetConf::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn podman_and_nomad_configs_parse() {
        let c = parse(r#"{"name":"podman","type":"firewall","backend":""}"#).unwrap();
        assert_eq!(c.admin_chain, "CNI-ADMIN");
        assert_eq!(c.ingress_policy, IngressPolicy::Open);
        let c = parse(
            r#"{"name":"nomad","type":"firewall","backend":"iptables","iptablesAdminChainName":"NOMAD-ADMIN","ingressPolicy":"same-bridge"}"#,
        )
        .unwrap();
        assert_eq!(c.admin_chain, "NOMAD-ADMIN");
        assert_eq!(c.ingress_policy, IngressPolicy::SameBridge);
    }

    #[test]
    fn firewalld_and_unknown_values_are_code_7() {
        let e = parse(r#"{"name":"n","type":"firewall","backend":"firewalld"}"#).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("firewalld is not supported"), "{}", e.msg);
        for bad in [
            r#"{"name":"n","type":"firewall","backend":"pf"}"#,
            r#"{"name":"n","type":"firewall","ingressPolicy":"closed"}"#,
            r#"{"name":"n","type":"firewall","iptablesAdminChainName":"a b"}"#,
        ] {
            assert_eq!(parse(bad).unwrap_err().code, 7, "{bad}");
        }
    }
}
