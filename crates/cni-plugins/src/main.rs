//! `rcni-plugins`: every rcni CNI plugin in one executable, chosen by the name it is run as
//! (`/opt/cni/bin/loopback -> rcni-plugins`). Under any other name it is a small front end:
//! `--help` lists the plugins, `install <dir> [--force] [--copy]` creates the links.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cni_plugin::Command;
use cni_plugins::install::{copy_executable, install, Outcome};
use cni_plugins::{plugin_by_name, PLUGINS};
use cni_types::{pretty_json, CniError};

fn main() {
    cni_plugins::common::phase_trace::mark("main");
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let rest: Vec<OsString> = argv.collect();
    // `dhcp daemon ...` under the plugin's own name, as Go's `/opt/cni/bin/dhcp daemon`.
    if name == "dhcp" && rest.first().is_some_and(|a| a == "daemon") {
        std::process::exit(run_dhcp_daemon(&rest[1..]));
    }
    if let Some(plugin) = plugin_by_name(&name) {
        let plugin = test_panic::wrap(&name, plugin);
        // An IPAM delegate that is this executable runs in-process (one process per ADD).
        cni_plugin::ipam::register_in_process(|name| {
            plugin_by_name(name).map(|plugin| test_panic::wrap(name, plugin))
        });
        std::process::exit(cni_plugin::run(&*plugin));
    }
    std::process::exit(front_end(&name, &rest));
}

fn front_end(name: &str, args: &[OsString]) -> i32 {
    // rcni's own commands (repair) come to this executable under its own name: the plugin
    // that answers is the request config's type.
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    if Command::parse(&command).is_some_and(Command::is_rcni_own) && args.is_empty() {
        return cni_plugin::run_by_config_type(&|plugin_type| plugin_by_name(plugin_type));
    }
    // A runtime executing us under a name we do not know gets a CNI error, not help text.
    if std::env::var_os("CNI_COMMAND").is_some_and(|c| !c.is_empty()) && args.is_empty() {
        let e = CniError::internal(format!(
            "rcni-plugins was run as {name:?}, which is not a plugin it contains"
        ))
        .with_details(format!("plugins: {}", plugin_names().join(", ")));
        print!("{}", pretty_json(&e));
        return 1;
    }
    let args: Vec<&str> = args
        .iter()
        .map(|a| a.to_str().unwrap_or("\u{fffd}"))
        .collect();
    match args.as_slice() {
        [] | ["--help" | "-h" | "help"] => {
            print!("{}", help());
            0
        }
        ["--version" | "-V"] => {
            println!("rcni-plugins v{}", env!("CARGO_PKG_VERSION"));
            0
        }
        ["dhcp", "daemon", ..] => run_dhcp_daemon(&args_os(&args[2..])),
        ["install", rest @ ..] => match InstallArgs::parse(rest) {
            Some(install) => run_install(&install),
            None => {
                eprintln!("rcni-plugins: install takes <dir> [--force] [--copy], got {rest:?}");
                2
            }
        },
        _ => {
            eprintln!("rcni-plugins: unknown arguments {args:?}\n\n{}", help());
            2
        }
    }
}

fn args_os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn run_dhcp_daemon(args: &[OsString]) -> i32 {
    let args: Vec<&str> = args
        .iter()
        .map(|a| a.to_str().unwrap_or("\u{fffd}"))
        .collect();
    cni_plugins::dhcp::run_daemon(&args)
}

fn plugin_names() -> Vec<&'static str> {
    PLUGINS.iter().map(|p| p.name).collect()
}

fn help() -> String {
    let mut s = format!(
        "rcni-plugins v{}: CNI plugins in one executable.\n\
         Run it under a plugin's name, e.g. /opt/cni/bin/loopback -> rcni-plugins.\n\nPlugins:\n",
        env!("CARGO_PKG_VERSION")
    );
    for p in PLUGINS {
        let versions: Vec<String> = p
            .plugin
            .supported_versions()
            .iter()
            .map(ToString::to_string)
            .collect();
        s.push_str(&format!(
            "  {:<14}{}\n  {:<14}CNI spec versions: {}\n",
            p.name,
            p.summary,
            "",
            versions.join(", ")
        ));
    }
    s.push_str(
        "\nUsage:\n  \
         rcni-plugins install <dir> [--force] [--copy]\n    \
         link every plugin name in <dir> to this executable (--force: replace other files of\n    \
         those names; --copy: copy this executable into <dir> first and link to the copy)\n  \
         rcni-plugins dhcp daemon [--socket PATH] [--state-dir DIR]  the dhcp IPAM daemon\n  \
         rcni-plugins --help                   this text\n\n\
         Logging: RCNI_LOG=off|error|warn|info|debug|trace (default warn), RCNI_LOG_FILE=<path>\n",
    );
    s
}

/// `install`'s arguments: one directory, flags in any order.
struct InstallArgs<'a> {
    dir: &'a str,
    force: bool,
    copy: bool,
}

impl<'a> InstallArgs<'a> {
    fn parse(args: &[&'a str]) -> Option<InstallArgs<'a>> {
        let (mut dir, mut force, mut copy) = (None, false, false);
        for arg in args {
            match *arg {
                "--force" => force = true,
                "--copy" => copy = true,
                flag if flag.starts_with('-') => return None,
                path if dir.is_none() => dir = Some(path),
                _ => return None,
            }
        }
        Some(InstallArgs {
            dir: dir?,
            force,
            copy,
        })
    }
}

fn run_install(args: &InstallArgs) -> i32 {
    let dir = PathBuf::from(args.dir);
    let exe = match std::env::current_exe().and_then(std::fs::canonicalize) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rcni-plugins: cannot find this executable: {e}");
            return 1;
        }
    };
    let target = if args.copy {
        match copy_executable(&exe, &dir) {
            Ok(target) => target,
            Err(e) => {
                eprintln!("rcni-plugins: copy into {}: {e}", dir.display());
                return 1;
            }
        }
    } else {
        exe
    };
    match install(&dir, &target, &plugin_names(), args.force) {
        Ok(done) => {
            let mut status = 0;
            for (link, outcome) in done {
                let what = match outcome {
                    Outcome::Created => "created",
                    Outcome::Replaced => "replaced",
                    Outcome::Unchanged => "up to date",
                    Outcome::Conflict => {
                        status = 1;
                        "exists and is not ours (use --force to replace)"
                    }
                };
                println!("{} -> {}: {what}", link.display(), target.display());
            }
            status
        }
        Err(e) => {
            eprintln!("rcni-plugins: install into {}: {e}", dir.display());
            1
        }
    }
}

/// Debug builds only: `RCNI_TEST_PANIC=1` makes ADD, DEL and CHECK panic (CHECK on a worker thread), to test the panic hook
/// against the real binary; with `RCNI_TEST_PANIC_ONLY=<plugin>` only that plugin panics (a
/// delegate, run in-process or executed). Release builds ignore both variables.
#[cfg(debug_assertions)]
mod test_panic {
    use cni_plugin::{CmdArgs, Plugin, RepairAnswer, RepairMode};
    use cni_types::{CniError, CniResult, SpecVersion};

    pub fn wrap(name: &str, plugin: Box<dyn Plugin>) -> Box<dyn Plugin> {
        let only = std::env::var_os("RCNI_TEST_PANIC_ONLY");
        if std::env::var_os("RCNI_TEST_PANIC").is_some_and(|v| v == "1")
            && only.is_none_or(|only| only == name)
        {
            Box::new(Panicking(plugin))
        } else {
            plugin
        }
    }

    struct Panicking(Box<dyn Plugin>);

    impl Plugin for Panicking {
        fn add(&self, _: &CmdArgs) -> Result<CniResult, CniError> {
            panic!("RCNI_TEST_PANIC in ADD")
        }
        fn del(&self, _: &CmdArgs) -> Result<(), CniError> {
            panic!("RCNI_TEST_PANIC in DEL")
        }
        /// Panics on another thread, as work inside a network namespace does.
        fn check(&self, _: &CmdArgs) -> Result<(), CniError> {
            std::thread::scope(|s| {
                let _ = s
                    .spawn(|| panic!("RCNI_TEST_PANIC in CHECK (worker thread)"))
                    .join();
            });
            Ok(())
        }
        fn repair(&self, args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
            self.0.repair(args, mode)
        }
        fn supported_versions(&self) -> Vec<SpecVersion> {
            self.0.supported_versions()
        }
        fn about(&self) -> String {
            self.0.about()
        }
    }
}

#[cfg(not(debug_assertions))]
mod test_panic {
    pub fn wrap(_name: &str, plugin: Box<dyn cni_plugin::Plugin>) -> Box<dyn cni_plugin::Plugin> {
        plugin
    }
}
