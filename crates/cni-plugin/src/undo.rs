//! The undo stack of a transactional ADD: the one rollback shape of every plugin (the
//! failure model of docs/architecture.md, "The crash and attribution contract": a failed call
//! that is not killed undoes its own steps).
//!
//! Every step that creates something registers how to remove it again (the IPAM lease too:
//! [`crate::ipam::ipam_add_with_undo`]). If the ADD returns
//! early with an error, or panics (the workspace builds with `panic = "unwind"`), dropping the
//! stack runs the undos in reverse order; a successful ADD calls [`Undo::commit`] and
//! everything stays. Each undo action runs under `catch_unwind`: one that panics is logged as
//! a failure and the others still run, also while the stack is dropped by an unwinding panic.

use std::panic::AssertUnwindSafe;

/// One undo action: removes what a step created, or says why it could not.
type UndoFn<'a> = Box<dyn FnOnce() -> Result<(), String> + 'a>;

/// Undo actions, run last-in first-out on drop unless committed.
#[derive(Default)]
pub struct Undo<'a> {
    steps: Vec<(String, UndoFn<'a>)>,
}

impl<'a> Undo<'a> {
    pub fn new() -> Self {
        Undo { steps: Vec::new() }
    }

    /// Registers `undo` for a step described by `what` (used in log lines when it fails).
    pub fn push(
        &mut self,
        what: impl Into<String>,
        undo: impl FnOnce() -> Result<(), String> + 'a,
    ) {
        self.steps.push((what.into(), Box::new(undo)));
    }

    /// How many undo actions are registered.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The ADD succeeded: forget every undo action.
    pub fn commit(mut self) {
        self.steps.clear();
    }

    /// Runs every undo action now, in reverse order, and returns the failures.
    pub fn run(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        while let Some((what, undo)) = self.steps.pop() {
            log::info!("ADD failed: undoing {what}");
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(undo))
                .unwrap_or_else(|_| Err("the undo action panicked".to_string()));
            if let Err(e) = outcome {
                log::error!("undoing {what} failed: {e}");
                failures.push(format!("{what}: {e}"));
            }
        }
        failures
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        self.run();
    }
}

impl std::fmt::Debug for Undo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.steps.iter().map(|(w, _)| w.as_str()).collect();
        f.debug_struct("Undo").field("steps", &names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn runs_in_reverse_on_drop() {
        let log = RefCell::new(Vec::new());
        {
            let mut undo = Undo::new();
            undo.push("a", || {
                log.borrow_mut().push("a");
                Ok(())
            });
            undo.push("b", || {
                log.borrow_mut().push("b");
                Err("boom".into())
            });
            undo.push("c", || {
                log.borrow_mut().push("c");
                Ok(())
            });
            assert_eq!(undo.len(), 3);
        }
        assert_eq!(*log.borrow(), ["c", "b", "a"]);
    }

    #[test]
    fn commit_forgets_everything() {
        let ran = RefCell::new(false);
        let mut undo = Undo::new();
        undo.push("x", || {
            *ran.borrow_mut() = true;
            Ok(())
        });
        undo.commit();
        assert!(!*ran.borrow());
    }

    #[test]
    fn a_panicking_undo_action_does_not_skip_the_others() {
        let log = RefCell::new(Vec::new());
        let mut undo = Undo::new();
        undo.push("a", || {
            log.borrow_mut().push("a");
            Ok(())
        });
        undo.push("b", || panic!("undo b breaks"));
        undo.push("c", || {
            log.borrow_mut().push("c");
            Ok(())
        });
        assert_eq!(undo.run(), ["b: the undo action panicked"]);
        assert_eq!(*log.borrow(), ["c", "a"]);
    }

    #[test]
    fn an_unwinding_panic_runs_every_undo_action_even_one_that_panics() {
        let log = std::sync::Mutex::new(Vec::new());
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut undo = Undo::new();
            undo.push("a", || {
                log.lock().unwrap().push("a");
                Ok(())
            });
            undo.push("b", || panic!("undo b breaks while unwinding"));
            undo.push("c", || {
                log.lock().unwrap().push("c");
                Ok(())
            });
            panic!("the ADD step panics");
        }));
        assert!(outcome.is_err());
        assert_eq!(*log.lock().unwrap(), ["c", "a"]);
    }

    #[test]
    fn run_reports_failures_once() {
        let mut undo = Undo::new();
        undo.push("veth", || Err("gone".to_string()));
        assert_eq!(undo.run(), ["veth: gone"]);
        assert!(undo.is_empty());
        assert!(undo.run().is_empty());
    }
}
