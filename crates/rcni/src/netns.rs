//! `rcni netns add|del|list`: named namespaces in /run/netns, via cni-linux.

use serde_json::json;

use cni_linux::netns::{NetNs, NETNS_RUN_DIR};
use cni_types::code;

use crate::cli::NetnsCommand;
use crate::failure::Failure;

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
                println!("{}", cni_types::pretty_json(&json!(names)));
            } else {
                for n in names {
                    println!("{n}");
                }
            }
            Ok(())
        }
    }
}
