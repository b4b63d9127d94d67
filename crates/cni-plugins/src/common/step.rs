//! The end of one step of an ADD, in one line: [`end`] is where the fault-injection tests can
//! fail, panic or abort the ADD (see [`super::fault`]) and where a benchmark's phase trace
//! records the time (see [`super::phase_trace`]). An ADD therefore reads as the list of its
//! steps, each closed by `step::end(PLUGIN, STEP)?`.

use cni_types::CniError;

use super::{fault, phase_trace};

/// Marks the end of `step` of `plugin`'s ADD: an injected fault fires here first, then the
/// phase trace notes the time.
#[track_caller]
pub fn end(plugin: &str, step: &str) -> Result<(), CniError> {
    fault::inject(plugin, step)?;
    phase_trace::mark(step);
    Ok(())
}
