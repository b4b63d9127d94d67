//! A fast path for the hot verbs: `rcni [FLAGS] add|del|check NETWORK NETNS [FLAGS]` is read
//! by hand, without building clap's command tree for the whole CLI (that alone cost a
//! measurable part of the runtime's overhead over its plugins).
//!
//! The fast path only ever accepts command lines clap accepts, and gives the same [`Cli`] for
//! them: anything it does not fully understand (help, version, any other verb, an unknown or
//! repeated flag, a value that starts with `-` or is empty, a value clap might reject, a
//! non-UTF-8 argument, an empty environment variable) returns `None`, and clap parses, reports
//! and exits as before.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cli::{
    AttachArgs, Cli, Command, Global, DEFAULT_CACHE_DIR, DEFAULT_CONF_DIR, DEFAULT_IFNAME,
};

/// The global flags that take a value, and their environment variables. Only `--bin-dir` may
/// be repeated (its values are colon-separated lists, appended in order).
const VALUED: [(&str, Option<&str>); 8] = [
    ("--conf-dir", Some("NETCONFPATH")),
    ("--bin-dir", Some("CNI_PATH")),
    ("--cache-dir", None),
    ("--ifname", Some("CNI_IFNAME")),
    ("--args", Some("CNI_ARGS")),
    ("--capability-args", Some("CAP_ARGS")),
    ("--container-id", None),
    ("--timeout", None),
];
const BIN_DIR: usize = 1;

/// The global switches.
const SWITCHES: [&str; 2] = ["--no-rollback", "--json"];

/// The command line without the program name, as clap would parse it, or `None` for clap.
/// `env` looks up an environment variable (`std::env::var_os` in the real process).
pub fn fast(args: &[OsString], env: impl Fn(&str) -> Option<OsString>) -> Option<Cli> {
    let mut values: [Option<String>; VALUED.len()] = Default::default();
    let mut switches = [false; SWITCHES.len()];
    let mut positionals: Vec<String> = Vec::with_capacity(3);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let arg = arg.to_str()?;
        let Some(flag) = arg.strip_prefix("--") else {
            if arg.starts_with('-') {
                return None;
            }
            positionals.push(arg.to_string());
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag, None),
        };
        if let Some(i) = SWITCHES.iter().position(|s| s[2..] == *name) {
            if inline.is_some() || switches[i] {
                return None;
            }
            switches[i] = true;
            continue;
        }
        let i = VALUED.iter().position(|(f, _)| f[2..] == *name)?;
        let value = match inline {
            Some(v) => v,
            None => rest.next()?.to_str()?,
        };
        if !plain_value(value) {
            return None;
        }
        match &mut values[i] {
            None => values[i] = Some(value.to_string()),
            Some(list) if i == BIN_DIR => {
                list.push(':');
                list.push_str(value);
            }
            Some(_) => return None,
        }
    }
    let [verb, network, netns] = <[String; 3]>::try_from(positionals).ok()?;
    let attach = AttachArgs {
        network,
        netns: netns.into(),
    };
    let command = match verb.as_str() {
        "add" => Command::Add(attach),
        "del" => Command::Del(attach),
        "check" => Command::Check(attach),
        _ => return None,
    };
    // A flag wins over its environment variable; an empty variable is left to clap.
    for (i, (_, var)) in VALUED.iter().enumerate() {
        if let (None, Some(var)) = (&values[i], var) {
            if let Some(v) = env(var) {
                let v = v.into_string().ok()?;
                if v.is_empty() {
                    return None;
                }
                values[i] = Some(v);
            }
        }
    }
    let [conf_dir, bin_dirs, cache_dir, ifname, args, capability_args, container_id, timeout] =
        values;
    let bin_dirs = match bin_dirs {
        Some(list) => list
            .split(':')
            .map(|d| (!d.is_empty()).then(|| PathBuf::from(d)))
            .collect::<Option<Vec<_>>>()?,
        None => Vec::new(),
    };
    let timeout = match timeout {
        Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => Some(t.parse().ok()?),
        Some(_) => return None,
        None => None,
    };
    let [no_rollback, json] = switches;
    Some(Cli {
        global: Global {
            conf_dir: PathBuf::from(conf_dir.as_deref().unwrap_or(DEFAULT_CONF_DIR)),
            bin_dirs,
            cache_dir: PathBuf::from(cache_dir.as_deref().unwrap_or(DEFAULT_CACHE_DIR)),
            ifname: ifname.unwrap_or_else(|| DEFAULT_IFNAME.to_string()),
            args,
            capability_args,
            container_id,
            timeout,
            no_rollback,
            json,
        },
        command,
    })
}

/// A flag value the fast path takes as it is: not empty and not looking like a flag (clap's
/// handling of those is left to clap).
fn plain_value(v: &str) -> bool {
    !v.is_empty() && !v.starts_with('-')
}

#[cfg(test)]
mod tests;
