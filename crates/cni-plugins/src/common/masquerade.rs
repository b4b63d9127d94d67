//! `ipMasq` for bridge and ptp (Go's `pkg/ip/ipmasq_nftables_linux.go`) on nf_tables, in the layout
//! of the Go plugins' nftables backend: table `inet cni_plugins_masquerade`, a regular chain
//! `masq_checks` with one rule per container address (`ip[6] saddr <ip> ip[6] daddr != <its subnet>
//! masquerade`), and a base chain `postrouting` that skips multicast and goes to
//! `masq_checks`. Rule comments follow [`AttachmentId`], byte-identical to Go's, so either
//! implementation can tear down the other's rules.
//!
//! All three functions work in the calling thread's network namespace (the host side) and
//! apply each change as one atomic batch. Teardown and GC need no addresses and no netns
//! (fixing the Go iptables backend's leak, upstream #810).

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use cni_attribution::AttachmentId;
use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, Nft, Rule};
use cni_plugin::{CmdArgs, Undo};
use cni_types::CniError;

use super::conf::warn_not_honoured;
use super::nft_skeleton::Skeleton;
use super::nft_tag::{nft_error, open_host, retry_transient};

/// What rcni does instead of an iptables masquerade backend.
const NFTABLES_INSTEAD: &str =
    "rcni masquerades with nftables, in table inet cni_plugins_masquerade \
     (the Go nftables backend's layout)";

/// The table, shared with the Go plugins' nftables backend, and its chains.
pub use cni_attribution::names::masquerade::{CHECKS_CHAIN, POSTROUTING_CHAIN, TABLE};
const FAMILY: Family = Family::Inet;

fn multicast_v4() -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::new(224, 0, 0, 0), 4).unwrap_or_default())
}

fn multicast_v6() -> IpNet {
    IpNet::V6(Ipv6Net::new(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8).unwrap_or_default())
}

/// The constant part of the layout; see [`Skeleton`].
const SKELETON: Skeleton<'static> = Skeleton {
    family: FAMILY,
    table: TABLE,
    chains: &[CHECKS_CHAIN, POSTROUTING_CHAIN],
    fixed: &[(POSTROUTING_CHAIN, 3)],
    marker: "rcni ipMasq v1",
};

/// The table, both chains, and the constant content of `postrouting` (flushed and rewritten:
/// the same three rules every time, so concurrent ADDs always leave exactly one copy).
fn skeleton(batch: &mut Batch) -> Result<(), cni_nft::Error> {
    batch.add_table(FAMILY, TABLE)?;
    batch.add_chain(&Chain::regular(FAMILY, TABLE, CHECKS_CHAIN))?;
    batch.add_chain(&Chain::base(
        FAMILY,
        TABLE,
        POSTROUTING_CHAIN,
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ))?;
    batch.flush_chain(FAMILY, TABLE, POSTROUTING_CHAIN)?;
    for multicast in [multicast_v4(), multicast_v6()] {
        batch.add_rule(
            &Rule::builder(FAMILY, TABLE, POSTROUTING_CHAIN)
                .daddr(multicast)
                .ret()
                .comment(SKELETON.marker)
                .build()?,
        );
    }
    batch.add_rule(
        &Rule::builder(FAMILY, TABLE, POSTROUTING_CHAIN)
            .goto(CHECKS_CHAIN)
            .comment(SKELETON.marker)
            .build()?,
    );
    Ok(())
}

/// [`Skeleton::in_place`] in one dump instead of four: `postrouting` holding exactly its
/// marked fixed rules means the table and both chains exist, since only [`skeleton`] writes
/// that marker and its last rule goes to `masq_checks` (the kernel keeps a chain that a rule
/// refers to).
fn skeleton_in_place(nft: &mut Nft) -> Result<bool, cni_nft::Error> {
    let rules = nft.list_rules(FAMILY, TABLE, POSTROUTING_CHAIN)?;
    let expected = SKELETON.fixed.iter().map(|(_, n)| n).sum::<usize>();
    Ok(rules.len() == expected
        && rules
            .iter()
            .all(|r| r.comment.as_deref() == Some(SKELETON.marker)))
}

/// The masquerade rule of one container address: everything leaving the subnet is
/// masqueraded (multicast was skipped by `postrouting`).
fn address_rule(addr: &IpNet, comment: &str) -> Result<Rule, cni_nft::Error> {
    Rule::builder(FAMILY, TABLE, CHECKS_CHAIN)
        .saddr(addr.addr())
        .daddr_not(addr.trunc())
        .masquerade()
        .comment(comment)
        .build()
}

/// GC for a plugin whose config has `ipMasq` set: the network's rules whose attachment is not
/// in the request's valid list go. Without `ipMasq` there is nothing of ours to collect.
pub fn gc_for(args: &cni_plugin::CmdArgs, ip_masq: bool) -> Result<(), CniError> {
    if !ip_masq {
        return Ok(());
    }
    gc_masquerade(&args.conf.name, args.valid_attachments())
}

/// Validates `ipMasqBackend`; like Go, only when masquerading is on. Both backends Go knows
/// are served by rcni's nftables implementation, so a config written for either works;
/// `"iptables"` says so on stderr.
pub fn check_backend(plugin: &str, ip_masq: bool, backend: Option<&str>) -> Result<(), CniError> {
    match backend {
        _ if !ip_masq => Ok(()),
        Some("iptables") => {
            warn_not_honoured(plugin, "ipMasqBackend \"iptables\"", NFTABLES_INSTEAD);
            Ok(())
        }
        None | Some("nftables") => Ok(()),
        Some(other) => Err(CniError::invalid_config(format!(
            "{plugin}: unknown ipMasqBackend {other:?} (expected \"iptables\" or \"nftables\")"
        ))),
    }
}

/// Installs masquerading for the container addresses `ips` of one attachment, replacing any
/// rules an earlier ADD of the same attachment left (so repeating it is harmless).
pub fn setup_masquerade(
    network: &str,
    container_id: &str,
    ifname: &str,
    ips: &[IpNet],
) -> Result<(), CniError> {
    let tag = AttachmentId::new(network, container_id, ifname);
    let mut nft = open_host("ipMasq")?;
    retry_transient(|| try_setup(&mut nft, &tag, ips))
        .map_err(|e| nft_error("setting up ipMasq rules", e))
}

/// [`setup_masquerade`] for the attachment of `args`, as a step of a transactional ADD: `undo`
/// tears the rules down again when the ADD fails later.
pub fn setup_with_undo<'a>(
    args: &'a CmdArgs,
    ips: &[IpNet],
    undo: &mut Undo<'a>,
) -> Result<(), CniError> {
    let (network, cid, ifname) = (&args.conf.name, &args.container_id, &args.ifname);
    setup_masquerade(network, cid, ifname, ips)?;
    undo.push("masquerade rules", move || {
        teardown_masquerade(network, cid, ifname).map_err(|e| e.msg)
    });
    Ok(())
}

fn try_setup(nft: &mut Nft, tag: &AttachmentId, ips: &[IpNet]) -> Result<(), cni_nft::Error> {
    let mut batch = Batch::new();
    if !skeleton_in_place(nft)? {
        skeleton(&mut batch)?;
    }
    for stale in nft.list_rules(FAMILY, TABLE, CHECKS_CHAIN)? {
        if super::nft_tag::owns_rule(tag, &stale) {
            batch.delete_rule(FAMILY, TABLE, CHECKS_CHAIN, stale.handle)?;
        }
    }
    let comment = tag.comment();
    for ip in ips {
        batch.add_rule(&address_rule(ip, &comment)?);
    }
    nft.commit(&batch)
}

/// What of one attachment's masquerade is missing from the kernel (table, chains and the
/// constant rules, or its per-address rules), named for CHECK and repair; `None`: all there.
pub fn missing_masquerade(
    network: &str,
    container_id: &str,
    ifname: &str,
    ips: &[IpNet],
) -> Result<Option<String>, CniError> {
    let tag = AttachmentId::new(network, container_id, ifname);
    let mut nft = open_host("ipMasq check")?;
    missing_with(&mut nft, &tag, ips).map_err(|e| nft_error("listing ipMasq rules", e))
}

fn missing_with(
    nft: &mut Nft,
    tag: &AttachmentId,
    ips: &[IpNet],
) -> Result<Option<String>, cni_nft::Error> {
    if !skeleton_in_place(nft)? {
        return Ok(Some(format!(
            "table {FAMILY} {TABLE} with chain {POSTROUTING_CHAIN} is missing or incomplete"
        )));
    }
    let have = super::nft_tag::owned_rules(nft, FAMILY, TABLE, &[CHECKS_CHAIN], tag)?.len();
    Ok((have != ips.len()).then(|| {
        format!(
            "{FAMILY} {TABLE} {CHECKS_CHAIN} holds {have} of the {} masquerade rules of {}",
            ips.len(),
            tag.comment()
        )
    }))
}

/// Removes every masquerade rule of one attachment; nothing to remove is success.
pub fn teardown_masquerade(
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<(), CniError> {
    start_teardown(network, container_id, ifname).map(drop)
}

/// A finished masquerade teardown whose netfilter socket is still open.
///
/// Closing a netfilter socket waits until the kernel has released what the last transaction
/// deleted (`nf_tables` frees deleted rules after an RCU grace period, and the socket release
/// flushes that work), about as long as a veth deletion. A DEL that tears down first and drops
/// this after its other slow steps lets the two waits overlap.
#[must_use = "dropping it closes the socket, which is the wait to overlap"]
pub struct Teardown(#[allow(dead_code)] Nft);

/// [`teardown_masquerade`], returning the open socket to drop later (see [`Teardown`]).
pub fn start_teardown(
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Result<Teardown, CniError> {
    let tag = AttachmentId::new(network, container_id, ifname);
    let mut nft = open_host("ipMasq teardown")?;
    // A missing table lists no rules and commits nothing: no separate look for the table.
    retry_transient(|| {
        nft.delete_rules_where(FAMILY, TABLE, &[CHECKS_CHAIN], |r| {
            super::nft_tag::owns_rule(&tag, r)
        })
    })
    .map_err(|e| nft_error("removing ipMasq rules", e))?;
    Ok(Teardown(nft))
}

/// Removes the masquerade rules of `network` whose attachment is not in `valid`.
pub fn gc_masquerade(network: &str, valid: &[AttachmentId]) -> Result<(), CniError> {
    let select = super::nft_tag::stale_in_network(network, valid);
    let mut nft = open_host("ipMasq GC")?;
    super::nft_tag::delete_selected(&mut nft, &[(FAMILY, TABLE)], &[CHECKS_CHAIN], &select)
        .map(drop)
        .map_err(|e| nft_error("garbage-collecting ipMasq rules", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn address_rule_excludes_its_own_subnet() {
        let ip: IpNet = "10.88.0.5/16".parse().unwrap();
        let rule = address_rule(&ip, "c").unwrap();
        let want = Rule::builder(FAMILY, TABLE, CHECKS_CHAIN)
            .saddr("10.88.0.5".parse::<IpAddr>().unwrap())
            .daddr_not("10.88.0.0/16".parse::<IpNet>().unwrap())
            .masquerade()
            .comment("c")
            .build()
            .unwrap();
        assert_eq!(rule, want);
    }

    #[test]
    fn skeleton_rewrites_postrouting_with_constant_rules() {
        let mut a = Batch::new();
        skeleton(&mut a).unwrap();
        let mut b = Batch::new();
        skeleton(&mut b).unwrap();
        assert_eq!(a, b);
        // table, 2 chains, flush, 3 rules
        assert_eq!(a.len(), 7);
    }
}
