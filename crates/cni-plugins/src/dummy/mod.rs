//! dummy (Go: containernetworking/plugins `plugins/main/dummy/dummy.go`): a dummy link in the
//! container namespace (created there under a temporary name and renamed, like the other interface
//! plugins), configured from IPAM, which is required. The result's DNS is the IPAM result's; the
//! config's `dns` is ignored, as in Go.
//!
//! Commands: ADD (transactional: a failure deletes the link and releases the lease), DEL
//! (IPAM DEL, then the link; a missing link or netns is fine), CHECK (kind dummy, up, MAC,
//! addresses and routes), STATUS (always the IPAM plugin's), GC of stale
//! attachments' links through their records (`dataDir`, as macvlan), then to the IPAM plugin
//! (Go: no-op).
//!
//! Needs `CONFIG_DUMMY`; a kernel without it answers EOPNOTSUPP, reported as "failed to
//! create dummy: ... (the kernel lacks dummy support)".

use cni_linux::rtnl::link_add::LinkKind;
use cni_plugin::{ipam, CmdArgs, Plugin};
use cni_types::{CniError, CniResult};

use crate::common::errors::combine;
use crate::common::sublink::{self, AddPlan, Addressing};
use crate::common::validate;
use crate::netns;

/// The dummy plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dummy;

/// ADD and CHECK need an IPAM plugin.
fn require_ipam(args: &CmdArgs) -> Result<(), CniError> {
    if args.conf.ipam_type.is_empty() {
        return Err(CniError::invalid_config("dummy: IPAM must be specified"));
    }
    Ok(())
}

impl Plugin for Dummy {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        require_ipam(args)?;
        let ns = netns::open_required(&args.netns)?;
        let plan = AddPlan {
            plugin: "dummy",
            kind: LinkKind::Dummy,
            master: None,
            // Created from inside the container: no host namespace is involved.
            link_in_container: true,
            mtu: None,
            mac: None,
            addressing: Addressing::Ipam,
            notify: false,
            dns: None,
        };
        sublink::add_link(args, &ns, plan)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let mut errors = Vec::new();
        if !args.conf.ipam_type.is_empty() {
            errors.extend(ipam::ipam_del(args).err());
        }
        errors.extend(sublink::delete_link_and_record(args).err());
        combine(errors)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        require_ipam(args)?;
        ipam::ipam_check(args)?;
        let (prev, entry) = validate::prev_container_entry(args)?;
        let ns = netns::open_required(&args.netns)?;
        sublink::check_container(&ns, &entry, prev, "dummy", |_, link| {
            if link.up {
                Ok(())
            } else {
                Err(CniError::internal(format!(
                    "Container interface {} is down",
                    link.name
                )))
            }
        })
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        ipam::ipam_status(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        crate::common::sublink::gc(args)
    }
}

#[cfg(test)]
mod tests {
    use cni_plugin::Command;

    use super::*;

    #[test]
    fn ipam_is_required() {
        let args = CmdArgs::new(
            Command::Add,
            br#"{"cniVersion":"1.0.0","name":"n","type":"dummy"}"#,
        )
        .unwrap();
        assert_eq!(require_ipam(&args).unwrap_err().code, 7);
        let args = CmdArgs::new(
            Command::Add,
            br#"{"cniVersion":"1.0.0","name":"n","type":"dummy","ipam":{"type":"host-local"}}"#,
        )
        .unwrap();
        assert!(require_ipam(&args).is_ok());
    }
}
