//! Keeping one lease alive: a thread per lease that sleeps until T1, renews with the server
//! that granted it, rebinds with any server after T2 (RFC 2131 §4.4.5), and stops when the
//! lease is released, lost (NAK or expiry: the link is set down, as Go does) or when its
//! netns or interface has disappeared. The timing decisions are the pure [`next_step`].

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::lease::{Lease, Phase};

/// RFC 2131 §4.4.5: retransmissions in RENEWING and REBINDING wait at least 60 s.
const MIN_RETRY_SECS: u64 = 60;

/// What the maintenance loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do for this long.
    Sleep(Duration),
    /// Unicast REQUEST to the granting server.
    Renew,
    /// Broadcast REQUEST to any server.
    Rebind,
    /// The lease is over.
    Expire,
}

/// The next step at `now` (Unix seconds) for `lease`, given when a failed attempt said to
/// retry (`retry_at`), never sleeping longer than `check_every` (the liveness check period).
pub fn next_step(lease: &Lease, now: u64, retry_at: Option<u64>, check_every: Duration) -> Step {
    let sleep_until = |at: u64| Step::Sleep(Duration::from_secs(at - now).min(check_every));
    match lease.phase(now) {
        Phase::Expired => Step::Expire,
        Phase::Bound => sleep_until(lease.renew_at()),
        phase => match retry_at {
            // Waiting after a failure, but never past the next phase boundary.
            Some(at) if now < at => sleep_until(at.min(match phase {
                Phase::Renewing => lease.rebind_at(),
                _ => lease.expires_at(),
            })),
            _ if phase == Phase::Renewing => Step::Renew,
            _ => Step::Rebind,
        },
    }
}

/// When to try again after a failed renewal or rebinding at `now`: half the time left until
/// T2 (renewing) or the end of the lease (rebinding), at least 60 s, never past that limit.
pub fn retry_after_failure(lease: &Lease, now: u64) -> u64 {
    let limit = match lease.phase(now) {
        Phase::Renewing | Phase::Bound => lease.rebind_at(),
        _ => lease.expires_at(),
    };
    let wait = (limit.saturating_sub(now) / 2).max(MIN_RETRY_SECS);
    (now + wait).min(limit)
}

/// Wall-clock seconds since the Unix epoch (leases outlive the daemon process).
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Sleeps for `d` unless told to stop; true when stopping (a message or a dropped sender).
pub fn sleep_or_stop(stop: &Receiver<()>, d: Duration) -> bool {
    !matches!(stop.recv_timeout(d), Err(RecvTimeoutError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn lease() -> Lease {
        // Bound at 1000: T1 at 1010, T2 at 1100, expiry at 1120.
        Lease {
            address: Ipv4Addr::new(198, 18, 0, 9),
            prefix_len: 24,
            server: Ipv4Addr::new(198, 18, 0, 1),
            routers: vec![],
            static_routes: vec![],
            classless_routes: vec![],
            bound_at: 1000,
            lease_secs: 120,
            t1_secs: 10,
            t2_secs: 100,
        }
    }

    const CHECK: Duration = Duration::from_secs(30);

    #[test]
    fn bound_sleeps_until_t1_but_wakes_for_liveness_checks() {
        let l = lease();
        assert_eq!(
            next_step(&l, 1000, None, CHECK),
            Step::Sleep(Duration::from_secs(10))
        );
        assert_eq!(
            next_step(&l, 1000, None, Duration::from_secs(3)),
            Step::Sleep(Duration::from_secs(3))
        );
    }

    #[test]
    fn renew_at_t1_rebind_at_t2_expire_at_the_end() {
        let l = lease();
        assert_eq!(next_step(&l, 1010, None, CHECK), Step::Renew);
        assert_eq!(next_step(&l, 1100, None, CHECK), Step::Rebind);
        assert_eq!(next_step(&l, 1120, None, CHECK), Step::Expire);
    }

    #[test]
    fn failures_back_off_half_the_remaining_time_at_least_a_minute_capped_at_the_limit() {
        let l = lease();
        // Renewing at 1010: T2 is 90 s away, half is 45 s, raised to 60 s.
        assert_eq!(retry_after_failure(&l, 1010), 1070);
        assert_eq!(
            next_step(&l, 1020, Some(1070), CHECK),
            Step::Sleep(Duration::from_secs(30))
        );
        assert_eq!(next_step(&l, 1070, Some(1070), CHECK), Step::Renew);
        // Close to T2 the retry is capped at T2, where rebinding starts regardless.
        assert_eq!(retry_after_failure(&l, 1080), 1100);
        assert_eq!(next_step(&l, 1100, Some(1100), CHECK), Step::Rebind);
        // Rebinding retries are capped by the end of the lease.
        assert_eq!(retry_after_failure(&l, 1105), 1120);
        assert_eq!(
            next_step(&l, 1110, Some(1120), CHECK),
            Step::Sleep(Duration::from_secs(10))
        );
        assert_eq!(next_step(&l, 1120, Some(1120), CHECK), Step::Expire);
    }

    #[test]
    fn a_long_lease_renews_after_half_its_time() {
        let mut l = lease();
        (l.t1_secs, l.t2_secs) = super::super::lease::timers(86_400, None, None);
        l.lease_secs = 86_400;
        assert_eq!(l.renew_at(), 1000 + 43_200);
        assert_eq!(
            retry_after_failure(&l, l.renew_at()),
            1000 + 43_200 + 16_200
        );
    }
}
