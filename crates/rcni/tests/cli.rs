//! The `rcni` binary against fake plugins (no namespaces needed: fake plugins only record what
//! they are given). Checks cnitool environment compatibility, the environment plugins
//! see (all six `CNI_*` variables, as libcni sends them), exit codes and messages.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// A config dir with network `net` (plugins A then B) and a broken file, fake plugins
    /// that log their stdin and CNI_* environment, and an empty cache dir.
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        for d in ["net.d", "bin", "log", "cache"] {
            fs::create_dir(dir.path().join(d)).unwrap();
        }
        let s = Setup { dir };
        s.conf(
            "10-net.conflist",
            r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"A","capabilities":{"mac":true}},{"type":"B"}]}"#,
        );
        s.conf("05-broken.conflist", "{\n \"name\": \"broken\",\n ]");
        for p in ["A", "B"] {
            s.plugin(p, "");
        }
        s
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn conf(&self, file: &str, text: &str) {
        fs::write(self.path("net.d").join(file), text).unwrap();
    }

    /// A fake plugin; `add_fail` non-empty makes ADD print it and exit 1.
    fn plugin(&self, name: &str, add_fail: &str) {
        let log = self.path("log");
        let fail = if add_fail.is_empty() {
            String::new()
        } else {
            format!("if [ \"$CNI_COMMAND\" = ADD ]; then printf '%s' '{add_fail}'; exit 1; fi\n")
        };
        let script = format!(
            "#!/bin/sh\nlog='{log}'\necho \"{name} $CNI_COMMAND\" >> \"$log/order\"\nseq=$(wc -l < \"$log/order\" | tr -d ' ')\ncat > \"$log/$seq.stdin\"\nenv | grep -E '^(CNI_|RCNI_TEST_)' | sort > \"$log/$seq.env\"\n{fail}if [ \"$CNI_COMMAND\" = ADD ]; then printf '%s' '{{\"cniVersion\":\"1.0.0\",\"interfaces\":[{{\"name\":\"eth0\",\"sandbox\":\"'\"$CNI_NETNS\"'\"}}],\"ips\":[{{\"address\":\"198.18.0.9/24\",\"interface\":0}}]}}'; fi\nif [ \"$CNI_COMMAND\" = VERSION ]; then printf '%s' '{{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\"]}}'; fi\nexit 0\n",
            log = log.display(),
        );
        let p = self.path("bin").join(name);
        fs::write(&p, script).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `rcni` with the cnitool environment variables pointing at this setup.
    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rcni"));
        for var in ["CNI_ARGS", "CAP_ARGS", "CNI_IFNAME", "RCNI_LOG"] {
            c.env_remove(var);
        }
        c.env("NETCONFPATH", self.path("net.d"))
            .env("CNI_PATH", self.path("bin"))
            .args(["--cache-dir", &self.path("cache").display().to_string()]);
        c
    }

    fn run(&self, c: &mut Command) -> Output {
        c.output().unwrap()
    }

    fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.path("log/order"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn env(&self, seq: usize) -> Vec<String> {
        fs::read_to_string(self.path("log").join(format!("{seq}.env")))
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    fn stdin(&self, seq: usize) -> Value {
        serde_json::from_slice(&fs::read(self.path("log").join(format!("{seq}.stdin"))).unwrap())
            .unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn expected_container_id(netns: &Path) -> String {
    use sha2::{Digest, Sha512};
    let d = Sha512::digest(netns.as_os_str().as_encoded_bytes());
    let hex: String = d[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{hex}")
}

// cnitool's environment, the derived container ID, all six CNI_* variables, the
// runtime's own environment passed through and its CNI_* values overridden.
#[test]
fn cnitool_environment() {
    let s = Setup::new();
    let out = s.run(
        s.cmd()
            .env("CNI_IFNAME", "net5")
            .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p")
            .env("CAP_ARGS", r#"{"mac":"c2:11:22:33:44:55","ignored":1}"#)
            .env("CNI_CONTAINERID", "leaked")
            .env("RCNI_TEST_PASSTHROUGH", "yes")
            .args(["add", "net", "/run/netns/rcni-cli-test"]),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    let cid = expected_container_id(Path::new("/run/netns/rcni-cli-test"));
    let env = s.env(1);
    for want in [
        "CNI_COMMAND=ADD".to_string(),
        format!("CNI_CONTAINERID={cid}"),
        "CNI_NETNS=/run/netns/rcni-cli-test".into(),
        "CNI_IFNAME=net5".into(),
        "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=p".into(),
        format!("CNI_PATH={}", s.path("bin").display()),
        "RCNI_TEST_PASSTHROUGH=yes".into(),
    ] {
        assert!(env.contains(&want), "{want} not in {env:?}");
    }
    assert_eq!(s.stdin(1)["runtimeConfig"]["mac"], "c2:11:22:33:44:55");
    assert!(s.stdin(1)["runtimeConfig"].get("ignored").is_none());
    assert!(s
        .path("cache/results")
        .join(format!("net-{cid}-net5"))
        .exists());
    // The broken file (05-broken.conflist sorts first) does not hide `net`.
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));

    // DEL: same ID, reverse order, cached CAP_ARGS reused.
    let out =
        s.run(
            s.cmd()
                .env("CNI_IFNAME", "net5")
                .args(["del", "net", "/run/netns/rcni-cli-test"]),
        );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(s.calls(), ["A ADD", "B ADD", "B DEL", "A DEL"]);
    assert_eq!(s.stdin(4)["runtimeConfig"]["mac"], "c2:11:22:33:44:55");
    assert!(s
        .env(4)
        .contains(&"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=p".to_string()));
}

// Flags win over the environment; --bin-dir takes a colon list or repeats.
#[test]
fn flags_override_environment() {
    let s = Setup::new();
    let out = s.run(s.cmd().env("CNI_IFNAME", "envif").args([
        "--ifname",
        "flagif",
        "--container-id",
        "my-ctr",
        "--bin-dir",
        &format!("/nonexistent:{}", s.path("bin").display()),
        "add",
        "net",
        "/x",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let env = s.env(1);
    assert!(env.contains(&"CNI_IFNAME=flagif".to_string()), "{env:?}");
    assert!(
        env.contains(&"CNI_CONTAINERID=my-ctr".to_string()),
        "{env:?}"
    );
    assert!(env.contains(&format!(
        "CNI_PATH=/nonexistent:{}",
        s.path("bin").display()
    )));
}

// Exit status 1 with the CNI code for a failed operation; --json prints the error object.
#[test]
fn failure_exit_code_and_message() {
    let s = Setup::new();
    s.plugin(
        "B",
        r#"{"code":7,"msg":"bad subnet","details":"198.18.0.0/31 too small"}"#,
    );
    let out = s.run(s.cmd().args(["add", "net", "/x"]));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("rcni: add failed"), "{err}");
    assert!(
        err.contains(r#"type="B""#) && err.contains("bad subnet"),
        "{err}"
    );
    assert!(err.contains("details: 198.18.0.0/31 too small"), "{err}");
    assert!(
        err.contains("CNI error code 7 (invalid network config)"),
        "{err}"
    );
    // Rolled back: B DEL and A DEL ran.
    assert_eq!(s.calls(), ["A ADD", "B ADD", "B DEL", "A DEL"]);

    let out = s.run(s.cmd().args(["--json", "add", "net", "/x"]));
    assert_eq!(out.status.code(), Some(1));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["code"], 7);
    assert_eq!(e["cniVersion"], "1.1.0");

    // --no-rollback: libcni's behaviour.
    let before = s.calls().len();
    let out = s.run(s.cmd().args(["--no-rollback", "add", "net", "/x"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(s.calls()[before..], ["A ADD", "B ADD"]);

    // An unknown network is an operation failure too, naming the skipped file.
    let out = s.run(s.cmd().args(["check", "nope", "/x"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("05-broken.conflist"));
}

// Exit status 2 for usage problems.
#[test]
fn usage_errors_exit_2() {
    let s = Setup::new();
    for args in [
        vec!["add", "net"],
        vec!["frobnicate"],
        vec!["--capability-args", "[1]", "add", "net", "/x"],
        vec!["--args", "A=", "add", "net", "/x"],
        vec!["gc", "net", "--valid", "nocolon"],
    ] {
        let out = s.run(s.cmd().args(&args));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(s.calls().is_empty());
    for verb in [
        "add", "del", "check", "status", "gc", "version", "validate", "list", "netns",
    ] {
        let out = s.run(s.cmd().args([verb, "--help"]));
        assert!(out.status.success(), "{verb}");
        assert!(text(&out.stdout).contains("Usage: rcni"), "{verb}");
    }
}

// `rcni list` shows networks and per-file errors with positions.
#[test]
fn list_networks_and_errors() {
    let s = Setup::new();
    s.conf(
        "20-legacy.conf",
        r#"{"cniVersion":"0.3.1","name":"legacy","type":"A"}"#,
    );
    let out = s.run(s.cmd().args(["list"]));
    assert!(out.status.success());
    let o = text(&out.stdout);
    assert!(
        o.contains("net (default)  version 1.0.0  plugins: A -> B"),
        "{o}"
    );
    assert!(o.contains("legacy  version 0.3.1  plugins: A"), "{o}");
    assert!(
        o.contains("error: ") && o.contains("05-broken.conflist:3:2"),
        "{o}"
    );
    let out = s.run(s.cmd().args(["--json", "list"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["networks"][0]["name"], "net");
    assert_eq!(v["networks"][0]["default"], true);
    assert_eq!(v["errors"][0]["line"], 3);
}

// STATUS, GC, VERSION and validate through the CLI.
#[test]
fn status_gc_version_validate() {
    let s = Setup::new();
    let out = s.run(s.cmd().args(["status", "net"]));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("has no STATUS"));
    s.run(s.cmd().args(["--container-id", "c1", "add", "net", "/a"]));
    s.run(s.cmd().args(["--container-id", "c2", "add", "net", "/b"]));
    let out = s.run(s.cmd().args(["gc", "net", "--valid", "c1:eth0"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(s.path("cache/results/net-c1-eth0").exists());
    assert!(!s.path("cache/results/net-c2-eth0").exists());
    let out = s.run(s.cmd().args(["version", "net"]));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("A: 0.4.0, 1.0.0"));
    let out = s.run(s.cmd().args(["validate", "net"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("capabilities: mac"));
    s.conf(
        "30-new.conflist",
        r#"{"cniVersion":"1.1.0","name":"new","plugins":[{"type":"A"},{"type":"missing"}]}"#,
    );
    let out = s.run(s.cmd().args(["validate", "new"]));
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("does not support config version") && e.contains("missing"),
        "{e}"
    );
}
