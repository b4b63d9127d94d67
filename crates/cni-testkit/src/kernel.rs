//! Reading kernel state of a namespace with iproute2/nft JSON output.
//!
//! These readers deliberately use the command-line tools rather than rcni's netlink
//! code, so tests check the kernel through an independent implementation. The JSON
//! is returned as `ip -j` prints it; see `ip -j -d link show` for field names.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

use crate::in_netns::netns_path;
use crate::process::{run, PROCESS_TIMEOUT};

/// Address family for [`routes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

/// All links of `ns` with details (`ip -n <ns> -j -d link show`).
pub fn links(ns: &str) -> anyhow::Result<Vec<Value>> {
    json_array(ns, &["ip", "-n", ns, "-j", "-d", "link", "show"])
}

/// The link named `ifname` in `ns`, with details; `None` when there is none.
pub fn link(ns: &str, ifname: &str) -> anyhow::Result<Option<Value>> {
    Ok(links(ns)?
        .into_iter()
        .find(|l| l["ifname"].as_str() == Some(ifname)))
}

/// The names of the links of `ns`, sorted (`lo` included).
pub fn link_names(ns: &str) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = links(ns)?
        .iter()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

/// True when the link `ifname` of `ns` exists and is administratively up.
pub fn is_up(ns: &str, ifname: &str) -> anyhow::Result<bool> {
    Ok(link(ns, ifname)?
        .and_then(|l| l["flags"].as_array().cloned())
        .is_some_and(|flags| flags.iter().any(|f| f == "UP")))
}

/// The global-scope addresses of `ifname` in `ns`, as `addr/prefix` strings.
pub fn addrs_of(ns: &str, ifname: &str) -> anyhow::Result<Vec<String>> {
    Ok(addrs(ns)?
        .iter()
        .filter(|l| l["ifname"] == ifname)
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["scope"] == "global")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
        .collect())
}

/// All links of `ns` with their addresses (`ip -n <ns> -j addr show`); each entry has
/// `ifname` and an `addr_info` array.
pub fn addrs(ns: &str) -> anyhow::Result<Vec<Value>> {
    json_array(ns, &["ip", "-n", ns, "-j", "addr", "show"])
}

/// Routes of every table of `ns` (`ip [-6] -n <ns> -j route show table all`),
/// including the kernel's `local` table entries.
pub fn routes(ns: &str, family: IpFamily) -> anyhow::Result<Vec<Value>> {
    let flag = match family {
        IpFamily::V4 => "-4",
        IpFamily::V6 => "-6",
    };
    json_array(
        ns,
        &["ip", flag, "-n", ns, "-j", "route", "show", "table", "all"],
    )
}

/// VLANs of the bridge ports of `ns` (`bridge -n <ns> -j vlan show`).
pub fn bridge_vlans(ns: &str) -> anyhow::Result<Vec<Value>> {
    json_array(ns, &["bridge", "-n", ns, "-j", "vlan", "show"])
}

/// Queueing disciplines of `ns` (`tc -n <ns> -j qdisc show`).
pub fn qdiscs(ns: &str) -> anyhow::Result<Vec<Value>> {
    json_array(ns, &["tc", "-n", ns, "-j", "qdisc", "show"])
}

/// The nf_tables ruleset of `ns` (`nft -j list ruleset` inside it): an object with
/// an `nftables` array. `None` when the `nft` tool is not installed.
pub fn nft_json(ns: &str) -> anyhow::Result<Option<Value>> {
    if !on_path("nft") {
        return Ok(None);
    }
    let stdout = run_tool(
        ns,
        &["ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"],
    )?;
    let value =
        serde_json::from_str(&stdout).with_context(|| format!("nft printed no JSON: {stdout}"))?;
    Ok(Some(value))
}

fn json_array(ns: &str, argv: &[&str]) -> anyhow::Result<Vec<Value>> {
    let stdout = run_tool(ns, argv)?;
    // Some tools print nothing at all instead of `[]` when there is nothing to show.
    if stdout.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(&stdout)
        .with_context(|| format!("{} printed no JSON array: {stdout}", argv.join(" ")))
}

/// Runs a reader tool after checking `ns` exists (never falling back to the root namespace).
fn run_tool(ns: &str, argv: &[&str]) -> anyhow::Result<String> {
    let path = netns_path(ns)?;
    if !path.exists() {
        bail!("network namespace {ns} does not exist");
    }
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    let out = run(cmd, b"", PROCESS_TIMEOUT)?;
    if !out.success() {
        bail!("{} failed:\n{out}", argv.join(" "));
    }
    Ok(out.stdout)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(program))))
        .unwrap_or(false)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_refuse_missing_or_invalid_namespaces() {
        assert!(links("rcnit-does-not-exist").is_err());
        assert!(links("").is_err());
        assert!(nft_json("").is_err() || !on_path("nft"));
    }

    #[test]
    fn on_path_finds_sh_but_not_nonsense() {
        assert!(on_path("sh"));
        assert!(!on_path("rcnit-no-such-tool"));
    }
}
