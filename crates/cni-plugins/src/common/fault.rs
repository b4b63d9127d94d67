//! Test-only fault injection for transactional ADDs: in debug builds,
//! `RCNI_TEST_FAIL_AT=PLUGIN:STEP` (e.g. `bridge:ipam`) makes [`inject`] fail at that step, so
//! integration tests can fail every step in turn and check that nothing is left behind;
//! `RCNI_TEST_PANIC_AT=PLUGIN:STEP` panics there instead, to prove that an unwinding panic
//! runs the undo stack too; `RCNI_TEST_ABORT_AT=PLUGIN:STEP` aborts the process there, which
//! runs no undo at all, like a SIGKILL at that instant. Release builds ignore the variables.

use cni_types::CniError;

/// The environment variable naming the step to fail.
pub const FAIL_AT_VAR: &str = "RCNI_TEST_FAIL_AT";

/// The environment variable naming the step to panic at.
pub const PANIC_AT_VAR: &str = "RCNI_TEST_PANIC_AT";

/// The environment variable naming the step to abort at (a kill at a known instant).
pub const ABORT_AT_VAR: &str = "RCNI_TEST_ABORT_AT";

/// Fails with "injected failure at PLUGIN:STEP", or panics with "injected panic at
/// PLUGIN:STEP" (reported at the caller's line), or aborts, when asked to (debug builds only).
#[track_caller]
pub fn inject(plugin: &str, step: &str) -> Result<(), CniError> {
    if cfg!(debug_assertions) {
        let here = format!("{plugin}:{step}");
        if std::env::var(ABORT_AT_VAR).is_ok_and(|wanted| wanted == here) {
            std::process::abort();
        }
        if std::env::var(PANIC_AT_VAR).is_ok_and(|wanted| wanted == here) {
            panic!("injected panic at {here}");
        }
        let wanted = std::env::var(FAIL_AT_VAR).unwrap_or_default();
        if wanted == here {
            return Err(CniError::internal(format!(
                "injected failure at {plugin}:{step}"
            )));
        }
    }
    Ok(())
}
