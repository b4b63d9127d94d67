//! The retry policy for dumps a concurrent change interrupted.
//!
//! The kernel sets `NLM_F_DUMP_INTR` on a dump whose table changed while it was being read:
//! the listing may miss or repeat objects, so it is read again. With many pods set up or torn
//! down at once the link table and the ruleset change constantly (sixteen pods tearing down
//! interrupted five immediate retries in a row), so retries are many and paced.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many times an interrupted dump is attempted before giving up.
pub const DUMP_ATTEMPTS: usize = 40;

/// What one dump attempt gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dump<T> {
    /// Every object, consistently listed.
    Complete(T),
    /// The kernel flagged the dump `NLM_F_DUMP_INTR`.
    Interrupted,
}

/// Every attempt of a dump was interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpInterrupted {
    /// What was being listed, for the error message.
    pub what: String,
    pub attempts: usize,
}

impl fmt::Display for DumpInterrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: dump interrupted by concurrent changes {} times",
            self.what, self.attempts
        )
    }
}

impl std::error::Error for DumpInterrupted {}

/// The pause before retry number `attempt + 1`: half a millisecond more per attempt, up to
/// 5 ms, plus `jitter_micros` (under a millisecond).
fn pause(attempt: usize, jitter_micros: u64) -> Duration {
    let step = attempt.min(10) as u64 * 500;
    Duration::from_micros(step + jitter_micros)
}

/// Waits a little longer after each interrupted dump, jittered by the clock's nanoseconds so
/// that concurrent plugins retrying the same dump do not collide again in lockstep.
pub fn pause_before_retry(attempt: usize) {
    let jitter = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos() % 1000));
    std::thread::sleep(pause(attempt, jitter));
}

/// Runs `attempt` until it returns a complete dump, pausing between attempts; after
/// [`DUMP_ATTEMPTS`] interrupted ones the error is [`DumpInterrupted`] (converted into the
/// caller's error type). An error of an attempt ends the dump at once.
pub fn retry_interrupted_dump<T, E: From<DumpInterrupted>>(
    what: &str,
    mut attempt: impl FnMut() -> Result<Dump<T>, E>,
) -> Result<T, E> {
    for n in 0..DUMP_ATTEMPTS {
        match attempt()? {
            Dump::Complete(items) => return Ok(items),
            Dump::Interrupted => {
                log::debug!("{what}: dump interrupted by a concurrent change, retrying");
                pause_before_retry(n);
            }
        }
    }
    Err(E::from(DumpInterrupted {
        what: what.to_string(),
        attempts: DUMP_ATTEMPTS,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::*;
    use crate::fake::{self, FakeTransport};
    use crate::{split, Connection};

    #[derive(Debug, PartialEq)]
    enum TestError {
        Io(String),
        Interrupted(DumpInterrupted),
    }

    impl From<DumpInterrupted> for TestError {
        fn from(e: DumpInterrupted) -> Self {
            TestError::Interrupted(e)
        }
    }

    /// A minimal dump over a connection: the message types of the reply, flagged or not.
    fn dump_types(conn: &mut Connection) -> Result<Vec<u16>, TestError> {
        retry_interrupted_dump("test objects", || {
            let seq = conn.next_seq();
            conn.send(&fake::header(NLMSG_HDRLEN, 0x12, NLM_F_REQUEST, seq))
                .map_err(|e| TestError::Io(e.to_string()))?;
            let data = conn.recv().map_err(|e| TestError::Io(e.to_string()))?;
            let msgs = split(&data).map_err(|e| TestError::Io(e.to_string()))?;
            if msgs.iter().any(|m| m.flags & NLM_F_DUMP_INTR != 0) {
                return Ok(Dump::Interrupted);
            }
            Ok(Dump::Complete(msgs.iter().map(|m| m.msg_type).collect()))
        })
    }

    fn object(seq: u32, interrupted: bool) -> Vec<u8> {
        let flags = NLM_F_MULTIPART | if interrupted { NLM_F_DUMP_INTR } else { 0 };
        let mut reply = fake::header(NLMSG_HDRLEN, 0x10, flags, seq);
        reply.extend(fake::done(seq));
        reply
    }

    #[test]
    fn interrupted_dumps_are_retried_until_complete() {
        let fake = FakeTransport::new();
        fake.queue_for_last_request(|seq| object(seq, true));
        fake.queue_for_last_request(|seq| object(seq, true));
        fake.queue_for_last_request(|seq| object(seq, false));
        let mut conn = Connection::new(Box::new(fake.clone()));
        assert_eq!(dump_types(&mut conn).unwrap(), [0x10, NLMSG_DONE]);
        // A fresh sequence number per attempt.
        let seqs: Vec<u32> = fake
            .sent()
            .iter()
            .map(|d| split(d).unwrap()[0].seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
    }

    #[test]
    fn a_dump_interrupted_every_time_is_given_up_after_the_limit() {
        let fake =
            FakeTransport::with_responder(|sent| vec![object(split(sent).unwrap()[0].seq, true)]);
        let mut conn = Connection::new(Box::new(fake.clone()));
        let err = dump_types(&mut conn).unwrap_err();
        assert_eq!(
            err,
            TestError::Interrupted(DumpInterrupted {
                what: "test objects".into(),
                attempts: DUMP_ATTEMPTS
            })
        );
        assert_eq!(fake.sent().len(), DUMP_ATTEMPTS);
        assert_eq!(fake.pending_replies(), 0);
    }

    #[test]
    fn an_attempt_that_fails_ends_the_dump() {
        let fake = FakeTransport::new();
        fake.queue_for_last_request(|seq| object(seq, true));
        let mut conn = Connection::new(Box::new(fake.clone()));
        // The second attempt finds no reply queued.
        assert!(matches!(dump_types(&mut conn), Err(TestError::Io(_))));
        assert_eq!(fake.sent().len(), 2);
    }

    #[test]
    fn pauses_grow_to_five_milliseconds_plus_jitter() {
        assert_eq!(pause(0, 0), Duration::ZERO);
        assert_eq!(pause(1, 0), Duration::from_micros(500));
        assert_eq!(pause(10, 999), Duration::from_micros(5_999));
        assert_eq!(pause(39, 0), Duration::from_millis(5));
    }
}
