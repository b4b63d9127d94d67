//! `rcni repair`: puts back the nf_tables rules rcni's plugins made for the cached
//! attachments, after the host's firewall (a flush, a reload) removed them. The runtime
//! (`cni_runtime::repair`) asks each rcni plugin of each cached chain, which re-runs the rule
//! part of its own ADD for what its CHECK finds missing; this module prints the report.

use serde_json::{json, Value};

use cni_runtime::repair::{AttachmentRepair, PluginRepair, RepairMode};

use crate::cli::{Global, RepairArgs};
use crate::failure::Failure;
use crate::output::print_json;

/// Runs the repair; exit status 1 when a plugin failed.
pub fn run(g: &Global, a: &RepairArgs) -> Result<(), Failure> {
    let rt = crate::setup::runtime(g);
    let reports = rt.repair(a.network.as_deref(), RepairMode::Repair);
    if g.json {
        let list: Vec<Value> = reports.iter().map(to_json).collect();
        print_json(&json!({"attachments": list}));
    } else {
        if reports.is_empty() {
            println!("no cached attachments");
        }
        for r in &reports {
            print_text(r);
        }
    }
    if reports.iter().any(AttachmentRepair::failed) {
        return Err(Failure::Reported);
    }
    Ok(())
}

fn print_text(r: &AttachmentRepair) {
    let who = r.who();
    if let Some(why) = &r.skipped {
        println!("{who}: not repaired: {why}");
        return;
    }
    let verdict = if r.failed() {
        "repair failed"
    } else if r.restored_any() {
        "restored"
    } else {
        "nothing missing"
    };
    println!("{who}: {verdict}");
    for (kind, p) in &r.plugins {
        match p {
            PluginRepair::Restored(list) => {
                for item in list {
                    println!("  {kind}: restored {item}");
                }
            }
            PluginRepair::NotRcni(path) => {
                println!("  {kind}: left alone, not an rcni plugin ({path})")
            }
            PluginRepair::Failed(e) => println!("  {kind}: failed: {e}"),
        }
    }
}

fn to_json(r: &AttachmentRepair) -> Value {
    let plugins: Vec<Value> = r
        .plugins
        .iter()
        .map(|(kind, p)| match p {
            PluginRepair::Restored(items) => json!({"type": kind, "restored": items}),
            PluginRepair::NotRcni(path) => json!({"type": kind, "leftAlone": path}),
            PluginRepair::Failed(e) => json!({"type": kind, "error": e}),
        })
        .collect();
    json!({
        "network": r.id.network,
        "containerId": r.id.container_id,
        "ifName": r.id.ifname,
        // Read from the cache entry's JSON text, so it is UTF-8 and serializes.
        "netns": r.netns,
        "skipped": r.skipped,
        "restoredAny": r.restored_any(),
        "plugins": plugins,
    })
}
