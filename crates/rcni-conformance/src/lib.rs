//! `rcni conformance`: black-box checks of any plugin directory against CNI 1.1.0.
//!
//! Every plugin gets the protocol checks (VERSION, environment, config and version gates:
//! `protocol.rs`); plugins with a recipe (`recipe.rs`) also get a real attachment's
//! lifecycle (`lifecycle.rs`). All plugin processes run inside a throwaway "host" namespace
//! with pods in throwaway namespaces of their own, so the machine's namespace is never
//! touched; the scratch directory holds IPAM state. The result is a table plugin × check
//! (`verdict.rs`).

mod exec;
mod lifecycle;
mod protocol;
mod recipe;
mod verdict;

use std::path::{Path, PathBuf};

use cni_linux::NetNs;
use rcni_lab::scratch::{Namespaces, Scratch};

use exec::{Env, Outcome};
pub use verdict::{Table, Verdict};

/// What the suite is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub bin_dir: PathBuf,
    /// Only these plugins; empty means every reference plugin found in `bin_dir`.
    pub plugins: Vec<String>,
}

/// One plugin under test, with where its calls run and what they printed.
pub struct Subject<'a> {
    pub name: String,
    path: PathBuf,
    bin_dir: PathBuf,
    host: &'a NetNs,
    /// A pod namespace for protocol checks (nothing may be made in it).
    proto_pod: String,
    scratch: PathBuf,
    table: &'a mut Table,
    outcomes: Vec<Outcome>,
}

impl Subject<'_> {
    /// Runs the plugin inside the host namespace and keeps the outcome for `clean-stdout`.
    fn call(&mut self, env: &Env, stdin: &str) -> Outcome {
        let path = self.path.clone();
        let out = self
            .host
            .run(|| exec::run(&path, env, stdin))
            .unwrap_or_else(|e| Outcome {
                status: None,
                stdout: String::new(),
                stderr: format!("cannot enter the host namespace: {e}"),
                timed_out: false,
            });
        self.outcomes.push(out.clone());
        out
    }

    fn cni_path(&self) -> String {
        self.bin_dir.display().to_string()
    }

    /// Every variable `command` needs, for a pod that must stay untouched.
    fn full_env(&self, command: &str, cid: &str, ifname: &str) -> Env {
        Env::command(command)
            .with("CNI_CONTAINERID", cid)
            .with("CNI_NETNS", self.proto_pod.clone())
            .with("CNI_IFNAME", ifname)
            .with("CNI_PATH", self.cni_path())
    }

    fn record(&mut self, check: &'static str, v: Verdict) {
        let name = self.name.clone();
        self.table.record(&name, check, v);
    }
}

/// The plugins to test: the ones asked for, or every reference plugin name with an
/// executable in the directory. `dhcp` needs its daemon and is left out unless asked for.
pub fn select(opts: &Options) -> Result<Vec<String>, String> {
    if !opts.plugins.is_empty() {
        for p in &opts.plugins {
            if p.is_empty() || p.contains('/') || !opts.bin_dir.join(p).is_file() {
                return Err(format!("no plugin {p:?} in {}", opts.bin_dir.display()));
            }
        }
        return Ok(opts.plugins.clone());
    }
    let found: Vec<String> = rcni_lab::PLUGIN_NAMES
        .iter()
        .filter(|n| **n != "dhcp" && opts.bin_dir.join(n).is_file())
        .map(|n| n.to_string())
        .collect();
    if found.is_empty() {
        return Err(format!(
            "no reference plugin found in {}",
            opts.bin_dir.display()
        ));
    }
    Ok(found)
}

/// Runs the suite.
pub fn run(opts: &Options) -> Result<Table, String> {
    let plugins = select(opts)?;
    let bin_dir = std::fs::canonicalize(&opts.bin_dir)
        .map_err(|e| format!("{}: {e}", opts.bin_dir.display()))?;
    let scratch = Scratch::new("rcni-conformance")?;
    let mut spaces = Namespaces::new("rconf");
    let host = spaces.create("host")?;
    let proto = spaces.create("proto")?;
    let mut table = Table::default();
    for name in plugins {
        let mut s = Subject {
            path: bin_dir.join(&name),
            name: name.clone(),
            bin_dir: bin_dir.clone(),
            host: &host,
            proto_pod: proto.path().display().to_string(),
            scratch: scratch.path().to_path_buf(),
            table: &mut table,
            outcomes: Vec::new(),
        };
        run_one(&mut s, &mut spaces);
        let clean = protocol::clean_stdout(&s.outcomes);
        s.record("clean-stdout", clean);
    }
    spaces.remove_all()?;
    Ok(table)
}

fn run_one(s: &mut Subject, spaces: &mut Namespaces) {
    let (v, claimed) = protocol::version(s);
    s.record("version", v);
    let claims_1_1 = claimed.iter().any(|c| c == "1.1.0");
    protocol::run_all(s, claims_1_1);
    match recipe::for_plugin(&s.name) {
        Some(r) => lifecycle::run_all(s, r, &claimed, spaces),
        None => {
            for c in lifecycle::LIFECYCLE {
                s.record(
                    c,
                    Verdict::NotApplicable(format!(
                        "no conformance recipe for {} yet (its kernel fixture is not built)",
                        s.name
                    )),
                );
            }
        }
    }
}

/// The directory to test, for the command line.
pub fn bin_dir(dirs: &[PathBuf]) -> Result<PathBuf, String> {
    dirs.first()
        .cloned()
        .filter(|d| Path::new(d).is_dir())
        .ok_or_else(|| "give the plugin directory with --bin-dir DIR".to_string())
}
