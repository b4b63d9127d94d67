//! `rcni netns add|del|list`: named namespaces in /run/netns, via cni-linux; and the same
//! namespaces as `rcni pod` (and `rcni doctor --fix` of its sandboxes) make and remove them.

use std::path::{Path, PathBuf};

use cni_linux::netns::{NetNs, NETNS_RUN_DIR};
use cni_sandbox::Namespaces;
use cni_types::code;

use crate::cli::NetnsCommand;
use crate::failure::Failure;
use crate::output::print_json;

pub fn run(cmd: &NetnsCommand, json_out: bool) -> Result<(), Failure> {
    match cmd {
        NetnsCommand::Add { name } => {
            let ns = NetNs::create_named(name)
                .map_err(|e| Failure::other("netns add", code::INVALID_NETNS, e.to_string()))?;
            println!("{}", ns.path().display());
            Ok(())
        }
        NetnsCommand::Del { name } => NetNs::delete_named(name)
            .map_err(|e| Failure::other("netns del", code::INVALID_NETNS, e.to_string())),
        NetnsCommand::List => {
            let mut names: Vec<String> = match std::fs::read_dir(NETNS_RUN_DIR) {
                Ok(d) => d
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => {
                    return Err(Failure::other(
                        "netns list",
                        code::IO_FAILURE,
                        format!("cannot read {NETNS_RUN_DIR}: {e}"),
                    ))
                }
            };
            names.sort();
            if json_out {
                print_json(&names);
            } else {
                for n in names {
                    println!("{n}");
                }
            }
            Ok(())
        }
    }
}

/// cni-linux's named namespaces under /run/netns.
pub struct LinuxNamespaces;

impl Namespaces for LinuxNamespaces {
    fn create(&self, name: &str) -> Result<PathBuf, String> {
        NetNs::create_named(name)
            .map(|ns| ns.path().to_path_buf())
            .map_err(|e| e.to_string())
    }

    fn remove(&self, name: &str) -> Result<(), String> {
        match NetNs::delete_named(name) {
            Err(e) if !e.is_not_found() => Err(e.to_string()),
            _ => Ok(()),
        }
    }

    /// A path is only a namespace when it opens as one: a process killed between creating
    /// the mount point and the bind mount (or between unmounting and unlinking it) leaves a
    /// plain file there, and Go plugins fail DEL on such a path ("unknown FS magic").
    fn exists(&self, path: &Path) -> bool {
        NetNs::open(path).is_ok()
    }
}
