//! The state of the lab's scope, read with independent tools so a difference can be listed:
//! links, addresses, routes (every table) and the nft ruleset of the lab's host namespace
//! (`ip -j`, `nft`), host-local lease files, tuning backups and result cache entries.
//!
//! The whole run is bracketed by two of these, and each controlled failure by three (before
//! the failed ADD, right after it, after the DEL that must release what it left).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;
use serde_json::Value;

/// One object of the scope, in a stable text form; `dev` names the link it hangs on (empty for
/// files and nft lines), so a difference can be attributed to a link.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Item {
    pub kind: &'static str,
    pub dev: String,
    pub text: String,
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.text)
    }
}

/// Where the lab's state lives.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Name of the lab's host namespace (under /run/netns).
    pub host_ns: String,
    /// Extra namespaces whose links count (a failure's pod namespace).
    pub pod_ns: Vec<String>,
    pub lease_dirs: Vec<PathBuf>,
    /// tuning's backup directory (the lab keeps it in its scratch directory).
    pub tuning_dir: PathBuf,
    pub cache_dir: PathBuf,
}

/// A difference between two states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// `+` appeared, `-` disappeared.
    pub sign: char,
    pub item: Item,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.sign, self.item)
    }
}

pub type State = BTreeSet<Item>;

impl Scope {
    pub fn capture(&self) -> Result<State, String> {
        let mut s = State::new();
        links(&self.host_ns, "link", &mut s)?;
        for ns in &self.pod_ns {
            links(ns, "pod-link", &mut s)?;
        }
        addresses(&self.host_ns, &mut s)?;
        routes(&self.host_ns, &mut s)?;
        nft(&self.host_ns, &mut s)?;
        for d in &self.lease_dirs {
            leases(d, &mut s);
        }
        cache(&self.cache_dir, &self.cache_dir.join("results"), &mut s);
        tuning_backups(&self.tuning_dir, &mut s);
        Ok(s)
    }
}

/// What `after` has that `before` lacks (`+`) and the reverse (`-`).
pub fn diff(before: &State, after: &State) -> Vec<Change> {
    let gone = before.difference(after).map(|i| Change {
        sign: '-',
        item: i.clone(),
    });
    let new = after.difference(before).map(|i| Change {
        sign: '+',
        item: i.clone(),
    });
    gone.chain(new).collect()
}

/// [`diff`] without the objects of the given links: a shared bridge's own addresses, routes
/// and MAC follow its carrier (ports coming and going), not any one attachment.
pub fn diff_except(before: &State, after: &State, devs: &[String]) -> Vec<Change> {
    diff(before, after)
        .into_iter()
        .filter(|c| !devs.contains(&c.item.dev))
        .collect()
}

fn ip_json(ns: &str, args: &[&str]) -> Result<Value, String> {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "-d"])
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip -n {ns} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("ip -j {}: {e}", args.join(" ")))
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn links(ns: &str, kind: &'static str, s: &mut State) -> Result<(), String> {
    for l in ip_json(ns, &["link", "show"])?
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = str_of(l, "ifname");
        let link_kind = l
            .get("linkinfo")
            .map(|i| str_of(i, "info_kind"))
            .unwrap_or("");
        let master = str_of(l, "master");
        let text = format!(
            "{name} kind={} master={} mac={}",
            if link_kind.is_empty() { "-" } else { link_kind },
            if master.is_empty() { "-" } else { master },
            str_of(l, "address"),
        );
        s.insert(Item {
            kind,
            dev: name.to_string(),
            text,
        });
    }
    Ok(())
}

fn addresses(ns: &str, s: &mut State) -> Result<(), String> {
    for l in ip_json(ns, &["addr", "show"])?
        .as_array()
        .into_iter()
        .flatten()
    {
        let dev = str_of(l, "ifname");
        for a in l
            .get("addr_info")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let plen = a.get("prefixlen").and_then(Value::as_u64).unwrap_or(0);
            s.insert(Item {
                kind: "address",
                dev: dev.to_string(),
                text: format!("{}/{plen} on {dev}", str_of(a, "local")),
            });
        }
    }
    Ok(())
}

fn routes(ns: &str, s: &mut State) -> Result<(), String> {
    for family in ["-4", "-6"] {
        let out = Command::new("ip")
            .args(["-n", ns, "-j", family, "route", "show", "table", "all"])
            .output()
            .map_err(|e| format!("ip: {e}"))?;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        for r in v.as_array().into_iter().flatten() {
            let dev = str_of(r, "dev");
            let table = r
                .get("table")
                .map(|t| t.as_str().map(String::from).unwrap_or(t.to_string()))
                .unwrap_or_else(|| "main".into());
            let mut text = format!("{} {}", str_of(r, "type"), str_of(r, "dst"));
            if let Some(gw) = r.get("gateway").and_then(Value::as_str) {
                text.push_str(&format!(" via {gw}"));
            }
            text.push_str(&format!(" dev {dev} table {table}"));
            s.insert(Item {
                kind: "route",
                dev: dev.to_string(),
                text: text.replace("  ", " ").trim().to_string(),
            });
        }
    }
    Ok(())
}

/// The ruleset without handles or counters (`nft -s`), one line per item.
fn nft(ns: &str, s: &mut State) -> Result<(), String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-s", "list", "ruleset"])
        .output()
        .map_err(|e| format!("nft: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nft list ruleset in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    nft_items(&String::from_utf8_lossy(&out.stdout), s);
    Ok(())
}

/// One item per ruleset line, prefixed with the blocks it is in (`table ip nat / chain
/// POSTROUTING / <rule>`), so a rule that moved or vanished is named with its place.
fn nft_items(ruleset: &str, s: &mut State) {
    let mut context = Vec::<String>::new();
    for line in ruleset.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "}" {
            context.pop();
            continue;
        }
        let text = if context.is_empty() {
            line.to_string()
        } else {
            format!("{} / {line}", context.join(" / "))
        };
        if let Some(head) = line.strip_suffix('{') {
            context.push(head.trim().to_string());
        }
        s.insert(Item {
            kind: "nft",
            dev: String::new(),
            text,
        });
    }
}

/// host-local's lease files with their owner; its lock and `last_reserved_ip.*` hint files are
/// bookkeeping it keeps for the range on purpose (as Go does), not state of an attachment.
fn leases(dir: &Path, s: &mut State) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "lock" || name.starts_with("last_reserved_ip.") {
            continue;
        }
        let owner = std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .replace("\r\n", " ");
        s.insert(Item {
            kind: "lease",
            dev: String::new(),
            text: format!("{} ({owner})", e.path().display()),
        });
    }
}

/// tuning's backups, `<containerID>_<ifname>.json` (temp files of a killed writer included).
fn tuning_backups(dir: &Path, s: &mut State) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        s.insert(Item {
            kind: "tuning-backup",
            dev: String::new(),
            text: e.path().display().to_string(),
        });
    }
}

/// Result cache entries (files under `results/`), relative to the cache directory; the
/// per-network lock files under `locks/` are not attachment state.
fn cache(root: &Path, dir: &Path, s: &mut State) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            cache(root, &p, s);
            continue;
        }
        let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
        s.insert(Item {
            kind: "cache",
            dev: String::new(),
            text: rel,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: &'static str, text: &str) -> Item {
        Item {
            kind,
            dev: String::new(),
            text: text.into(),
        }
    }

    #[test]
    fn diff_lists_both_directions() {
        let before: State = [item("link", "a"), item("link", "b")].into();
        let after: State = [item("link", "b"), item("lease", "x")].into();
        let d: Vec<String> = diff(&before, &after)
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(d, ["- link a", "+ lease x"]);
        assert!(diff(&after, &after).is_empty());
        let bridge = Item {
            kind: "route",
            dev: "br0".into(),
            text: "local fe80::1 dev br0".into(),
        };
        let with_bridge: State = [item("link", "b"), bridge].into();
        let d = diff_except(&before, &with_bridge, &["br0".into()]);
        assert_eq!(d.len(), 1, "{d:?}");
    }

    #[test]
    fn nft_lines_carry_their_table_and_chain() {
        let mut s = State::new();
        nft_items(
            "table ip nat {\n\tchain POSTROUTING {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tip saddr 198.18.0.0/24 masquerade\n\t}\n}\n",
            &mut s,
        );
        let texts: Vec<&str> = s.iter().map(|i| i.text.as_str()).collect();
        assert!(
            texts.contains(&"table ip nat / chain POSTROUTING / ip saddr 198.18.0.0/24 masquerade"),
            "{texts:?}"
        );
        assert!(texts.contains(&"table ip nat {"), "{texts:?}");
        assert_eq!(s.len(), 4, "{texts:?}");
    }

    #[test]
    fn lease_bookkeeping_is_not_state_but_a_lease_is() {
        let dir = std::env::temp_dir().join(format!("rcni-scope-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lock"), "").unwrap();
        std::fs::write(dir.join("last_reserved_ip.0"), "198.18.0.2").unwrap();
        std::fs::write(dir.join("198.18.0.2"), "cid\r\neth0").unwrap();
        let mut s = State::new();
        leases(&dir, &mut s);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(s.iter().next().unwrap().text.contains("(cid eth0)"));
    }
}
