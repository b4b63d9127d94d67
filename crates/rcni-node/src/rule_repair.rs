//! Automatic repair of the node's nf_tables rules: the agent's masquerade table
//! ([`crate::masq`]) and the rules rcni's plugins made for the attachments in the runtime's
//! result cache (port mappings, ipMasq, firewall, macspoofchk), after something else on the
//! node removed them (`nft flush ruleset`, `iptables -F`, a firewalld reload).
//!
//! A thread of its own (blocking kernel work, off the agent's event loop) listens to the
//! namespace's nf_tables notifications ([`cni_nft::RulesetMonitor`]); after a removal (outside
//! the policy table, which the policy worker keeps) it waits
//! until the ruleset has been quiet for [`SETTLE`] (a flush or a reload is many messages, and
//! a plugin's DEL should finish before anything is looked at), then runs a round: the masquerade
//! table through [`masq::install`] and the attachments through `cni_runtime`'s repair, the
//! code of `rcni repair`. Both add only what is missing; the notifications of a round's own
//! changes are dropped after it. Rounds are at least [`MIN_GAP`] apart (a round runs
//! each rcni plugin of each cached attachment once), and one runs every [`FALLBACK`] without
//! notifications (lost ones, a socket that could not be opened).
//!
//! A pod's DEL removes rules too: the round that follows finds its cache entry gone (the
//! runtime removes it after the chain's DEL) unless the DEL is still running after
//! [`SETTLE`]; rules put back then are the plugins' GC's to remove (rcni's own runtime holds
//! the network lock through a DEL, which the repair takes too).

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tokio::sync::watch;

use cni_nft::RulesetMonitor;
use cni_runtime::repair::{PluginRepair, RepairMode};
use cni_runtime::Runtime;

use crate::health::{lock, SharedHealth};
use crate::masq;

/// Quiet time after the last notification before a round.
const SETTLE: Duration = Duration::from_millis(100);
/// The longest a stream of notifications delays a round.
const MAX_DELAY: Duration = Duration::from_millis(500);
/// How often the thread looks at the stop signal.
const TICK: Duration = Duration::from_millis(250);
/// The shortest time between the end of a round and the start of the next.
const MIN_GAP: Duration = Duration::from_millis(500);
/// Time between rounds without notifications.
const FALLBACK: Duration = Duration::from_secs(60);

/// What is repaired, and where it is described.
#[derive(Debug, Clone)]
pub struct RuleRepairConfig {
    /// The cluster networks of the agent's masquerade table.
    pub networks: Vec<IpNet>,
    /// The runtime's libcni cache directory.
    pub cache_dir: PathBuf,
    /// Where the plugins are.
    pub bin_dir: PathBuf,
}

/// Starts the repair thread in the calling thread's namespace; it ends when `shutdown` turns
/// true.
pub fn spawn(
    cfg: RuleRepairConfig,
    health: SharedHealth,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("rule-repair".into())
        .spawn(move || watch_and_repair(&cfg, &health, &shutdown))
}

fn watch_and_repair(
    cfg: &RuleRepairConfig,
    health: &SharedHealth,
    shutdown: &watch::Receiver<bool>,
) {
    // The policy table is the policy worker's, which deletes elements and rules in it at
    // every change and replaces it whole when it finds it gone: its removals are no cause
    // for a round (that would run every plugin of every attachment after each change).
    let opened = RulesetMonitor::open().map(|m| m.ignoring_tables(&[cni_policy::nft::TABLE]));
    let mut monitor = match opened {
        Ok(m) => Some(m),
        Err(e) => {
            log::warn!(
                "rule repair: no nf_tables notifications ({e}); checking every {} s",
                FALLBACK.as_secs()
            );
            None
        }
    };
    // What went missing while no agent ran (the subscription above is already listening).
    counted_round(cfg, health, Instant::now());
    let mut last_round = Instant::now();
    while !*shutdown.borrow() {
        let changed = match monitor.as_mut().map(|m| m.wait(TICK)) {
            Some(Ok(n)) => n > 0,
            Some(Err(e)) => {
                log::warn!("rule repair: reading nf_tables notifications: {e}");
                std::thread::sleep(TICK);
                false
            }
            None => {
                std::thread::sleep(TICK);
                false
            }
        };
        if !changed && last_round.elapsed() < FALLBACK {
            continue;
        }
        let first = Instant::now();
        if changed {
            settle(monitor.as_mut(), first);
        }
        std::thread::sleep(MIN_GAP.saturating_sub(last_round.elapsed()));
        counted_round(cfg, health, first);
        last_round = Instant::now();
        // The round's own replacements: what else came meanwhile, FALLBACK catches.
        if let Some(m) = monitor.as_mut() {
            let _ = m.wait(Duration::ZERO);
        }
    }
}

/// A [`round`], logged (with the time since `first`, when the change was seen) and counted.
fn counted_round(cfg: &RuleRepairConfig, health: &SharedHealth, first: Instant) {
    let restored = round(cfg);
    if restored > 0 {
        log::info!(
            "rule repair: restored {restored} object(s) {} ms after the change was seen",
            first.elapsed().as_millis()
        );
        lock(health).rule_repairs += restored as u64;
    }
}

/// Waits until no notification came for [`SETTLE`], at most [`MAX_DELAY`] after `first`.
fn settle(monitor: Option<&mut RulesetMonitor>, first: Instant) {
    let Some(monitor) = monitor else { return };
    while first.elapsed() < MAX_DELAY {
        match monitor.wait(SETTLE) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// One round: the masquerade table, then every cached attachment. Returns how many things
/// were restored (the table counts one, each restored item of an attachment one).
pub fn round(cfg: &RuleRepairConfig) -> usize {
    let mut restored = 0;
    match masq::install(&cfg.networks) {
        Ok(true) => {
            log::info!(
                "rule repair: the masquerade table {} was put back",
                masq::TABLE
            );
            restored += 1;
        }
        Ok(false) => {}
        Err(e) => log::warn!("rule repair: masquerade table: {e}"),
    }
    let rt = Runtime::new(vec![cfg.bin_dir.clone()], &cfg.cache_dir);
    for att in rt.repair(None, RepairMode::Repair) {
        let who = att.who();
        for (kind, outcome) in &att.plugins {
            match outcome {
                PluginRepair::Restored(items) => {
                    for item in items {
                        log::info!("rule repair: {who}: {kind}: restored {item}");
                    }
                    restored += items.len();
                }
                PluginRepair::Failed(e) => {
                    log::warn!("rule repair: {who}: {kind}: {e}")
                }
                PluginRepair::NotRcni(_) => {}
            }
        }
    }
    restored
}
