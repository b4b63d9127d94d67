//! The whole run's before/after diff, and what in it is shared by the network rather than
//! left by an attachment: the network's bridge (with its own addresses and routes), and
//! nf_tables objects that name none of the lab's attachments (the tables and base chains a
//! plugin keeps for every attachment of a host, as the Go plugins do: rcni's
//! `cni_plugins_masquerade` skeleton, iptables' `nat` table). Both are listed as notes;
//! every other difference fails the run.

use serde_json::Value;

use cni_attribution::AttachmentId;

use super::evidence::Record;
use super::report::{Layer, Report, Verdict};
use super::scope::{diff, Change, Scope, State};

/// Bridges the network's plugins share between attachments: DEL keeps them (as Go does).
pub fn bridges(list: &Value) -> Vec<String> {
    list.get("plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("bridge"))
        .map(|p| {
            p.get("bridge")
                .and_then(Value::as_str)
                .unwrap_or("cni0")
                .to_string()
        })
        .collect()
}

/// Strings that name one of the lab's attachments inside an nf_tables object: its container
/// ID, rcni's attachment tag, and the hash the Go plugins name per-attachment chains with
/// (`CNI-<sha512(network + ID)>`, `CNI-DN-…`; 21 hex digits are common to both).
#[derive(Debug, Default)]
pub struct Identities(Vec<String>);

impl Identities {
    /// Every attachment the traced runs name (container ID and interface).
    pub fn of(record: &Record, network: &str) -> Identities {
        let mut out = Vec::new();
        for c in record.operations.iter().flat_map(|o| &o.calls) {
            if c.container_id.is_empty() {
                continue;
            }
            let ifname = c.env.get("CNI_IFNAME").map(String::as_str).unwrap_or("");
            let id = AttachmentId::new(network, &c.container_id, ifname);
            out.push(c.container_id.clone());
            out.push(id.prefix());
            out.push(id.go_chain_hash()[..21].to_string());
        }
        out.sort();
        out.dedup();
        Identities(out)
    }

    fn named_in(&self, text: &str) -> bool {
        self.0.iter().any(|id| text.contains(id.as_str()))
    }
}

/// Splits a diff into (kept with a shared bridge, shared nf_tables objects, the rest).
fn classify(
    changes: Vec<Change>,
    bridges: &[String],
    ids: &Identities,
) -> (Vec<Change>, Vec<Change>, Vec<Change>) {
    let mut bridge = Vec::new();
    let mut nft = Vec::new();
    let mut other = Vec::new();
    for c in changes {
        if bridges.contains(&c.item.dev) {
            bridge.push(c);
        } else if c.item.kind == "nft" && !ids.named_in(&c.item.text) {
            nft.push(c);
        } else {
            other.push(c);
        }
    }
    (bridge, nft, other)
}

fn list(c: &[Change]) -> String {
    c.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn whole_run_diff(
    report: &mut Report,
    scope: &Scope,
    before: &State,
    bridges: &[String],
    ids: &Identities,
) {
    let after = match scope.capture() {
        Ok(s) => s,
        Err(e) => return report.fail(Layer::Snapshot, "the lab's scope after the run", e),
    };
    let (bridge, nft, other) = classify(diff(before, &after), bridges, ids);
    report.check(
        Layer::Snapshot,
        "links, addresses, routes, nft ruleset, leases, tuning backups and cache entries equal before and after the run",
        other.is_empty(),
        if other.is_empty() {
            format!("{} objects compared", after.len())
        } else {
            format!("differences: {}", list(&other))
        },
    );
    if !bridge.is_empty() {
        report.record(
            Layer::Snapshot,
            format!(
                "the network's shared bridge {} is kept, as Go does",
                bridges.join(", ")
            ),
            Verdict::Note,
            list(&bridge),
        );
    }
    if !nft.is_empty() {
        report.record(
            Layer::Snapshot,
            "nf_tables objects that name no attachment (kept for every attachment of the host) are kept",
            Verdict::Note,
            list(&nft),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::scope::Item;
    use super::*;

    fn change(kind: &'static str, dev: &str, text: &str) -> Change {
        Change {
            sign: '+',
            item: Item {
                kind,
                dev: dev.into(),
                text: text.into(),
            },
        }
    }

    #[test]
    fn shared_bridges_are_the_bridge_plugins_bridges() {
        let list = serde_json::json!({"plugins": [
            {"type": "bridge", "bridge": "br9"},
            {"type": "bridge"},
            {"type": "ptp"},
        ]});
        assert_eq!(bridges(&list), ["br9", "cni0"]);
    }

    #[test]
    fn only_what_names_no_attachment_is_shared() {
        let id = AttachmentId::new("n", "cid1", "eth0");
        let ids = Identities(vec![
            "cid1".into(),
            id.prefix(),
            id.go_chain_hash()[..21].to_string(),
        ]);
        let go_chain = id.go_masq_chain();
        let (bridge, nft, other) = classify(
            vec![
                change("address", "br0", "198.18.0.1/24 on br0"),
                change("nft", "", "table inet cni_plugins_masquerade {"),
                change("nft", "", &format!("table ip nat / chain {go_chain} {{")),
                change(
                    "nft",
                    "",
                    &format!(
                        "table inet t / chain c / accept comment \"{}\"",
                        id.comment()
                    ),
                ),
                change("link", "veth1", "veth1 kind=veth master=- mac=x"),
            ],
            &["br0".into()],
            &ids,
        );
        assert_eq!(bridge.len(), 1);
        assert_eq!(nft.len(), 1, "{nft:?}");
        assert_eq!(
            other.len(),
            3,
            "a Go chain, a tagged rule and a veth: {other:?}"
        );
    }
}
