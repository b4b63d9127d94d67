//! bridge `macspoofchk` (Go's `pkg/link/spoofcheck.go`): frames arriving from the container's host
//! veth must carry the container's MAC as source, or they are dropped before the bridge forwards
//! them.
//!
//! Layout of the Go plugin (so either can tear down the other's attachment): table
//! `bridge nat`, base chain `PREROUTING` (filter, prerouting, priority -300, policy accept),
//! and per attachment the chains `cni-br-iface-<cid>-<ifname>` and `...-mac`, every rule
//! commented `macspoofchk-<cid>-<ifname>`:
//! `PREROUTING: iifname <veth> jump <iface>`, `<iface>: jump <mac>`,
//! `<mac>: ether saddr <mac> return; drop`.
//!
//! Works in the calling thread's namespace (the host side); each change is one batch.
//!
//! GC: Go's names carry no network, so whether a check is stale is told by its host veth (the
//! `iifname` of its `PREROUTING` rule): a live attachment of any network keeps its veth, and
//! bridge GC removes the network's stale veths first. A check whose veth is gone and that is
//! no valid attachment's is removed.

use cni_linux::MacAddr;
use cni_nft::{
    priority, Batch, Chain, ChainType, CmpOp, Expr, Family, Hook, Nft, PayloadBase, Policy, Reg,
    Rule,
};
use cni_plugin::{CmdArgs, Undo};
use cni_types::CniError;

use super::nft_skeleton::Skeleton;
use super::nft_tag::{nft_error, open_host, retry_transient};

use cni_attribution::names::spoofcheck::{mac_chain, names, CHAIN_PREFIX, COMMENT_PREFIX};
/// The table, shared with the Go bridge plugin, and its base chain.
pub use cni_attribution::names::spoofcheck::{PREROUTING_CHAIN, TABLE};
use cni_attribution::AttachmentId;
use cni_linux::Handle;
use cni_plugin::ResultExt;
const FAMILY: Family = Family::Bridge;

/// `ether saddr <mac>`.
fn ether_saddr(mac: MacAddr) -> [Expr; 2] {
    [
        Expr::Payload {
            dreg: Reg::R1,
            base: PayloadBase::Link,
            offset: 6,
            len: 6,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: mac.octets().to_vec(),
        },
    ]
}

fn setup_batch(
    nft: &mut Nft,
    container_id: &str,
    ifname: &str,
    host_veth: &str,
    mac: MacAddr,
) -> Result<Batch, cni_nft::Error> {
    let (iface, mac_chain, comment) = names(container_id, ifname);
    let mut b = Batch::new();
    let skeleton = Skeleton {
        family: FAMILY,
        table: TABLE,
        chains: &[PREROUTING_CHAIN],
        fixed: &[],
        marker: "",
    };
    if !skeleton.in_place(nft)? {
        b.add_table(FAMILY, TABLE)?;
        b.add_chain(
            &Chain::base(
                FAMILY,
                TABLE,
                PREROUTING_CHAIN,
                ChainType::Filter,
                Hook::Prerouting,
                priority::RAW,
            )
            .with_policy(Policy::Accept),
        )?;
    }
    // A repeated ADD replaces its own jump rule instead of adding a second one.
    for old in nft.list_rules(FAMILY, TABLE, PREROUTING_CHAIN)? {
        if old.comment.as_deref() == Some(comment.as_str()) {
            b.delete_rule(FAMILY, TABLE, PREROUTING_CHAIN, old.handle)?;
        }
    }
    for chain in [&iface, &mac_chain] {
        b.add_chain(&Chain::regular(FAMILY, TABLE, chain))?;
        b.flush_chain(FAMILY, TABLE, chain)?;
    }
    let [load, cmp] = ether_saddr(mac);
    b.add_rule(
        &Rule::builder(FAMILY, TABLE, &mac_chain)
            .expr(load)
            .expr(cmp)
            .ret()
            .comment(&comment)
            .build()?,
    );
    b.add_rule(
        &Rule::builder(FAMILY, TABLE, &mac_chain)
            .drop()
            .comment(&comment)
            .build()?,
    );
    b.add_rule(
        &Rule::builder(FAMILY, TABLE, &iface)
            .jump(&mac_chain)
            .comment(&comment)
            .build()?,
    );
    b.add_rule(
        &Rule::builder(FAMILY, TABLE, PREROUTING_CHAIN)
            .iifname(host_veth)
            .jump(&iface)
            .comment(&comment)
            .build()?,
    );
    Ok(b)
}

/// Drops frames from `host_veth` whose source MAC is not `container_mac`.
pub fn setup_spoofcheck(
    container_id: &str,
    ifname: &str,
    host_veth: &str,
    container_mac: &str,
) -> Result<(), CniError> {
    let mac: MacAddr = container_mac.parse().map_err(|e| {
        CniError::internal(format!(
            "macspoofchk: invalid container MAC {container_mac:?}: {e:?}"
        ))
    })?;
    let mut nft = open_host("macspoofchk")?;
    retry_transient(|| {
        let batch = setup_batch(&mut nft, container_id, ifname, host_veth, mac)?;
        nft.commit(&batch)
    })
    .map_err(|e| nft_error("setting up macspoofchk rules", e))
}

/// [`setup_spoofcheck`] for the attachment of `args`, as a step of a transactional ADD: `undo`
/// tears the check down again when the ADD fails later.
pub fn setup_with_undo<'a>(
    args: &'a CmdArgs,
    host_veth: &str,
    container_mac: &str,
    undo: &mut Undo<'a>,
) -> Result<(), CniError> {
    let (cid, ifname) = (&args.container_id, &args.ifname);
    setup_spoofcheck(cid, ifname, host_veth, container_mac)?;
    undo.push("spoof check", move || {
        teardown_spoofcheck(cid, ifname).map_err(|e| e.msg)
    });
    Ok(())
}

/// What of one attachment's spoof check is missing (the jump from `PREROUTING`, its two
/// chains or their rules), named for CHECK and repair; `None`: all there.
pub fn missing_spoofcheck(container_id: &str, ifname: &str) -> Result<Option<String>, CniError> {
    let mut nft = open_host("macspoofchk check")?;
    missing_with(&mut nft, container_id, ifname)
        .map_err(|e| nft_error("listing macspoofchk rules", e))
}

fn missing_with(
    nft: &mut Nft,
    container_id: &str,
    ifname: &str,
) -> Result<Option<String>, cni_nft::Error> {
    let (iface, mac_chain, comment) = names(container_id, ifname);
    // (chain, rules it holds with the attachment's comment); a missing chain lists none.
    for (chain, want) in [(PREROUTING_CHAIN, 1), (iface.as_str(), 1), (&mac_chain, 2)] {
        let have = nft
            .list_rules(FAMILY, TABLE, chain)?
            .iter()
            .filter(|r| r.comment.as_deref() == Some(comment.as_str()))
            .count();
        if have < want {
            return Ok(Some(format!(
                "{FAMILY} {TABLE} {chain} holds {have} of its {want} rules tagged {comment}"
            )));
        }
    }
    Ok(None)
}

/// Removes the spoof check of one attachment; nothing to remove is success.
pub fn teardown_spoofcheck(container_id: &str, ifname: &str) -> Result<(), CniError> {
    let mut nft = open_host("macspoofchk teardown")?;
    teardown_with(&mut nft, container_id, ifname)
        .map_err(|e| nft_error("removing macspoofchk rules", e))
}

fn teardown_with(nft: &mut Nft, container_id: &str, ifname: &str) -> Result<(), cni_nft::Error> {
    teardown_named(nft, &names(container_id, ifname))
}

/// Removes the check named (iface chain, mac chain, comment).
fn teardown_named(nft: &mut Nft, names: &(String, String, String)) -> Result<(), cni_nft::Error> {
    let (iface, mac_chain, comment) = names;
    if !nft.table_exists(FAMILY, TABLE)? {
        return Ok(());
    }
    retry_transient(|| {
        let mut b = Batch::new();
        for rule in nft.list_rules(FAMILY, TABLE, PREROUTING_CHAIN)? {
            if rule.comment.as_deref() == Some(comment.as_str()) {
                b.delete_rule(FAMILY, TABLE, PREROUTING_CHAIN, rule.handle)?;
            }
        }
        // Flush both before deleting either: the iface chain jumps to the mac chain.
        let mut present = Vec::new();
        for chain in [iface, mac_chain] {
            if nft.chain_exists(FAMILY, TABLE, chain)? {
                b.flush_chain(FAMILY, TABLE, chain)?;
                present.push(chain);
            }
        }
        for chain in present {
            b.delete_chain(FAMILY, TABLE, chain)?;
        }
        nft.commit(&b)
    })
}

/// GC: removes the checks whose host veth is gone and that belong to no attachment in
/// `valid` (see the module's notes); run after the network's stale veths are removed.
pub fn gc_spoofcheck(valid: &[AttachmentId]) -> Result<(), CniError> {
    let links: Vec<String> = Handle::new()
        .and_then(|mut h| h.links())
        .or_internal("macspoofchk GC: failed to list links")?
        .into_iter()
        .map(|l| l.name)
        .collect();
    let mut nft = open_host("macspoofchk GC")?;
    let stale = retry_transient(|| stale_checks(&mut nft, valid, &links))
        .map_err(|e| nft_error("listing macspoofchk rules", e))?;
    for names in stale {
        log::info!("macspoofchk GC: removing {}", names.0);
        teardown_named(&mut nft, &names).map_err(|e| nft_error("removing macspoofchk rules", e))?;
    }
    Ok(())
}

/// The (iface chain, mac chain, comment) of every check whose `PREROUTING` rule matches a
/// host link not in `links` and whose comment is no valid attachment's.
fn stale_checks(
    nft: &mut Nft,
    valid: &[AttachmentId],
    links: &[String],
) -> Result<Vec<(String, String, String)>, cni_nft::Error> {
    if !nft.table_exists(FAMILY, TABLE)? {
        return Ok(Vec::new());
    }
    let keep: Vec<String> = valid
        .iter()
        .map(|a| names(&a.container_id, &a.ifname).2)
        .collect();
    let jumps: Vec<(u64, String)> = nft
        .list_rule_jumps(FAMILY, TABLE, PREROUTING_CHAIN)?
        .into_iter()
        .filter_map(|(rule, jump)| Some((rule.handle, jump?)))
        .collect();
    let mut out = Vec::new();
    for (rule, dev) in nft.list_rule_iifnames(FAMILY, TABLE, PREROUTING_CHAIN)? {
        let (Some(comment), Some(dev)) = (rule.comment, dev) else {
            continue;
        };
        let Some((_, iface)) = jumps.iter().find(|(h, _)| *h == rule.handle) else {
            continue;
        };
        let ours = comment.starts_with(COMMENT_PREFIX) && iface.starts_with(CHAIN_PREFIX);
        if ours && !keep.contains(&comment) && !links.contains(&dev) {
            out.push((iface.clone(), mac_chain(iface), comment));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_mac_is_an_error_before_any_kernel_call() {
        let e = setup_spoofcheck("c1", "eth0", "veth1", "zz").unwrap_err();
        assert!(e.msg.contains("invalid container MAC"), "{}", e.msg);
    }
}
