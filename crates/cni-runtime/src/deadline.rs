//! One deadline per runtime operation. A chain of N plugins shares the operation's timeout
//! instead of getting it N times: a runtime such as containerd bounds the whole ADD, so a
//! chain that keeps starting plugins after its budget is spent only delays the caller's own
//! timeout and leaves more to undo.

use std::time::{Duration, Instant};

/// When an operation's budget runs out; `None` never does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    budget: Option<Duration>,
    at: Option<Instant>,
}

/// The budget was spent before the next plugin could start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired {
    pub budget: Duration,
}

impl Deadline {
    /// Starts the clock for an operation with this budget.
    pub fn start(budget: Option<Duration>) -> Self {
        Deadline {
            budget,
            at: budget.map(|b| Instant::now() + b),
        }
    }

    /// The time the next plugin may take: what is left of the budget. A spent budget is an
    /// error, so no plugin is started only to be killed at once.
    pub fn left(&self) -> Result<Option<Duration>, Expired> {
        match (self.at, self.budget) {
            (Some(at), Some(budget)) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    Err(Expired { budget })
                } else {
                    Ok(Some(left))
                }
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_budget_never_expires() {
        assert_eq!(Deadline::start(None).left(), Ok(None));
    }

    #[test]
    fn the_budget_shrinks_and_then_expires() {
        let d = Deadline::start(Some(Duration::from_millis(50)));
        let first = d.left().unwrap().unwrap();
        assert!(first <= Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            d.left(),
            Err(Expired {
                budget: Duration::from_millis(50)
            })
        );
    }
}
