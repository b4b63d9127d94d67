//! `rcni`: the command line of the rcni CNI runtime.

mod cli;
mod commands;
mod conformance;
mod doctor;
mod failure;
mod lab;
mod logger;
mod netns;
mod pod;
mod scratch;
mod setup;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    logger::init();
    // clap prints usage errors itself and exits with status 2.
    let cli = cli::Cli::parse();
    match commands::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            f.report(cli.global.json);
            ExitCode::from(f.exit_code())
        }
    }
}
