//! portmap (Go: containernetworking/plugins `plugins/meta/portmap/`): host ports forwarded to the
//! container over nf_tables (no `iptables`/`nft` processes), for IPv4 and IPv6, with hairpin and
//! localhost access.
//!
//! - ADD (chained: needs `prevResult`, which it returns unchanged): for each family in which
//!   the container interface has an address, one atomic batch replaces what the attachment
//!   had with its map elements (see [`elements`]); mappings the keyed layout cannot hold get
//!   per-mapping rules (see [`rules`]). Then `route_localnet` (IPv4 with `snat`) and a
//!   best-effort flush of UDP conntrack entries for the mapped ports.
//! - DEL: removes the elements its index (see [`index`]) lists, and, when the index says it
//!   may have some or there is no index, every rule carrying the attachment's tag, in both
//!   families; it needs neither `portMappings` nor `prevResult` nor the netns (the Go
//!   plugin does nothing without mappings, upstream #683/#752). With the mappings, it also
//!   flushes their UDP conntrack entries, which would keep a sending client DNATed to the
//!   gone container.
//! - CHECK: the attachment's elements (or rules) exist for each family it has an address in
//!   (IPv4-only attachments pass, unlike Go, upstream #819).
//! - GC: removes this network's index entries (and index chains of the previous layout),
//!   elements and rules whose attachment is not in the valid list.
//!
//! Any `backend` value Go accepts is served by this nftables implementation; `"iptables"` and
//! `externalSetMarkChain` say so in one stderr line each (`common::conf::warn_not_honoured`).

pub mod conditions;
pub mod conf;
pub mod elements;
pub mod host;
pub mod index;
pub mod rules;

use ipnet::IpNet;

use cni_nft::{Batch, Family, Nft};
use cni_plugin::repair::REPAIR_HINT;
use cni_plugin::{CmdArgs, Plugin, RepairAnswer, RepairMode};
use cni_types::{CniError, CniResult};

use crate::common::nft_tag::{
    delete_selected, nft_error, open_host, owns_rule, retry_transient, stale_in_network,
};
use cni_attribution::AttachmentId;
use conf::{container_addresses, port_mappings, PortMapConf, PortMapping};
use elements::{Entry, Found};
use index::IndexId;
use rules::{family, MappedAttachment, TABLE};

/// The portmap plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Portmap;

fn tag_of(args: &CmdArgs) -> AttachmentId {
    args.id()
}

fn prev_result(args: &CmdArgs) -> Result<&CniResult, CniError> {
    args.prev_result.as_ref().ok_or_else(|| {
        CniError::invalid_config(
            "portmap: must be called as a chained plugin: prevResult is missing",
        )
    })
}

/// Replaces the attachment's per-mapping rules of one family (listing afresh on each
/// attempt): the layout for what elements cannot express.
fn install_rules(nft: &mut Nft, att: &MappedAttachment<'_>) -> Result<(), cni_nft::Error> {
    let f = family(att.addr.addr().is_ipv6());
    retry_transient(|| {
        let stale = rules::owned_rules(nft, f, att.tag)?;
        let with_skeleton = !rules::skeleton_spec(f).in_place(nft)?;
        nft.commit(&rules::add_batch(att, &stale, with_skeleton)?)
    })
}

/// One transaction: the keyed skeleton if missing, the removal of whatever the attachment
/// had (its index and elements, its per-mapping rules), then `entries` and their index, which
/// says whether per-mapping rules (`rules`) may follow.
fn write_entries(
    nft: &mut Nft,
    f: Family,
    tag: &AttachmentId,
    entries: &[Entry],
    rules: bool,
) -> Result<(), cni_nft::Error> {
    let mut b = Batch::new();
    if !entries.is_empty() {
        let state = elements::skeleton_state(nft, f)?;
        elements::complete_skeleton(&mut b, f, &state, entries)?;
    }
    let id = IndexId::of(tag)?;
    let old = index::read(nft, f, id)?;
    if let Some(old) = &old {
        index::remove(&mut b, f, id, old)?;
    }
    if old.as_ref().is_none_or(|o| o.rules) {
        for r in rules::owned_rules(nft, f, tag)? {
            b.delete_rule(f, TABLE, &r.chain, r.handle)?;
        }
    }
    if !entries.is_empty() || rules {
        index::add(&mut b, f, tag, entries, rules)?;
    }
    elements::add_entries(&mut b, f, tag, entries)?;
    if b.is_empty() {
        return Ok(());
    }
    nft.commit(&b)
}

/// Sets up one family of an attachment: elements where the config allows, per-mapping rules
/// for the rest (other configs, and keys another attachment owns already).
fn install(
    nft: &mut Nft,
    conf: &PortMapConf,
    tag: &AttachmentId,
    addr: IpNet,
    mappings: &[PortMapping],
) -> Result<(), cni_nft::Error> {
    let ipv6 = addr.addr().is_ipv6();
    let f = family(ipv6);
    let att = |mappings| MappedAttachment {
        conf,
        tag,
        addr,
        mappings,
    };
    if !elements::eligible(conf, ipv6) {
        retry_transient(|| write_entries(nft, f, tag, &[], true))?;
        return install_rules(nft, &att(mappings));
    }
    let mut entries = elements::entries(conf, addr, mappings);
    let mut as_rules: Vec<PortMapping> = Vec::new();
    // A key found taken is looked up; by then its owner may be gone, so try again.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let with_rules = !as_rules.is_empty();
        match retry_transient(|| write_entries(nft, f, tag, &entries, with_rules)) {
            Ok(()) => break,
            Err(e) if e.is_exists() && attempts < 10 => {
                let mut kept = Vec::new();
                for entry in entries {
                    match elements::probe(nft, f, tag, &entry)? {
                        Found::Other(owner) => {
                            log::info!(
                                "portmap: {} is mapped by another attachment ({}); adding a rule \
                                 that takes over when it goes",
                                entry.key.text(),
                                owner.unwrap_or_default()
                            );
                            as_rules.extend(entry.mapping);
                        }
                        _ => kept.push(entry),
                    }
                }
                entries = kept;
                if entries.iter().all(|e| e.target.is_none()) {
                    entries.clear();
                }
            }
            Err(e) => return Err(e),
        }
    }
    if !as_rules.is_empty() {
        install_rules(nft, &att(&as_rules))?;
    }
    Ok(())
}

/// Removes the attachment's elements and index of one family: the number of keys removed,
/// and whether it may have per-mapping rules (true without an index).
fn remove_entries(nft: &mut Nft, f: Family, id: IndexId) -> Result<(usize, bool), cni_nft::Error> {
    retry_transient(|| {
        let Some(old) = index::read_for_removal(nft, f, id)? else {
            return Ok((0, true));
        };
        let mut b = Batch::new();
        index::remove(&mut b, f, id, &old)?;
        if !b.is_empty() {
            nft.commit(&b)?;
        }
        Ok((old.keys.len(), old.rules))
    })
}

/// Removes everything of the attachment in one family: elements, then per-mapping rules
/// (including those of rcni versions before the keyed layout) unless its index rules them
/// out.
fn remove_family(nft: &mut Nft, ipv6: bool, tag: &AttachmentId) -> Result<usize, cni_nft::Error> {
    let f = family(ipv6);
    let (keys, may_have_rules) = remove_entries(nft, f, IndexId::of(tag)?)?;
    if !may_have_rules {
        return Ok(keys);
    }
    let rules = delete_selected(nft, &[(f, TABLE)], &rules::RULE_CHAINS, &|r| {
        owns_rule(tag, r)
    })?;
    Ok(keys + rules)
}

/// CHECK of one family: every expected element is present, owned and right; mappings that
/// are not in the index must exist as per-mapping rules.
fn check_family(
    nft: &mut Nft,
    conf: &PortMapConf,
    tag: &AttachmentId,
    addr: IpNet,
    mappings: &[PortMapping],
) -> Result<(), String> {
    let ipv6 = addr.addr().is_ipv6();
    let f = family(ipv6);
    let mut as_rules: Vec<PortMapping> = Vec::new();
    if elements::eligible(conf, ipv6) {
        let id = IndexId::of(tag).map_err(|e| e.to_string())?;
        let index = index::read(nft, f, id)
            .map_err(|e| e.to_string())?
            .map(|i| i.keys)
            .unwrap_or_default();
        // With every port taken by others (all as rules), no hairpin element is needed.
        let keyed = index
            .iter()
            .any(|k| !matches!(k, elements::Key::Hairpin { .. }));
        for entry in elements::entries(conf, addr, mappings) {
            if entry.mapping.is_none() && !keyed {
                continue;
            }
            let found = elements::probe(nft, f, tag, &entry).map_err(|e| e.to_string())?;
            let listed = index.contains(&entry.key);
            match (found, entry.mapping) {
                (Found::Ours(true), _) if listed => {}
                (Found::Other(_), Some(m)) if !listed => as_rules.push(m),
                // A hairpin source another attachment also masquerades works the same.
                (Found::Other(_), None) if !listed => {}
                (found, _) => {
                    return Err(format!(
                        "port mapping element {} is {}",
                        entry.key.text(),
                        match found {
                            Found::Ours(_) => "present with another target",
                            Found::Other(_) => "owned by another attachment",
                            Found::Missing => "missing",
                        }
                    ))
                }
            }
        }
    } else {
        as_rules = mappings.to_vec();
    }
    let att = MappedAttachment {
        conf,
        tag,
        addr,
        mappings: &as_rules,
    };
    let (want_dnat, want_masq) = att.expected_counts();
    if want_dnat == 0 {
        return Ok(());
    }
    let owned = rules::owned_rules(nft, f, tag).map_err(|e| e.to_string())?;
    let masq = owned
        .iter()
        .filter(|r| r.chain == rules::MASQUERADING)
        .count();
    let dnat = owned.len() - masq;
    if dnat < want_dnat || masq < want_masq {
        return Err(format!(
            "found {dnat} of {want_dnat} port rules and {masq} of {want_masq} masquerade rules"
        ));
    }
    Ok(())
}

/// GC of the keyed layout: index entries (and previous index chains) of `network` whose
/// attachment is not valid go, with their elements.
fn gc_entries(nft: &mut Nft, network: &str, keep: &[IndexId]) -> Result<(), cni_nft::Error> {
    let Some(net) = IndexId::network_bytes(network) else {
        return Ok(());
    };
    for f in [Family::Ip, Family::Ip6] {
        if !nft.table_exists(f, TABLE)? {
            continue;
        }
        let mut ids = index::ids_in(nft, f, &net)?;
        ids.extend(index::legacy_chains(nft, f, network)?);
        for id in ids.into_iter().filter(|id| !keep.contains(id)) {
            remove_entries(nft, f, id)?;
        }
    }
    Ok(())
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
            install(&mut nft, conf, &tag, addr, mappings).map_err(|e| {
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

/// What CHECK and repair compare with the kernel, and what they found missing.
struct Audit {
    conf: PortMapConf,
    mappings: Vec<PortMapping>,
    tag: AttachmentId,
    nft: Nft,
    /// Per family with an address: (IPv6?, the container address, what is missing).
    missing: Vec<(bool, IpNet, String)>,
}

fn audit(args: &CmdArgs) -> Result<Audit, CniError> {
    let conf = PortMapConf::parse(&args.conf)?;
    let mappings = port_mappings(&args.conf)?;
    let tag = tag_of(args);
    let (v4, v6) = container_addresses(prev_result(args)?, &args.ifname);
    let mut nft = open_host("portmap")?;
    let mut missing = Vec::new();
    for (ipv6, addr) in [(false, v4), (true, v6)] {
        let Some(addr) = addr else { continue };
        if let Err(why) = check_family(&mut nft, &conf, &tag, addr, &mappings) {
            missing.push((ipv6, addr, why));
        }
    }
    Ok(Audit {
        conf,
        mappings,
        tag,
        nft,
        missing,
    })
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
        let mappings = port_mappings(&args.conf)?;
        let tag = tag_of(args);
        let mut nft = open_host("portmap")?;
        let mut errors = Vec::new();
        for ipv6 in [false, true] {
            if let Err(e) = remove_family(&mut nft, ipv6, &tag) {
                errors.push(format!("{}: {e}", family_name(ipv6)));
            }
            // A UDP client that keeps sending would stay DNATed to the gone container.
            host::flush_udp_conntrack(&mut nft, ipv6, &mappings);
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
        match audit(args)?.missing.first() {
            None => Ok(()),
            Some((ipv6, _, why)) => Err(CniError::internal(format!(
                "portmap: missing {} hostport mappings for container {}: {why}; {}",
                family_name(*ipv6),
                args.container_id,
                REPAIR_HINT
            ))),
        }
    }

    /// Puts back, per family, the mappings CHECK finds missing, through ADD's own install
    /// (which replaces the attachment's elements and rules, so nothing is doubled), then
    /// flushes the mapped UDP ports' conntrack entries as ADD does: datagrams sent while the
    /// mapping was gone made entries without the DNAT.
    fn repair(&self, args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
        let mut a = audit(args)?;
        let mut restored = Vec::new();
        for (ipv6, addr, why) in &a.missing {
            restored.push(format!("portmap {}: {why}", family_name(*ipv6)));
            if mode == RepairMode::Look {
                continue;
            }
            install(&mut a.nft, &a.conf, &a.tag, *addr, &a.mappings).map_err(|e| {
                nft_error(
                    &format!("portmap: restoring {} port mappings", family_name(*ipv6)),
                    e,
                )
            })?;
            host::flush_udp_conntrack(&mut a.nft, *ipv6, &a.mappings);
        }
        Ok(RepairAnswer::Restored(restored))
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let valid = args.valid_attachments();
        let keep: Vec<IndexId> = valid
            .iter()
            .filter_map(|a| {
                IndexId::of(&AttachmentId::new(
                    &args.conf.name,
                    &a.container_id,
                    &a.ifname,
                ))
                .ok()
            })
            .collect();
        let mut nft = open_host("portmap")?;
        gc_entries(&mut nft, &args.conf.name, &keep)
            .map_err(|e| nft_error("portmap: garbage-collecting port mapping elements", e))?;
        let select = stale_in_network(&args.conf.name, valid);
        delete_selected(&mut nft, &rules::TABLES, &rules::RULE_CHAINS, &select)
            .map(drop)
            .map_err(|e| nft_error("portmap: garbage-collecting port mappings", e))
    }
}
