//! portmap (PL §1.13, §4): host ports forwarded to the container over nf_tables (no
//! `iptables`/`nft` processes), for IPv4 and IPv6, with hairpin and localhost access.
//!
//! - ADD (chained: needs `prevResult`, which it returns unchanged): for each family in which
//!   the container interface has an address, one atomic batch replaces the attachment's rules
//!   (see [`rules`]); then `route_localnet` (IPv4 with `snat`) and a best-effort flush of UDP
//!   conntrack entries for the mapped ports.
//! - DEL: removes every rule carrying the attachment's tag in both families; it needs neither
//!   `portMappings` nor `prevResult` nor the netns (the Go plugin does nothing without
//!   mappings, upstream #683/#752).
//! - CHECK: the attachment's rules exist for each family it has an address in (IPv4-only
//!   attachments pass, unlike Go, upstream #819).
//! - GC: removes this network's rules whose attachment is not in the valid list.
//!
//! Any `backend` value Go accepts is served by this nftables implementation; `"iptables"` and
//! `externalSetMarkChain` say so in one stderr line each (`common::conf::warn_not_honoured`).

pub mod conditions;
pub mod conf;
pub mod host;
pub mod rules;

use cni_nft::Nft;
use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult};

use crate::common::nft_tag::{
    delete_selected, nft_error, open_host, retry_transient, stale_in_network, AttachmentTag,
};
use conf::{container_addresses, port_mappings, PortMapConf, PortMapping};
use rules::{Attachment, TABLE};

/// The portmap plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Portmap;

fn tag_of(args: &CmdArgs) -> AttachmentTag {
    AttachmentTag::new(&args.conf.name, &args.container_id, &args.ifname)
}

fn prev_result(args: &CmdArgs) -> Result<&CniResult, CniError> {
    args.prev_result.as_ref().ok_or_else(|| {
        CniError::invalid_config(
            "portmap: must be called as a chained plugin: prevResult is missing",
        )
    })
}

/// Replaces the attachment's rules of one family (listing afresh on each attempt).
fn install(nft: &mut Nft, att: &Attachment<'_>) -> Result<(), cni_nft::Error> {
    let f = rules::family(att.addr.addr().is_ipv6());
    retry_transient(|| {
        let stale = rules::owned_rules(nft, f, att.tag)?;
        let with_skeleton = !rules::skeleton_spec(f).in_place(nft)?;
        nft.commit(&rules::add_batch(att, &stale, with_skeleton)?)
    })
}

/// Removes the attachment's rules of one family, if its table exists.
fn remove_family(nft: &mut Nft, ipv6: bool, tag: &AttachmentTag) -> Result<usize, cni_nft::Error> {
    delete_selected(
        nft,
        &[(rules::family(ipv6), TABLE)],
        &rules::RULE_CHAINS,
        &|r| tag.owns(r),
    )
}

fn family_name(ipv6: bool) -> &'static str {
    if ipv6 {
        "IPv6"
    } else {
        "IPv4"
    }
}

impl Portmap {
    fn setup(
        &self,
        args: &CmdArgs,
        conf: &PortMapConf,
        mappings: &[PortMapping],
    ) -> Result<(), CniError> {
        let prev = prev_result(args)?;
        let tag = tag_of(args);
        let (v4, v6) = container_addresses(prev, &args.ifname);
        let mut nft = open_host("portmap")?;
        for (ipv6, addr) in [(false, v4), (true, v6)] {
            let Some(addr) = addr.filter(|_| mappings.iter().any(|m| m.applies_to(ipv6))) else {
                // No mapping for this family (any more): drop what an earlier ADD left.
                remove_family(&mut nft, ipv6, &tag).map_err(|e| {
                    nft_error(
                        &format!("removing stale {} port mappings", family_name(ipv6)),
                        e,
                    )
                })?;
                continue;
            };
            let att = Attachment {
                conf,
                tag: &tag,
                addr,
                mappings,
            };
            install(&mut nft, &att).map_err(|e| {
                nft_error(
                    &format!("unable to set up {} port mappings", family_name(ipv6)),
                    e,
                )
            })?;
            if conf.snat && !ipv6 {
                host::enable_localnet_routing(addr)?;
            }
            host::flush_udp_conntrack(&mut nft, ipv6, mappings);
        }
        Ok(())
    }
}

impl Plugin for Portmap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = PortMapConf::parse(&args.conf)?;
        let mappings = port_mappings(&args.conf)?;
        let prev = prev_result(args)?.clone();
        if let Err(e) = self.setup(args, &conf, &mappings) {
            // No half-built state survives a failed ADD.
            if let Err(undo) = self.del(args) {
                log::warn!("portmap: undoing the failed ADD: {}", undo.msg);
            }
            return Err(e);
        }
        Ok(prev)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // The config is decoded like ADD's, so every command refuses the same configs.
        PortMapConf::parse(&args.conf)?;
        port_mappings(&args.conf)?;
        let tag = tag_of(args);
        let mut nft = open_host("portmap")?;
        let mut errors = Vec::new();
        for ipv6 in [false, true] {
            if let Err(e) = remove_family(&mut nft, ipv6, &tag) {
                errors.push(format!("{}: {e}", family_name(ipv6)));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(CniError::internal(format!(
                "portmap: could not remove port mappings: {}",
                errors.join("; ")
            )))
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = PortMapConf::parse(&args.conf)?;
        let mappings = port_mappings(&args.conf)?;
        let prev = prev_result(args)?;
        let tag = tag_of(args);
        let (v4, v6) = container_addresses(prev, &args.ifname);
        let mut nft = open_host("portmap")?;
        for (ipv6, addr) in [(false, v4), (true, v6)] {
            let Some(addr) = addr else { continue };
            let att = Attachment {
                conf: &conf,
                tag: &tag,
                addr,
                mappings: &mappings,
            };
            let (want_dnat, want_masq) = att.expected_counts();
            let owned = rules::owned_rules(&mut nft, rules::family(ipv6), &tag)
                .map_err(|e| nft_error("portmap: listing rules", e))?;
            let masq = owned
                .iter()
                .filter(|r| r.chain == rules::MASQUERADING)
                .count();
            let dnat = owned.len() - masq;
            if dnat < want_dnat || masq < want_masq {
                return Err(CniError::internal(format!(
                    "portmap: missing {} hostport rules for container {}: found {dnat} of \
                     {want_dnat} port rules and {masq} of {want_masq} masquerade rules",
                    family_name(ipv6),
                    args.container_id
                )));
            }
        }
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let select = stale_in_network(&args.conf.name, args.valid_attachments());
        let mut nft = open_host("portmap")?;
        delete_selected(&mut nft, &rules::TABLES, &rules::RULE_CHAINS, &select)
            .map(drop)
            .map_err(|e| nft_error("portmap: garbage-collecting port mappings", e))
    }

    fn about(&self) -> String {
        crate::about("portmap")
    }
}
