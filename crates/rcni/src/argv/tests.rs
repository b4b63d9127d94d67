//! The fast path against clap: whatever the fast path accepts, clap accepts and parses to the
//! same `Cli`; what it leaves to clap is left whole.

use std::ffi::OsString;
use std::process::Command as Process;

use clap::Parser;

use super::fast;
use crate::cli::Cli;

/// The environment variables either parser reads.
const VARS: [&str; 5] = [
    "NETCONFPATH",
    "CNI_PATH",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CAP_ARGS",
];

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// Both parsers under the process environment: `true` when the fast path took the line
/// (then clap must agree on every field), `false` when it left it to clap.
fn compare(args: &[OsString]) -> bool {
    let quick = fast(args, |k| std::env::var_os(k));
    let full = Cli::try_parse_from(std::iter::once(OsString::from("rcni")).chain(args.to_vec()));
    match quick {
        Some(quick) => {
            let full =
                full.unwrap_or_else(|e| panic!("{args:?}: fast path took what clap rejects: {e}"));
            assert_eq!(format!("{quick:?}"), format!("{full:?}"), "{args:?}");
            true
        }
        None => false,
    }
}

/// Command lines without any of [`VARS`] set (the cases run in a child process whose
/// environment is controlled, see `env_case_child`).
fn compare_in_child(args: &[&str], env: &[(&str, &str)]) -> bool {
    let mut child = Process::new(std::env::current_exe().unwrap());
    child.args([
        "argv::tests::env_case_child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for v in VARS {
        child.env_remove(v);
    }
    child.env("RCNI_ARGV_CASE", args.join("\u{1f}"));
    child.envs(env.iter().copied());
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?} {env:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if stdout.contains("argv-case: fast") {
        true
    } else {
        assert!(stdout.contains("argv-case: clap"), "{stdout}");
        false
    }
}

/// Not a test on its own: the other half of [`compare_in_child`], run by it with the case in
/// `RCNI_ARGV_CASE` and the environment under test.
#[test]
#[ignore = "run by the env tests in a child process"]
fn env_case_child() {
    let case = std::env::var("RCNI_ARGV_CASE").expect("RCNI_ARGV_CASE");
    let args: Vec<OsString> = case.split('\u{1f}').map(OsString::from).collect();
    let path = if compare(&args) { "fast" } else { "clap" };
    println!("argv-case: {path}");
}

#[test]
fn plain_verbs_take_the_fast_path_and_match_clap() {
    for args in [
        &["add", "net", "ns"][..],
        &["del", "net", "/run/netns/x"],
        &["check", "net", "ns"],
        &["--conf-dir", "/c", "add", "net", "ns"],
        &["add", "net", "ns", "--conf-dir=/c", "--cache-dir", "/k"],
        &["add", "--json", "net", "--no-rollback", "ns"],
        &["--bin-dir", "/a:/b", "--bin-dir=/c", "del", "n", "ns"],
        &["--timeout", "7", "add", "n", "ns", "--container-id", "c1"],
        &["add", "n", "ns", "--timeout=007", "--ifname", "net1"],
        &["add", "n", "ns", "--args", "K=V;IgnoreUnknown=1"],
        &[
            "add",
            "n",
            "ns",
            "--args=K=V",
            "--capability-args",
            "{\"mac\":\"x\"}",
        ],
    ] {
        assert!(compare(&os(args)), "{args:?} should take the fast path");
    }
}

#[test]
fn anything_else_is_left_to_clap() {
    for args in [
        &[][..],
        &["add"],
        &["add", "net"],
        &["add", "net", "ns", "extra"],
        &["status", "net"],
        &["list"],
        &["netns", "add", "x"],
        &["--help"],
        &["add", "-h", "n", "ns"],
        &["--version"],
        &["-V"],
        &["add", "n", "ns", "--frobnicate"],
        &["add", "n", "ns", "--json=true"],
        &["add", "n", "ns", "--json", "--json"],
        &["add", "n", "ns", "--conf-dir", "/a", "--conf-dir", "/b"],
        &["add", "n", "ns", "--conf-dir"],
        &["add", "n", "ns", "--conf-dir="],
        &["add", "n", "ns", "--container-id", "-x"],
        &["add", "n", "ns", "--bin-dir", "/a::/b"],
        &["add", "n", "ns", "--bin-dir=/a:"],
        &["add", "n", "ns", "--timeout", "soon"],
        &["add", "n", "ns", "--timeout", "-1"],
        &["add", "n", "ns", "--timeout", "99999999999999999999999"],
        &["add", "--", "n", "ns"],
        &["add", "-", "ns"],
        &["--conf", "/c", "add", "n", "ns"],
        &["ad", "n", "ns"],
    ] {
        assert!(!compare(&os(args)), "{args:?} should be left to clap");
    }
}

#[test]
fn non_utf8_arguments_are_left_to_clap() {
    use std::os::unix::ffi::OsStringExt;
    let args = vec![
        OsString::from("add"),
        OsString::from("n"),
        OsString::from_vec(vec![b'n', 0xff]),
    ];
    assert!(fast(&args, |_| None).is_none());
}

#[test]
fn environment_fills_what_flags_do_not_give() {
    let env = [
        ("NETCONFPATH", "/env/conf"),
        ("CNI_PATH", "/e1:/e2"),
        ("CNI_IFNAME", "net9"),
        ("CNI_ARGS", "A=1"),
        ("CAP_ARGS", "{}"),
    ];
    assert!(compare_in_child(&["add", "n", "ns"], &env));
    // A flag wins over its variable.
    assert!(compare_in_child(
        &[
            "add",
            "n",
            "ns",
            "--conf-dir",
            "/f",
            "--bin-dir",
            "/b",
            "--ifname",
            "x",
            "--args",
            "B=2"
        ],
        &env
    ));
    assert!(compare_in_child(&["del", "n", "ns"], &[]));
}

#[test]
fn odd_environment_is_left_to_clap() {
    for env in [
        &[("NETCONFPATH", "")][..],
        &[("CNI_PATH", "")],
        &[("CNI_PATH", "/a::/b")],
        &[("CNI_IFNAME", "")],
        &[("CNI_ARGS", "")],
        &[("CAP_ARGS", "")],
    ] {
        assert!(!compare_in_child(&["add", "n", "ns"], env), "{env:?}");
    }
}
