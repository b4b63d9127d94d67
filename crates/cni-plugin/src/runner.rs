//! The runner: from environment and stdin to stdout and an exit code (SPEC.md, Section 2:
//! Execution Protocol, with the order of checks of Go's `pkg/skel/skel.go`).
//!
//! [`run`] wires the real process; [`run_with`] takes every input and output as a seam so the
//! whole protocol can be tested without processes. Nothing but the result, the VERSION answer or
//! the error object is ever written to stdout; diagnostics go to the log (stderr or a file).

use std::io::{self, Read, Write};

use cni_types::{pretty_json, CniError, SpecVersion, VersionInfo};

use crate::cmd_args::{parse_conf, parse_prev_result, CmdArgs};
use crate::command::Command;
use crate::env::{Env, ProcessEnv};
use crate::env_vars::{netns_override, read_env, EnvVars};
use crate::own_netns::ensure_not_own_netns;
use crate::plugin::Plugin;
use crate::version_gate::negotiate;
use crate::{logger, panic_hook, version_stdin};

/// Runs `plugin` as the process: installs logging and the panic hook, reads the real
/// environment and stdin, writes stdout. Returns the exit code for `std::process::exit`.
pub fn run(plugin: &dyn Plugin) -> i32 {
    logger::init(&program_name());
    panic_hook::install();
    let env = ProcessEnv;
    let mut stdin: Box<dyn Read> = if env.var("CNI_COMMAND").as_deref() == Some("VERSION") {
        Box::new(io::Cursor::new(version_stdin::read()))
    } else {
        Box::new(io::stdin().lock())
    };
    let mut stdout = unbuffered_stdout();
    let mut stderr = io::stderr();
    run_with(plugin, &env, &mut stdin, &mut *stdout, &mut stderr)
}

/// Runs, in an executable holding several plugins and run under its own name, the plugin
/// `plugin_of` gives for the request config's `type`: the runtime sends rcni's own commands
/// ([`Command::is_rcni_own`]) that way. A config without a type this executable holds (or
/// not JSON at all) is answered by a plugin with no capability of its own, so the runner
/// reports a bad config as for any plugin and a repair answers that no rules are owned.
pub fn run_by_config_type(plugin_of: &dyn Fn(&str) -> Option<Box<dyn Plugin>>) -> i32 {
    logger::init(&program_name());
    panic_hook::install();
    // Read once here for the type; the runner reads the same bytes (and applies its limit).
    let mut bytes = Vec::new();
    let read = io::stdin()
        .lock()
        .take(STDIN_LIMIT + 1)
        .read_to_end(&mut bytes);
    let plugin_type = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| Some(v.get("type")?.as_str()?.to_string()))
        .unwrap_or_default();
    let plugin = plugin_of(&plugin_type).unwrap_or_else(|| Box::new(NotHeld(plugin_type)));
    let mut stdin: Box<dyn Read> = match read {
        Ok(_) => Box::new(io::Cursor::new(bytes)),
        Err(e) => Box::new(FailedRead(Some(e))),
    };
    let mut stdout = unbuffered_stdout();
    let mut stderr = io::stderr();
    run_with(&*plugin, &ProcessEnv, &mut stdin, &mut *stdout, &mut stderr)
}

/// Stdin that could not be read: the runner gets the same error (code 5).
struct FailedRead(Option<io::Error>);

impl Read for FailedRead {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(self
            .0
            .take()
            .unwrap_or_else(|| io::Error::other("stdin could not be read")))
    }
}

/// The plugin for a config `type` the executable does not hold: every spec command is
/// refused (code 7); rcni's own commands get the trait's defaults.
struct NotHeld(String);

impl NotHeld {
    fn refuse(&self) -> CniError {
        CniError::invalid_config(format!(
            "this executable holds no plugin of type {:?}",
            self.0
        ))
    }
}

impl Plugin for NotHeld {
    fn add(&self, _: &CmdArgs) -> Result<cni_types::CniResult, CniError> {
        Err(self.refuse())
    }
    fn del(&self, _: &CmdArgs) -> Result<(), CniError> {
        Err(self.refuse())
    }
    fn check(&self, _: &CmdArgs) -> Result<(), CniError> {
        Err(self.refuse())
    }
    fn status(&self, _: &CmdArgs) -> Result<(), CniError> {
        Err(self.refuse())
    }
    fn gc(&self, _: &CmdArgs) -> Result<(), CniError> {
        Err(self.refuse())
    }
}

/// Stdout as a handle of our own without std's line buffering, so the answer (always written
/// with one `write_all`) leaves in one write(2): the line-buffered stdout wrote a pretty result
/// up to its last newline and the closing brace in a second write, and each write can wake the
/// runtime reading the pipe. Nothing else in the process writes to stdout.
fn unbuffered_stdout() -> Box<dyn Write> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() {
            return Box::new(std::fs::File::from(fd));
        }
    }
    // Not locked for the whole run, so nothing else in the process can block on it.
    Box::new(io::stdout())
}

/// The basename of argv[0], for log lines.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cni-plugin".into())
}

/// The whole protocol over injectable seams. Returns the exit code: 0 on success, 1 on error
/// (the error object has then been written to `stdout`).
pub fn run_with(
    plugin: &dyn Plugin,
    env: &dyn Env,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    // The version errors are stamped with: the request's once it is known.
    let mut stamp = SpecVersion::CURRENT;
    // A panic unwinds to here (release builds too, `panic = "unwind"`): the undo stacks it
    // passed have run, and it becomes a code-999 answer. A panic on a worker thread that the
    // plugin swallowed answers the same: the call did not do what it was asked.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dispatch(plugin, env, stdin, stderr, &mut stamp)
    }));
    let outcome = match (outcome, panic_hook::first_panic()) {
        (Ok(outcome), None) => outcome,
        (Ok(_), Some(location)) => Err(panic_hook::panic_error(&location)),
        (Err(_payload), location) => Err(panic_hook::panic_error(
            location.as_deref().unwrap_or("unknown location"),
        )),
    };
    match outcome {
        Ok(None) => 0,
        Ok(Some(text)) => match write_all(stdout, &text) {
            Ok(()) => 0,
            Err(e) => {
                log::error!("cannot write the result to stdout: {e}");
                1
            }
        },
        Err(err) => {
            log::warn!("failed: code {}: {err}", err.code);
            let mut stamped = err;
            stamped.cni_version = Some(stamp.to_string());
            if let Err(e) = write_all(stdout, &pretty_json(&stamped)) {
                log::error!("cannot write the error to stdout: {e}");
            }
            1
        }
    }
}

fn write_all(out: &mut dyn Write, text: &str) -> io::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Everything up to the text for stdout (`None`: nothing to print).
fn dispatch(
    plugin: &dyn Plugin,
    env: &dyn Env,
    stdin: &mut dyn Read,
    stderr: &mut dyn Write,
    stamp: &mut SpecVersion,
) -> Result<Option<String>, CniError> {
    // 1. Environment.
    let vars = match read_env(env) {
        Ok(vars) => vars,
        Err(e) => {
            let about = plugin.about();
            if env.var("CNI_COMMAND").unwrap_or_default().is_empty() && !about.is_empty() {
                print_about(stderr, &about, &plugin.supported_versions());
                return Ok(None);
            }
            return Err(e);
        }
    };
    // VERSION answers before any config check.
    if Command::parse(&vars.command) == Some(Command::Version) {
        let mut body = Vec::new();
        // A stdin we cannot read only means we do not know the caller's version.
        let _ = stdin.read_to_end(&mut body);
        return Ok(Some(version_answer(&body, &plugin.supported_versions())));
    }
    let skip_netns_guard = netns_override(&vars.netns_override);
    let args = request(plugin, vars, stdin, stamp)?;
    call(plugin, &args, skip_netns_guard)
}

/// Steps 2 to 5 of the protocol: stdin (code 5), the config (codes 6, 7), the command, the
/// version gates and the reconciliation of `prevResult`. `stamp` follows the version the
/// error would be reported in.
fn request(
    plugin: &dyn Plugin,
    vars: EnvVars,
    stdin: &mut dyn Read,
    stamp: &mut SpecVersion,
) -> Result<CmdArgs, CniError> {
    let bytes = read_capped(stdin)?;
    let conf = parse_conf(&bytes)?;
    *stamp = known_or_current(&conf.cni_version);

    // Unknown commands are reported after the config checks, as Go does.
    let Some(command) = Command::parse(&vars.command) else {
        return Err(CniError::invalid_environment(format!(
            "unknown CNI_COMMAND: {}",
            vars.command
        )));
    };
    let version = negotiate(command, &conf.cni_version, &plugin.supported_versions())?;
    *stamp = version;

    // One GC policy for every plugin: a GC without a valid list would collect everything.
    if command == Command::Gc && conf.valid_attachments.is_none() {
        return Err(CniError::invalid_config(
            "GC request without cni.dev/valid-attachments: refusing to collect every attachment",
        ));
    }

    let prev_result = match parse_prev_result(&conf, version) {
        Ok(prev) => prev,
        // DEL is best effort: an unusable prevResult must not block cleanup.
        Err(e) if command == Command::Del => {
            log::warn!("DEL ignores an unusable prevResult: {e}");
            None
        }
        Err(e) => return Err(e),
    };
    let args = CmdArgs {
        command,
        container_id: vars.container_id,
        netns: vars.netns,
        ifname: vars.ifname,
        args: vars.args,
        path: vars.path,
        stdin: bytes,
        conf,
        version,
        prev_result,
    };
    log::debug!(
        "{command} container={} netns={:?} ifname={} network={} version={version}",
        args.container_id,
        args.netns,
        args.ifname,
        args.conf.name
    );
    Ok(args)
}

/// Step 6: the plugin's callback. The own-netns check runs *before* ADD and DEL so a plugin
/// can never change the namespace it runs in (Go checks after the callback).
fn call(
    plugin: &dyn Plugin,
    args: &CmdArgs,
    skip_netns_guard: bool,
) -> Result<Option<String>, CniError> {
    let guard_netns = || {
        if skip_netns_guard {
            Ok(())
        } else {
            ensure_not_own_netns(&args.netns)
        }
    };
    let version = args.version;
    match args.command {
        Command::Add => {
            guard_netns()?;
            let result = plugin.add(args)?;
            let text = result.to_json_pretty(version).map_err(|e| {
                CniError::internal(format!("cannot render the result as {version}: {e}"))
            })?;
            Ok(Some(text))
        }
        Command::Del => {
            guard_netns()?;
            plugin.del(args).map(|()| None)
        }
        Command::Check => plugin.check(args).map(|()| None),
        Command::Status => plugin.status(args).map(|()| None),
        Command::Gc => plugin.gc(args).map(|()| None),
        Command::Repair(mode) => plugin.repair(args, mode).map(|a| Some(a.to_json())),
        Command::Version => Ok(Some(version_answer(b"", &plugin.supported_versions()))),
    }
}

/// The most stdin a request may carry; real configs are kilobytes.
pub const STDIN_LIMIT: u64 = 16 * 1024 * 1024;

/// Reads stdin up to [`STDIN_LIMIT`]; more is a code-5 error, not an unbounded allocation.
fn read_capped(stdin: &mut dyn Read) -> Result<Vec<u8>, CniError> {
    let mut bytes = Vec::new();
    stdin
        .take(STDIN_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CniError::io(format!("error reading from stdin: {e}")))?;
    if bytes.len() as u64 > STDIN_LIMIT {
        return Err(CniError::io(format!(
            "error reading from stdin: the config is larger than {} MiB",
            STDIN_LIMIT / (1024 * 1024)
        )));
    }
    Ok(bytes)
}

/// The request's version if it is one of the seven known ones, else the current one.
fn known_or_current(version: &str) -> SpecVersion {
    SpecVersion::parse(version)
        .ok()
        .filter(|v| v.is_known())
        .unwrap_or(SpecVersion::CURRENT)
}

/// `{"cniVersion":<request's version>,"supportedVersions":[...]}` plus a newline, compact as
/// Go prints it. An unreadable or unknown request version answers with 1.1.0.
fn version_answer(stdin: &[u8], supported: &[SpecVersion]) -> String {
    let requested = serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| v.get("cniVersion")?.as_str().map(known_or_current))
        .unwrap_or(SpecVersion::CURRENT);
    let info = VersionInfo::new(requested, supported);
    let mut text = serde_json::to_string(&info).unwrap_or_default();
    text.push('\n');
    text
}

/// The "about" text for a run without `CNI_COMMAND` (printed to stderr, exit 0, as Go does).
fn print_about(stderr: &mut dyn Write, about: &str, supported: &[SpecVersion]) {
    let list: Vec<String> = supported.iter().map(ToString::to_string).collect();
    let _ = writeln!(stderr, "{about}");
    let _ = writeln!(
        stderr,
        "CNI protocol versions supported: {}",
        list.join(", ")
    );
}

#[cfg(test)]
mod tests;
