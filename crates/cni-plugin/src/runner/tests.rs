//! The runner through its seams: the Go skeleton's order of checks, codes and messages
//! (`pkg/skel/skel.go`), the variables each command needs, the output of each command, and the
//! per-command version gates.

use std::cell::RefCell;
use std::io::{self, Read};

use cni_types::{code, CniError, CniResult, SpecVersion};
use serde_json::Value;

use super::run_with;
use crate::{CmdArgs, Command, Plugin, RepairAnswer, RepairMode};

/// A plugin that records its calls and answers as configured.
struct Fake {
    calls: RefCell<Vec<CmdArgs>>,
    result: CniResult,
    error: Option<CniError>,
    versions: Vec<SpecVersion>,
    about: String,
}

impl Fake {
    fn new() -> Self {
        let mut result = CniResult::new(SpecVersion::V1_1_0);
        result.ips.push(cni_types::IpConfig {
            interface: None,
            address: "198.18.1.5/16".parse().unwrap(),
            gateway: None,
        });
        Fake {
            calls: RefCell::new(Vec::new()),
            result,
            error: None,
            versions: SpecVersion::ALL.to_vec(),
            about: String::new(),
        }
    }

    fn answer(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.calls.borrow_mut().push(args.clone());
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn commands(&self) -> Vec<Command> {
        self.calls.borrow().iter().map(|a| a.command).collect()
    }
}

impl Plugin for Fake {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.answer(args)?;
        Ok(self.result.clone())
    }
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.answer(args)
    }
    fn supported_versions(&self) -> Vec<SpecVersion> {
        self.versions.clone()
    }
    fn about(&self) -> String {
        self.about.clone()
    }
}

struct Outcome {
    exit: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", self.stdout))
    }
    /// Asserts a failure with `code` and returns the error object.
    fn error(&self, code: u32) -> Value {
        assert_eq!(self.exit, 1, "stdout: {}", self.stdout);
        let v = self.json();
        assert_eq!(v["code"], code, "stdout: {}", self.stdout);
        v
    }
    fn success_silent(&self) {
        assert_eq!(self.exit, 0, "stdout: {}", self.stdout);
        assert_eq!(self.stdout, "");
    }
}

fn call_reader(plugin: &Fake, env: &[(&str, &str)], stdin: &mut dyn Read) -> Outcome {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = run_with(plugin, &env, stdin, &mut out, &mut err);
    Outcome {
        exit,
        stdout: String::from_utf8(out).unwrap(),
        stderr: String::from_utf8(err).unwrap(),
    }
}

fn call(plugin: &Fake, env: &[(&str, &str)], stdin: &str) -> Outcome {
    call_reader(plugin, env, &mut stdin.as_bytes())
}

const NS: &str = "/nonexistent/netns/t";

fn full_env(cmd: &str) -> Vec<(&str, &str)> {
    vec![
        ("CNI_COMMAND", cmd),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", NS),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
}

fn conf(version: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"n","type":"p"}}"#)
}

// VERSION answers with the request's version and the full list.
#[test]
fn version_command() {
    let p = Fake::new();
    let o = call(
        &p,
        &[("CNI_COMMAND", "VERSION")],
        r#"{"cniVersion":"1.1.0"}"#,
    );
    assert_eq!(o.exit, 0);
    assert_eq!(
        o.stdout,
        "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"
    );
    let o = call(
        &p,
        &[("CNI_COMMAND", "VERSION")],
        r#"{"cniVersion":"0.2.0"}"#,
    );
    assert_eq!(o.json()["cniVersion"], "0.2.0");
    // Unparsable stdin, an unknown version or no stdin at all: 1.1.0.
    for stdin in ["{not json", r#"{"cniVersion":"9.9.9"}"#, ""] {
        let o = call(&p, &[("CNI_COMMAND", "VERSION")], stdin);
        assert_eq!(o.exit, 0);
        assert_eq!(o.json()["cniVersion"], "1.1.0", "{stdin}");
    }
    assert!(p.commands().is_empty());
}

// Podman's probe: VERSION with dummy attachment values and an unreadable stdin still answers.
#[test]
fn version_probe_ignores_attachment_vars_and_stdin_errors() {
    let p = Fake::new();
    let env = [
        ("CNI_COMMAND", "VERSION"),
        ("CNI_NETNS", "dummy"),
        ("CNI_IFNAME", "dummy"),
        ("CNI_PATH", "dummy"),
    ];
    let o = call_reader(&p, &env, &mut Broken);
    assert_eq!(o.exit, 0);
    assert_eq!(o.json()["cniVersion"], "1.1.0");
    let limited = Fake {
        versions: vec![SpecVersion::V1_0_0, SpecVersion::V1_1_0],
        ..Fake::new()
    };
    let o = call(&limited, &env, &conf("1.0.0"));
    assert_eq!(
        o.json()["supportedVersions"],
        serde_json::json!(["1.0.0", "1.1.0"])
    );
}

// No command, no about string: code 4 naming CNI_COMMAND.
#[test]
fn no_command_without_about() {
    let p = Fake::new();
    let o = call(&p, &[], "{}");
    let e = o.error(code::INVALID_ENVIRONMENT);
    assert_eq!(e["msg"], "required env variables [CNI_COMMAND] missing");
}

// Go's alternative: with an about string, it goes to stderr and exit is 0.
#[test]
fn no_command_with_about() {
    let p = Fake {
        about: "CNI fake plugin".into(),
        versions: vec![SpecVersion::V1_0_0, SpecVersion::V1_1_0],
        ..Fake::new()
    };
    let o = call(&p, &[("CNI_COMMAND", "")], "");
    assert_eq!(o.exit, 0);
    assert_eq!(o.stdout, "");
    assert_eq!(
        o.stderr,
        "CNI fake plugin\nCNI protocol versions supported: 1.0.0, 1.1.0\n"
    );
}

// Unknown command, after the config checks.
#[test]
fn unknown_command() {
    let p = Fake::new();
    let env = [("CNI_COMMAND", "FOO"), ("CNI_PATH", "/opt/cni/bin")];
    let e = call(&p, &env, &conf("1.1.0")).error(code::INVALID_ENVIRONMENT);
    assert_eq!(e["msg"], "unknown CNI_COMMAND: FOO");
    // The config is checked first.
    call(&p, &env, "{not json").error(code::DECODING_FAILURE);
    call(&p, &env, r#"{"cniVersion":"1.1.0"}"#).error(code::INVALID_NETWORK_CONFIG);
}

// All missing variables in one error.
#[test]
fn missing_vars() {
    let p = Fake::new();
    let env = [("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c1")];
    let e = call(&p, &env, &conf("1.1.0")).error(code::INVALID_ENVIRONMENT);
    assert_eq!(
        e["msg"],
        "required env variables [CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
    assert!(p.commands().is_empty());
}

// Bad interface names and container IDs.
#[test]
fn bad_ifname_and_container_id() {
    let p = Fake::new();
    for bad in ["abcdefghijklmnop", "a/b"] {
        let mut env = full_env("ADD");
        env[3].1 = bad;
        call(&p, &env, &conf("1.1.0")).error(code::INVALID_ENVIRONMENT);
    }
    let mut env = full_env("DEL");
    env[1].1 = "../../x";
    let e = call(&p, &env, &conf("1.1.0")).error(code::INVALID_ENVIRONMENT);
    assert_eq!(e["msg"], "invalid characters in containerID");
    assert!(p.commands().is_empty());
}

// Bad JSON is code 6.
#[test]
fn bad_json() {
    let p = Fake::new();
    let e = call(&p, &full_env("ADD"), "{not json").error(code::DECODING_FAILURE);
    assert!(e["msg"]
        .as_str()
        .unwrap()
        .starts_with("error unmarshall network config: "));
    call(&p, &full_env("ADD"), "[1,2]").error(code::DECODING_FAILURE);
    call(&p, &full_env("DEL"), "").error(code::DECODING_FAILURE);
}

// Missing or invalid network name is code 7.
#[test]
fn missing_name() {
    let p = Fake::new();
    let e = call(&p, &full_env("ADD"), r#"{"cniVersion":"1.1.0","type":"p"}"#)
        .error(code::INVALID_NETWORK_CONFIG);
    assert_eq!(e["msg"], "missing network name");
    call(
        &p,
        &full_env("ADD"),
        r#"{"cniVersion":"1.1.0","name":"../x"}"#,
    )
    .error(code::INVALID_NETWORK_CONFIG);
}

// Unsupported version, details name the config version and the list.
#[test]
fn unsupported_version() {
    let p = Fake {
        versions: vec![SpecVersion::V1_0_0, SpecVersion::V1_1_0],
        ..Fake::new()
    };
    let o = call(&p, &full_env("ADD"), &conf("0.9.0"));
    let e = o.error(code::INCOMPATIBLE_VERSION);
    assert_eq!(e["msg"], "incompatible CNI versions");
    assert_eq!(
        e["details"],
        "config is \"0.9.0\", plugin supports [\"1.0.0\" \"1.1.0\"]"
    );
    // The error is stamped with a version we speak, not the unknown one.
    assert_eq!(e["cniVersion"], "1.1.0");
    assert!(p.commands().is_empty());
}

// CHECK below 0.4.0 is code 1.
#[test]
fn check_version_gate() {
    let p = Fake::new();
    let e = call(&p, &full_env("CHECK"), &conf("0.3.1")).error(code::INCOMPATIBLE_VERSION);
    assert_eq!(e["msg"], "config version does not allow CHECK");
    call(&p, &full_env("CHECK"), &conf("0.4.0")).success_silent();
    assert_eq!(p.commands(), [Command::Check]);
}

// GC needs 1.1.0 and CNI_PATH only; success prints nothing.
#[test]
fn gc_gate() {
    let p = Fake::new();
    let env = [("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")];
    let e = call(&p, &env, &conf("1.0.0")).error(code::INCOMPATIBLE_VERSION);
    assert_eq!(e["msg"], "config version does not allow GC");
    let stdin = r#"{"cniVersion":"1.1.0","name":"n","type":"p","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#;
    call(&p, &env, stdin).success_silent();
    let calls = p.calls.borrow();
    assert_eq!(calls[0].command, Command::Gc);
    assert_eq!(calls[0].conf.valid_attachments.as_ref().unwrap().len(), 1);
}

// STATUS needs 1.1.0; a not-ready answer is printed as is.
#[test]
fn status_gate_and_error() {
    let p = Fake::new();
    let env = [("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/opt/cni/bin")];
    let e = call(&p, &env, &conf("1.0.0")).error(code::INCOMPATIBLE_VERSION);
    assert_eq!(e["msg"], "config version does not allow STATUS");
    call(&p, &env, &conf("1.1.0")).success_silent();
    let down = Fake {
        error: Some(CniError::not_available("pool exhausted")),
        ..Fake::new()
    };
    let e = call(&down, &env, &conf("1.1.0")).error(code::PLUGIN_NOT_AVAILABLE);
    assert_eq!(e["msg"], "pool exhausted");
}

// The plugin's versions must reach the config's.
#[test]
fn plugin_version_gate() {
    let p = Fake {
        versions: vec![SpecVersion::V0_4_0, SpecVersion::V1_0_0],
        ..Fake::new()
    };
    let env = [("CNI_COMMAND", "GC"), ("CNI_PATH", "/x")];
    let e = call(&p, &env, &conf("1.1.0")).error(code::INCOMPATIBLE_VERSION);
    assert_eq!(e["msg"], "plugin version does not allow GC");
}

// A stdin read error is code 5.
#[test]
fn stdin_read_error() {
    let p = Fake::new();
    let e = call_reader(&p, &full_env("ADD"), &mut Broken).error(code::IO_FAILURE);
    assert!(e["msg"]
        .as_str()
        .unwrap()
        .starts_with("error reading from stdin: "));
}

// Hardening (7): stdin is capped; a bigger request is a clear code-5 error, no callback.
#[test]
fn oversized_stdin_is_refused() {
    let p = Fake::new();
    let mut big = io::repeat(b' ').take(crate::runner::STDIN_LIMIT + 1);
    let e = call_reader(&p, &full_env("ADD"), &mut big).error(code::IO_FAILURE);
    assert!(
        e["msg"].as_str().unwrap().contains("larger than 16 MiB"),
        "{e}"
    );
    assert!(p.commands().is_empty());
}

// Hardening (4): one GC policy, enforced before any plugin's gc runs.
#[test]
fn gc_without_valid_list_is_refused_for_every_plugin() {
    let p = Fake::new();
    let env = [("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")];
    let e = call(&p, &env, &conf("1.1.0")).error(code::INVALID_NETWORK_CONFIG);
    assert!(e["msg"].as_str().unwrap().contains("valid-attachments"));
    assert!(p.commands().is_empty());
    let legacy = r#"{"cniVersion":"1.1.0","name":"n","type":"p","cni.dev/attachments":[]}"#;
    call(&p, &env, legacy).success_silent();
    assert_eq!(p.commands(), [Command::Gc]);
}

struct Broken;
impl Read for Broken {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other("pipe exploded"))
    }
}

// The ADD result, in the request's version, 4-space indented, no newline.
#[test]
fn add_prints_result_in_request_version() {
    let p = Fake::new();
    let o = call(&p, &full_env("ADD"), &conf("1.0.0"));
    assert_eq!(o.exit, 0);
    assert!(o.stdout.starts_with("{\n    \"cniVersion\": \"1.0.0\""));
    assert!(!o.stdout.ends_with('\n'));
    assert_eq!(o.json()["ips"][0]["address"], "198.18.1.5/16");
    let o = call(&p, &full_env("ADD"), &conf("0.2.0"));
    assert_eq!(o.json()["ip4"]["ip"], "198.18.1.5/16");
    let o = call(&p, &full_env("ADD"), &conf("0.3.1"));
    assert_eq!(o.json()["ips"][0]["version"], "4");
    // A missing cniVersion is 0.1.0.
    let o = call(&p, &full_env("ADD"), r#"{"name":"n"}"#);
    assert_eq!(o.json()["cniVersion"], "0.1.0");
}

// A result that cannot be written in the request's layout is an internal error, not a panic.
#[test]
fn unrenderable_result_is_internal_error() {
    let p = Fake {
        result: CniResult::new(SpecVersion::V1_1_0),
        ..Fake::new()
    };
    let e = call(&p, &full_env("ADD"), &conf("0.2.0")).error(code::INTERNAL);
    assert_eq!(e["cniVersion"], "0.2.0");
}

// DEL, CHECK print nothing on success.
#[test]
fn del_and_check_silent() {
    let p = Fake::new();
    call(&p, &full_env("DEL"), &conf("1.1.0")).success_silent();
    call(&p, &full_env("CHECK"), &conf("1.1.0")).success_silent();
    let mut del = full_env("DEL");
    del.retain(|(k, _)| *k != "CNI_NETNS");
    call(&p, &del, &conf("0.3.1")).success_silent();
    assert_eq!(p.commands(), [Command::Del, Command::Check, Command::Del]);
}

// A typed error is printed unchanged, stamped with the request's version.
#[test]
fn typed_errors_unchanged() {
    let p = Fake {
        error: Some(CniError::invalid_config("bad subnet").with_details("198.18.0.0/33")),
        ..Fake::new()
    };
    let o = call(&p, &full_env("ADD"), &conf("0.4.0"));
    let e = o.error(code::INVALID_NETWORK_CONFIG);
    assert_eq!(e["msg"], "bad subnet");
    assert_eq!(e["details"], "198.18.0.0/33");
    assert_eq!(e["cniVersion"], "0.4.0");
    assert!(o.stdout.contains("\n    \"code\": 7"));
}

// CNI_NETNS equal to our own namespace is code 8, checked before ADD and DEL run.
#[test]
fn own_netns_rejected_before_callback() {
    if std::fs::metadata("/proc/self/ns/net").is_err() {
        eprintln!("skipped: no /proc/self/ns/net");
        return;
    }
    let p = Fake::new();
    for cmd in ["ADD", "DEL"] {
        let mut env = full_env(cmd);
        env[2].1 = "/proc/self/ns/net";
        let e = call(&p, &env, &conf("1.1.0")).error(code::INVALID_NETNS);
        assert_eq!(
            e["msg"],
            "plugin's netns and netns from CNI_NETNS should not be the same"
        );
    }
    assert!(p.commands().is_empty());
    for value in ["1", "TRUE", "true"] {
        let mut env = full_env("ADD");
        env[2].1 = "/proc/self/ns/net";
        env.push(("CNI_NETNS_OVERRIDE", value));
        assert_eq!(call(&p, &env, &conf("1.1.0")).exit, 0);
    }
}

// prevResult reaches the callback parsed; DEL tolerates a broken one.
#[test]
fn prev_result_handling() {
    let p = Fake::new();
    let stdin = r#"{"cniVersion":"1.1.0","name":"n","prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"198.18.9.2/24","interface":0}]}}"#;
    call(&p, &full_env("CHECK"), stdin).success_silent();
    let prev = p.calls.borrow()[0].prev_result.clone().unwrap();
    assert_eq!(prev.interfaces[0].name, "eth0");
    assert_eq!(prev.ips[0].interface, Some(0));

    let broken = r#"{"cniVersion":"1.1.0","name":"n","prevResult":{"ips":[{"address":"x"}]}}"#;
    call(&p, &full_env("ADD"), broken).error(code::DECODING_FAILURE);
    call(&p, &full_env("DEL"), broken).success_silent();
    assert!(p.calls.borrow().last().unwrap().prev_result.is_none());
}

// The callback sees every attachment parameter and the raw stdin.
#[test]
fn callback_sees_everything() {
    let p = Fake::new();
    let mut env = full_env("ADD");
    env.push(("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p"));
    let stdin = r#"{"cniVersion":"0.3.1","name":"n","type":"p","big":123456789012345678901}"#;
    call(&p, &env, stdin);
    let calls = p.calls.borrow();
    let a = &calls[0];
    assert_eq!(
        (
            a.container_id.as_str(),
            a.netns.to_str().unwrap(),
            a.ifname.as_str()
        ),
        ("c1", NS, "eth0")
    );
    assert_eq!(a.cni_args().unwrap().get("K8S_POD_NAME"), Some("p"));
    assert_eq!(a.path_dirs(), [std::path::PathBuf::from("/opt/cni/bin")]);
    assert_eq!(a.stdin, stdin.as_bytes());
    assert_eq!(a.version, SpecVersion::V0_3_1);
    assert_eq!(
        a.conf.raw.get("big").unwrap().get(),
        "123456789012345678901"
    );
}

// Errors found before the config is read are stamped 1.1.0; nothing else reaches stdout.
#[test]
fn early_errors_stamped_current() {
    let p = Fake::new();
    let o = call(&p, &[("CNI_COMMAND", "ADD")], &conf("0.2.0"));
    assert_eq!(o.error(code::INVALID_ENVIRONMENT)["cniVersion"], "1.1.0");
    assert_eq!(o.stderr, "");
}

/// Panics in CHECK after creating a guard whose drop records that it ran.
struct Panicky {
    dropped: std::sync::atomic::AtomicBool,
}

struct Guard<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Plugin for Panicky {
    fn add(&self, _: &CmdArgs) -> Result<CniResult, CniError> {
        unreachable!()
    }
    fn del(&self, _: &CmdArgs) -> Result<(), CniError> {
        unreachable!()
    }
    fn check(&self, _: &CmdArgs) -> Result<(), CniError> {
        let _undo = Guard(&self.dropped);
        panic!("check breaks");
    }
    fn supported_versions(&self) -> Vec<SpecVersion> {
        SpecVersion::ALL.to_vec()
    }
}

// A panic unwinds through the callback (destructors, the undo stacks, run) and becomes a
// code-999 error stamped with the request's version, with no panic text on stdout.
#[test]
fn a_panic_unwinds_and_answers_999() {
    let p = Panicky {
        dropped: std::sync::atomic::AtomicBool::new(false),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = run_with(
        &p,
        &full_env("CHECK"),
        &mut conf("0.4.0").as_bytes(),
        &mut out,
        &mut err,
    );
    assert_eq!(exit, 1);
    assert!(p.dropped.load(std::sync::atomic::Ordering::SeqCst));
    let stdout = String::from_utf8(out).unwrap();
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["code"], 999, "{stdout}");
    assert_eq!(v["cniVersion"], "0.4.0", "{stdout}");
    assert!(
        v["msg"].as_str().unwrap().contains("plugin panic"),
        "{stdout}"
    );
    assert!(!stdout.contains("check breaks") && !stdout.contains("panicked at"));
}

/// A plugin that owns rules: answers a repair with the mode and prevResult it got.
struct Repairing;

impl Plugin for Repairing {
    fn add(&self, _: &CmdArgs) -> Result<CniResult, CniError> {
        unreachable!("only repair is asked")
    }
    fn del(&self, _: &CmdArgs) -> Result<(), CniError> {
        unreachable!("only repair is asked")
    }
    fn check(&self, _: &CmdArgs) -> Result<(), CniError> {
        unreachable!("only repair is asked")
    }
    fn repair(&self, args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
        let prev = args
            .prev_result
            .as_ref()
            .ok_or_else(|| CniError::invalid_config("no prevResult"))?;
        Ok(RepairAnswer::Restored(vec![format!(
            "{mode:?} {} {} {}",
            args.container_id, args.ifname, prev.ips[0].address
        )]))
    }
}

// rcni's repair goes through the runner like the spec's commands: the attachment's container
// ID and ifname are required and checked, the netns and CNI_PATH are not; the plugin gets the
// mode and the parsed prevResult; a plugin without rules answers so by default.
#[test]
fn repair_commands_are_dispatched_to_the_trait() {
    let env = [
        ("CNI_COMMAND", "RCNI_REPAIR"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_IFNAME", "eth0"),
    ];
    let with_prev = r#"{"cniVersion":"1.0.0","name":"n","type":"p","prevResult":{"ips":[{"address":"198.18.0.2/24"}]}}"#;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = run_with(
        &Repairing,
        &env,
        &mut with_prev.as_bytes(),
        &mut out,
        &mut err,
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(exit, 0, "{v}");
    assert_eq!(
        v,
        serde_json::json!({"restored": ["Repair c1 eth0 198.18.0.2/24"]})
    );

    let look = [("CNI_COMMAND", "RCNI_REPAIR_LOOK"), env[1], env[2]];
    let rule_free = Fake::new();
    let o = call(&rule_free, &look, &conf("1.1.0"));
    assert_eq!(o.exit, 0);
    assert_eq!(o.json(), serde_json::json!({"ownsNoRules": true}));
    assert!(rule_free.commands().is_empty());

    let e = call(&Fake::new(), &look[..2], &conf("1.1.0")).error(code::INVALID_ENVIRONMENT);
    assert_eq!(e["msg"], "required env variables [CNI_IFNAME] missing");
    let bad = [look[0], ("CNI_CONTAINERID", "../x"), look[2]];
    call(&Fake::new(), &bad, &conf("1.1.0")).error(code::INVALID_ENVIRONMENT);
}
