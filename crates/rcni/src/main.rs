//! `rcni`: the command line of the rcni CNI runtime.

mod argv;
mod boot_gc;
mod cli;
mod commands;
mod diagnostics;
mod failure;
mod flows;
mod logger;
mod netns;
mod output;
mod pod;
mod policy;
mod repair;
mod setup;

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    logger::init();
    quiet_on_closed_stdout();
    // add/del/check take the fast path; everything else, and every usage error, goes to clap,
    // which prints usage errors itself and exits with status 2 (ignoring a closed stdout).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = args
        .get(1..)
        .and_then(|rest| argv::fast(rest, |var| std::env::var_os(var)))
        .unwrap_or_else(|| cli::Cli::parse_from(args));
    match panic::catch_unwind(AssertUnwindSafe(|| commands::run(&cli))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(f)) => {
            // The status is the operation's, whether or not its report could be printed.
            let _ = quietly(panic::catch_unwind(AssertUnwindSafe(|| {
                f.report(cli.global.json)
            })));
            ExitCode::from(f.exit_code())
        }
        // The operation got as far as printing its result; the reader left (`rcni list |
        // head -1`): the operation itself succeeded.
        Err(payload) => {
            let _ = quietly(Err(payload));
            ExitCode::SUCCESS
        }
    }
}

/// Whether a panic is `print!`/`println!` failing on a closed stdout. std offers no typed way
/// to tell: its panic message is "failed printing to stdout: " plus the io::Error's text.
fn is_closed_stdout(payload: &(dyn Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    let broken_pipe = std::io::Error::from_raw_os_error(EPIPE).to_string();
    msg.starts_with("failed printing to stdout") && msg.ends_with(&broken_pipe)
}

/// EPIPE's number on every Linux architecture (the only OS rcni runs on).
const EPIPE: i32 = 32;

/// Silences the panic message of a write to a closed stdout; every other panic keeps the
/// default report.
fn quiet_on_closed_stdout() {
    let default = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !is_closed_stdout(info.payload()) {
            default(info);
        }
    }));
}

/// Passes a closed-stdout panic as done; resumes any other panic.
fn quietly(outcome: std::thread::Result<()>) -> Result<(), ()> {
    match outcome {
        Ok(()) => Ok(()),
        Err(payload) if is_closed_stdout(payload.as_ref()) => Err(()),
        Err(payload) => panic::resume_unwind(payload),
    }
}
