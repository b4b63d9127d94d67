//! The reader of the flow log group: a thread of its own (the event loop never waits on the
//! kernel) that binds the group in the agent's namespace, takes the records as they come,
//! and once a second reads the program's counters around its rate limits to count what the
//! kernel held back. A group it cannot bind (another reader holds it) or a socket that
//! fails is tried again every few seconds; the group is unbound when the agent stops, and
//! released by the kernel with the socket if the agent is killed.

use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use cni_nft::nflog::{NflogGroup, NflogOptions};
use cni_nft::{Family, Nft};
use cni_policy::nft::flow_log::{ALLOWED_COUNTERS, DENIED_COUNTERS, FLOW_LOG_GROUP};
use cni_policy::nft::TABLE;
use tokio::sync::watch;

use super::SharedFlows;

/// How long one wait for records lasts: how soon a stop is noticed.
const WAIT: Duration = Duration::from_millis(200);
/// How often the counters are read.
const COUNTERS_EVERY: Duration = Duration::from_secs(1);
/// The pause before binding again after a failure.
const RETRY: Duration = Duration::from_secs(3);

/// Starts the reader; it runs until `shutdown` turns true.
pub fn spawn(
    flows: SharedFlows,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("flow-log".into())
        .spawn(move || run(&flows, &shutdown))
}

fn stopped(shutdown: &watch::Receiver<bool>) -> bool {
    // A dropped sender means the agent is gone too.
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

fn run(flows: &SharedFlows, shutdown: &watch::Receiver<bool>) {
    let mut suppressed = Suppressed::default();
    let mut complained = false;
    while !stopped(shutdown) {
        match NflogGroup::bind(FLOW_LOG_GROUP, &NflogOptions::default()) {
            Ok(group) => {
                complained = false;
                log::info!("flow log: reading nflog group {FLOW_LOG_GROUP}");
                flows.stats.bound.store(1, Ordering::Relaxed);
                if let Err(e) = read(flows, group, shutdown, &mut suppressed) {
                    log::warn!("flow log: {e}; binding again");
                }
                flows.stats.bound.store(0, Ordering::Relaxed);
            }
            Err(e) if !complained => {
                log::warn!("flow log: cannot bind nflog group {FLOW_LOG_GROUP}: {e}; retrying");
                complained = true;
            }
            Err(_) => {}
        }
        let until = Instant::now() + RETRY;
        while Instant::now() < until && !stopped(shutdown) {
            std::thread::sleep(WAIT);
        }
    }
}

/// Takes records until `shutdown` or an error of the socket.
fn read(
    flows: &SharedFlows,
    mut group: NflogGroup,
    shutdown: &watch::Receiver<bool>,
    suppressed: &mut Suppressed,
) -> Result<(), cni_nft::Error> {
    let mut nft: Option<Nft> = None;
    let mut counted = Instant::now() - COUNTERS_EVERY;
    while !stopped(shutdown) {
        let got = group.receive(WAIT)?;
        if !got.records.is_empty() {
            flows.take(&got.records, SystemTime::now());
        }
        if got.lost > 0 || got.overflows > 0 {
            flows.stats.lost.fetch_add(got.lost, Ordering::Relaxed);
            log::debug!(
                "flow log: {} records lost ({} overflows)",
                got.lost,
                got.overflows
            );
        }
        if counted.elapsed() >= COUNTERS_EVERY {
            counted = Instant::now();
            if let Err(e) = suppressed.read(&mut nft, flows) {
                log::debug!("flow log: read the rate limit counters: {e}");
                nft = None;
            }
        }
    }
    Ok(())
}

/// The counters around the program's rate limits, as last read.
#[derive(Debug, Default)]
struct Suppressed {
    last: [(u64, u64); 2],
}

impl Suppressed {
    /// Reads both pairs of counters and adds what the limits held back since the last read.
    fn read(&mut self, nft: &mut Option<Nft>, flows: &SharedFlows) -> Result<(), cni_nft::Error> {
        let nft = match nft {
            Some(n) => n,
            None => nft.insert(Nft::new()?),
        };
        for (i, [seen, sent]) in [DENIED_COUNTERS, ALLOWED_COUNTERS].into_iter().enumerate() {
            let read = |nft: &mut Nft, name| -> Result<u64, cni_nft::Error> {
                Ok(nft
                    .counter(Family::Inet, TABLE, name)?
                    .map_or(0, |c| c.packets))
            };
            let now = (read(nft, seen)?, read(nft, sent)?);
            let held = held_back(self.last[i], now);
            self.last[i] = now;
            let total = if i == 0 {
                &flows.stats.suppressed_denied
            } else {
                &flows.stats.suppressed_allowed
            };
            total.fetch_add(held, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// What a limit held back between two reads of its (seen, sent) counters. Counters that went
/// down were made anew (the program replaced its table): everything they hold is new.
fn held_back(before: (u64, u64), now: (u64, u64)) -> u64 {
    let reset = now.0 < before.0 || now.1 < before.1;
    let (seen, sent) = if reset {
        now
    } else {
        (now.0 - before.0, now.1 - before.1)
    };
    seen.saturating_sub(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_limit_held_back_between_reads_and_across_a_new_table() {
        assert_eq!(held_back((0, 0), (100, 10)), 90);
        assert_eq!(held_back((100, 10), (150, 20)), 40);
        assert_eq!(held_back((150, 20), (150, 20)), 0);
        // The table was replaced: its counters started again.
        assert_eq!(held_back((150, 20), (30, 5)), 25);
    }
}
