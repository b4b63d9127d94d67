//! Test-only fault injection for transactional ADDs: in debug builds,
//! `RCNI_TEST_FAIL_AT=PLUGIN:STEP` (e.g. `bridge:ipam`) makes [`inject`] fail at that step, so
//! integration tests can fail every step in turn and check that nothing is left behind.
//! Release builds ignore the variable.

use cni_types::CniError;

/// The environment variable naming the step to fail.
pub const FAIL_AT_VAR: &str = "RCNI_TEST_FAIL_AT";

/// Fails with "injected failure at PLUGIN:STEP" when asked to (debug builds only).
pub fn inject(plugin: &str, step: &str) -> Result<(), CniError> {
    if cfg!(debug_assertions) {
        let wanted = std::env::var(FAIL_AT_VAR).unwrap_or_default();
        if wanted == format!("{plugin}:{step}") {
            return Err(CniError::internal(format!(
                "injected failure at {plugin}:{step}"
            )));
        }
    }
    Ok(())
}
