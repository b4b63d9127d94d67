//! A reader that leaves early (`rcni list | head -0`, `rcni --help | true`) ends rcni quietly:
//! no panic text, and the status is the operation's own (0, or its failure status).

use std::fs;
use std::process::{Command, Output, Stdio};

const RCNI: &str = env!("CARGO_BIN_EXE_rcni");

/// Runs rcni with `args` and a stdout whose reading end is already closed, so every write to
/// it fails with EPIPE (Rust ignores SIGPIPE).
fn run_with_closed_stdout(args: &[&str], conf_dir: &std::path::Path) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(RCNI)
        .args(args)
        .env("NETCONFPATH", conf_dir)
        .env_remove("CNI_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn assert_quiet(out: &Output, status: i32, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: panic text: {stderr}");
    assert!(!stderr.contains("Broken pipe"), "{what}: {stderr}");
    assert_eq!(out.status.code(), Some(status), "{what}: {stderr}");
}

// Before: `rcni list | head -0` panicked ("failed printing to stdout: Broken pipe") with 101.
#[test]
fn a_closed_stdout_ends_rcni_quietly_with_the_operations_status() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("10-a.conflist"),
        r#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}"#,
    )
    .unwrap();
    for (args, status) in [
        (&["list"][..], 0),
        (&["--help"][..], 0),
        (&["list", "--json"][..], 0),
        (&["netns", "list"][..], 0),
    ] {
        let out = run_with_closed_stdout(args, dir.path());
        assert_quiet(&out, status, &args.join(" "));
    }
    // A failure reported as JSON on stdout keeps its own status.
    let out = run_with_closed_stdout(
        &[
            "--json",
            "check",
            "no-such-net",
            "/var/run/netns/rcni-no-such-ns",
        ],
        dir.path(),
    );
    assert_quiet(&out, 1, "a failing check");
}
