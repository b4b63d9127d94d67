//! Running a delegate in this process instead of executing it.
//!
//! A multi-call executable (rcni-plugins) registers how to make its plugins by name. When the
//! delegate found in `CNI_PATH` is this very executable (same device and inode as
//! `/proc/self/exe`, so a link to it, or itself), it is run through the same runner a process
//! would use ([`crate::run_with`]), with the environment it would have been given (the caller's,
//! with the six `CNI_*` values of the invocation on top) and the same stdin; its stdout goes to
//! a buffer that is judged exactly like a process's output. Anything else (a wrapper script,
//! another build, the Go plugin) is executed as before.
//!
//! A panic in the delegate unwinds to the runner's `catch_unwind` and becomes the same code-999
//! answer a delegate process would print, which the caller then handles (and undoes) like any
//! delegate error; the process-wide first-panic record is restored, so the caller's own answer
//! does not change either.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::OnceLock;

use cni_invoke::{judge_output, ExecOptions, Invocation, InvokeError};

use crate::env::{Env, ProcessEnv};
use crate::plugin::Plugin;

/// Makes the plugin called `name`, if this executable contains it.
pub type Resolver = fn(&str) -> Option<Box<dyn Plugin>>;

static RESOLVER: OnceLock<Resolver> = OnceLock::new();

/// Lets delegates that resolve to this executable run in-process. Called once by a multi-call
/// executable before it runs its plugin; a second call is ignored.
pub fn register(resolver: Resolver) {
    let _ = RESOLVER.set(resolver);
}

/// (device, inode) of the running executable, once known.
fn own_executable() -> Option<(u64, u64)> {
    static OWN: OnceLock<Option<(u64, u64)>> = OnceLock::new();
    *OWN.get_or_init(|| {
        let meta = std::fs::metadata("/proc/self/exe").ok()?;
        Some((meta.dev(), meta.ino()))
    })
}

/// The plugin to run in-process for the delegate found at `found` under the name `name`:
/// only when a resolver is registered, `found` is the running executable, and it knows `name`.
fn resolve(found: &Path, name: &str) -> Option<Box<dyn Plugin>> {
    let resolver = RESOLVER.get()?;
    let meta = std::fs::metadata(found).ok()?;
    if Some((meta.dev(), meta.ino())) != own_executable() {
        return None;
    }
    resolver(name)
}

/// The environment a delegate process would see: the invocation's `CNI_*` values over ours.
struct DelegateEnv<'a> {
    invocation: [(&'static str, &'a OsStr); 6],
}

impl Env for DelegateEnv<'_> {
    fn var(&self, name: &str) -> Option<String> {
        self.var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    fn var_os(&self, name: &str) -> Option<OsString> {
        match self.invocation.iter().find(|(k, _)| *k == name) {
            Some((_, v)) => Some((*v).to_owned()),
            None => ProcessEnv.var_os(name),
        }
    }

    fn is_utf8(&self, name: &str) -> bool {
        self.var_os(name).is_none_or(|v| v.to_str().is_some())
    }
}

/// Runs the delegate `name`, found at `found`, in-process when it is this executable; `None`
/// when it has to be executed. The answer is judged as [`cni_invoke::exec_raw`] judges a
/// process: its stdout on success, its error otherwise.
pub fn run(
    found: &Path,
    name: &str,
    invocation: &Invocation,
    stdin: &[u8],
    opts: &ExecOptions,
) -> Option<Result<Vec<u8>, InvokeError>> {
    let plugin = resolve(found, name)?;
    log::debug!(
        "running {name} in-process ({} is this executable)",
        found.display()
    );
    let env = DelegateEnv {
        invocation: invocation.env(),
    };
    let mut input = stdin;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = crate::panic_hook::isolated(|| {
        crate::run_with(&*plugin, &env, &mut input, &mut stdout, &mut stderr)
    });
    // What a process exiting with `code` reports.
    let status = ExitStatus::from_raw((code & 0xff) << 8);
    Some(judge_output(found, status, stdout, stderr, opts))
}
