//! Reading the `CNI_*` variables with the Go skeleton's rules (`getCmdArgsFromEnv` in
//! containernetworking/cni `pkg/skel/skel.go`).
//!
//! - An empty value counts as missing.
//! - `CNI_PATH` is required for every command but VERSION (stricter than the spec, as Go).
//! - The variables are walked in the fixed order COMMAND, CONTAINERID, NETNS, IFNAME, ARGS,
//!   PATH. A container ID or interface name that is present but invalid is reported at once
//!   (only for commands that require it); otherwise every missing variable is reported together
//!   in one code-4 error.
//! - A value that is not UTF-8 is refused (code 4), `CNI_NETNS` too: the spec passes it as a
//!   byte string, but every result reports it as an interface's `sandbox` and JSON is UTF-8,
//!   so a plugin could not answer for it (and refusing before the callback leaves nothing to
//!   undo). It is read as its bytes all the same and kept a path, never a lossy copy.

use std::path::PathBuf;

use cni_invoke::{RCNI_REPAIR, RCNI_REPAIR_LOOK};
use cni_types::{validate_container_id, validate_interface_name, CniError};

use crate::env::Env;

/// The raw `CNI_*` values of one run (empty where unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EnvVars {
    pub command: String,
    pub container_id: String,
    pub netns: PathBuf,
    pub ifname: String,
    pub args: String,
    pub path: String,
    pub netns_override: String,
}

/// Commands that need each variable. `CNI_COMMAND` itself is always needed. rcni's repair
/// names the attachment whose rules it looks at; it works on the host's rules only.
const REQUIRED: [(&str, &[&str]); 6] = [
    ("CNI_COMMAND", &["ADD", "CHECK", "DEL", "GC", "STATUS"]),
    (
        "CNI_CONTAINERID",
        &["ADD", "CHECK", "DEL", RCNI_REPAIR, RCNI_REPAIR_LOOK],
    ),
    ("CNI_NETNS", &["ADD", "CHECK"]),
    (
        "CNI_IFNAME",
        &["ADD", "CHECK", "DEL", RCNI_REPAIR, RCNI_REPAIR_LOOK],
    ),
    ("CNI_ARGS", &[]),
    ("CNI_PATH", &["ADD", "CHECK", "DEL", "GC", "STATUS"]),
];

/// Reads and validates the variables. The error is the one the skeleton prints.
pub(crate) fn read_env(env: &dyn Env) -> Result<EnvVars, CniError> {
    // A lossy copy of a non-UTF-8 value would name another container, interface or path.
    for (name, _) in REQUIRED {
        if !env.is_utf8(name) {
            return Err(CniError::invalid_environment(format!(
                "{name} is not valid UTF-8"
            )));
        }
    }
    let get = |name: &str| env.var(name).unwrap_or_default();
    let vars = EnvVars {
        command: get("CNI_COMMAND"),
        container_id: get("CNI_CONTAINERID"),
        netns: env
            .var_os("CNI_NETNS")
            .map(PathBuf::from)
            .unwrap_or_default(),
        ifname: get("CNI_IFNAME"),
        args: get("CNI_ARGS"),
        path: get("CNI_PATH"),
        netns_override: get("CNI_NETNS_OVERRIDE"),
    };
    let values: [&std::ffi::OsStr; 6] = [
        vars.command.as_ref(),
        vars.container_id.as_ref(),
        vars.netns.as_os_str(),
        vars.ifname.as_ref(),
        vars.args.as_ref(),
        vars.path.as_ref(),
    ];
    let mut missing = Vec::new();
    for ((name, commands), value) in REQUIRED.iter().zip(values) {
        let required = commands.contains(&vars.command.as_str());
        if value.is_empty() {
            if required || *name == "CNI_COMMAND" {
                missing.push(*name);
            }
        } else if required {
            match *name {
                "CNI_CONTAINERID" => validate_container_id(&vars.container_id)?,
                "CNI_IFNAME" => validate_interface_name(&vars.ifname)?,
                _ => {}
            }
        }
    }
    if !missing.is_empty() {
        return Err(CniError::invalid_environment(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }
    Ok(vars)
}

/// `CNI_NETNS_OVERRIDE` is `1` or `true` (any case): skip the own-netns check.
pub(crate) fn netns_override(value: &str) -> bool {
    value == "1" || value.eq_ignore_ascii_case("true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::code;

    fn full(cmd: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CNI_COMMAND", cmd.to_string()),
            ("CNI_CONTAINERID", "c1".into()),
            ("CNI_NETNS", "/run/netns/x".into()),
            ("CNI_IFNAME", "eth0".into()),
            ("CNI_PATH", "/opt/cni/bin".into()),
        ]
    }

    fn read(vars: &[(&str, String)]) -> Result<EnvVars, CniError> {
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        read_env(&pairs)
    }

    // Every missing variable in one code-4 error, in the fixed order.
    #[test]
    fn all_missing_reported_together_in_order() {
        let e = read(&[("CNI_COMMAND", "ADD".into())]).unwrap_err();
        assert_eq!(e.code, code::INVALID_ENVIRONMENT);
        assert_eq!(
            e.msg,
            "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
        );
        let e = read(&[
            ("CNI_COMMAND", "ADD".into()),
            ("CNI_CONTAINERID", "c1".into()),
        ])
        .unwrap_err();
        assert_eq!(
            e.msg,
            "required env variables [CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
        );
    }

    // An empty value is missing.
    #[test]
    fn empty_counts_as_missing() {
        let mut v = full("ADD");
        v[2].1 = String::new();
        assert_eq!(
            read(&v).unwrap_err().msg,
            "required env variables [CNI_NETNS] missing"
        );
    }

    // Per-command requirements (DEL: NETNS optional; GC/STATUS: PATH only; VERSION: none).
    #[test]
    fn per_command_requirements() {
        let mut del = full("DEL");
        del.retain(|(k, _)| *k != "CNI_NETNS");
        assert!(read(&del).is_ok());
        assert!(read(&[("CNI_COMMAND", "VERSION".into())]).is_ok());
        for cmd in ["GC", "STATUS"] {
            let e = read(&[("CNI_COMMAND", cmd.into())]).unwrap_err();
            assert_eq!(e.msg, "required env variables [CNI_PATH] missing");
            assert!(read(&[("CNI_COMMAND", cmd.into()), ("CNI_PATH", "/x".into())]).is_ok());
        }
        let e = read(&[("CNI_COMMAND", "CHECK".into()), ("CNI_PATH", "/x".into())]).unwrap_err();
        assert_eq!(
            e.msg,
            "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME] missing"
        );
    }

    // No command at all names only CNI_COMMAND; unknown commands need nothing else.
    #[test]
    fn missing_or_unknown_command() {
        let e = read(&[]).unwrap_err();
        assert_eq!(e.msg, "required env variables [CNI_COMMAND] missing");
        assert!(read(&[("CNI_COMMAND", "FOO".into())]).is_ok());
    }

    // Invalid ID/ifname reported at once, before missing variables.
    #[test]
    fn invalid_values_reported_at_once() {
        let mut v = full("ADD");
        v[1].1 = "../../x".into();
        v.retain(|(k, _)| *k != "CNI_PATH");
        let e = read(&v).unwrap_err();
        assert_eq!(e.code, code::INVALID_ENVIRONMENT);
        assert_eq!(e.msg, "invalid characters in containerID");
        assert_eq!(e.details, "../../x");
        for bad in ["abcdefghijklmnop", "a/b", ".", "a b"] {
            let mut v = full("ADD");
            v[3].1 = bad.into();
            assert_eq!(
                read(&v).unwrap_err().code,
                code::INVALID_ENVIRONMENT,
                "{bad}"
            );
        }
        // GC does not require a container ID, so it is not validated there.
        let mut gc = full("GC");
        gc[1].1 = "../x".into();
        assert!(read(&gc).is_ok());
    }

    // A value that is not UTF-8 is refused, not read as its lossy copy (an ifname `eth\xff`
    // would otherwise create `eth\u{fffd}`).
    #[test]
    fn non_utf8_values_are_refused() {
        struct Bytes(Vec<(&'static str, String)>, &'static str);
        impl Env for Bytes {
            fn var(&self, name: &str) -> Option<String> {
                self.0
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.clone())
            }
            fn is_utf8(&self, name: &str) -> bool {
                name != self.1
            }
        }
        let e = read_env(&Bytes(full("ADD"), "CNI_IFNAME")).unwrap_err();
        assert_eq!(e.code, code::INVALID_ENVIRONMENT);
        assert_eq!(e.msg, "CNI_IFNAME is not valid UTF-8");
        assert!(read_env(&Bytes(full("ADD"), "OTHER")).is_ok());
    }

    // The `CNI_NETNS_OVERRIDE` switch.
    #[test]
    fn override_values() {
        for yes in ["1", "true", "TRUE", "True"] {
            assert!(netns_override(yes));
        }
        for no in ["", "0", "yes", "false"] {
            assert!(!netns_override(no));
        }
    }
}
