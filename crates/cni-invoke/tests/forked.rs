//! Plugins of this executable started with fork and no exec (issue #15 item 5), against a real
//! child process. No libtest harness: a forked child is only made by a single-threaded
//! process, and libtest runs every test on a thread of its own.
//!
//! The test binary is its own plugin: run (or forked) under the name `probe`, it reports what
//! it sees (pid, process group, `comm`, the CNI variables and an extra one, stdin, which of two
//! descriptors it inherited, blocked signals) as JSON on stdout. Each check runs the probe
//! through [`exec_raw`] from a link named `probe` to this executable, once forked and once
//! executed (with a second thread alive, which makes `exec_raw` execute it), and both
//! answers must agree. For cargo-nextest, `--list` names one test, `forked_plugins`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cni_invoke::{
    exec_raw, register_own_plugins, ExecOptions, Invocation, InvokeError, OwnPlugins,
};
use serde_json::{json, Value};

/// Set in the test's environment before each run: what the probe should do.
const MODE: &str = "FORKED_TEST_MODE";
/// The descriptor numbers of the two files the test holds open, one close-on-exec.
const FDS: &str = "FORKED_TEST_FDS";

fn probe() -> i32 {
    let mode = std::env::var(MODE).unwrap_or_default();
    match mode.as_str() {
        "sleep" => {
            std::thread::sleep(Duration::from_secs(30));
            return 0;
        }
        "fail" => {
            print!(r#"{{"cniVersion":"1.1.0","code":11,"msg":"probe failed on purpose"}}"#);
            let _ = std::io::stdout().flush();
            return 1;
        }
        "panic" => panic!("probe panics on purpose"),
        _ => {}
    }
    let mut stdin = String::new();
    let _ = std::io::stdin().read_to_string(&mut stdin);
    let fds: Vec<i32> = std::env::var(FDS)
        .unwrap_or_default()
        .split(',')
        .filter_map(|f| f.parse().ok())
        .collect();
    let open: Vec<bool> = fds
        .iter()
        .map(|fd| Path::new(&format!("/proc/self/fd/{fd}")).exists())
        .collect();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap_or("")
        .trim()
        .to_string();
    let env = |k: &str| std::env::var(k).ok();
    let report = json!({
        "pid": std::process::id(),
        "pgid": nix::unistd::getpgrp().as_raw(),
        "comm": std::fs::read_to_string("/proc/self/comm").unwrap_or_default().trim(),
        "command": env("CNI_COMMAND"), "containerId": env("CNI_CONTAINERID"),
        "netns": env("CNI_NETNS"), "ifname": env("CNI_IFNAME"), "args": env("CNI_ARGS"),
        "path": env("CNI_PATH"), "extra": env("FORKED_TEST_EXTRA"), "home": env("HOME"),
        "stdin": stdin, "open": open, "blocked": blocked,
    });
    eprintln!("probe log line");
    print!("{report}");
    let _ = std::io::stdout().flush();
    0
}

fn is_probe(name: &str) -> bool {
    name == "probe"
}

fn run_probe(_: &str) -> i32 {
    probe()
}

fn invocation() -> Invocation {
    Invocation {
        command: "ADD".into(),
        container_id: "c-forked".into(),
        netns: "/run/netns/forked-test".into(),
        ifname: "eth7".into(),
        args: "K=V".into(),
        path: "/nowhere".into(),
    }
}

fn options(timeout: Option<Duration>, clear_env: bool) -> ExecOptions {
    let fds = std::env::var(FDS).unwrap_or_default();
    ExecOptions {
        timeout,
        clear_env,
        extra_env: vec![("FORKED_TEST_EXTRA".into(), "x1".into()), (FDS.into(), fds)],
        forward_stderr: false,
        ..Default::default()
    }
}

/// Runs `f` with a second thread alive, so plugins of this executable are executed.
fn with_second_thread<T>(f: impl FnOnce() -> T) -> T {
    let (stop, stopped) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let _ = stopped.recv();
    });
    let out = f();
    drop(stop);
    t.join().unwrap();
    out
}

fn run(
    plugin: &Path,
    mode: &str,
    opts: &ExecOptions,
    stdin: &[u8],
) -> Result<Vec<u8>, InvokeError> {
    std::env::set_var(MODE, mode);
    exec_raw(plugin, &invocation(), stdin, opts)
}

fn check(what: &str, ok: bool, failures: &mut Vec<String>) {
    if ok {
        println!("ok   {what}");
    } else {
        println!("FAIL {what}");
        failures.push(what.to_string());
    }
}

fn main() -> ExitCode {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if Path::new(&argv0).file_name().is_some_and(|n| n == "probe") {
        return ExitCode::from(probe() as u8);
    }
    // The listing protocol of libtest that cargo-nextest speaks to a test binary: one test,
    // which runs every check below.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("forked_plugins: test");
        }
        return ExitCode::SUCCESS;
    }
    register_own_plugins(OwnPlugins {
        contains: is_probe,
        run: run_probe,
    });
    let dir = tempfile::tempdir().unwrap();
    let plugin: PathBuf = dir.path().join("probe");
    std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &plugin).unwrap();
    // Two open files: one close-on-exec (std's default), one inherited (flag cleared).
    let cloexec = File::open("/dev/null").unwrap();
    let inherited = File::open("/dev/null").unwrap();
    nix::fcntl::fcntl(
        &inherited,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    // Read by `options`, which passes it on even to a plugin with a cleared environment.
    std::env::set_var(
        FDS,
        format!("{},{}", cloexec.as_raw_fd(), inherited.as_raw_fd()),
    );
    std::env::set_var("HOME", "/home/forked-test");
    let mut failures = Vec::new();
    let stdin = br#"{"cniVersion":"1.1.0","name":"n","type":"probe"}"#;
    let me = std::process::id() as i64;

    for clear_env in [false, true] {
        let opts = options(Some(Duration::from_secs(20)), clear_env);
        let forked: Value =
            serde_json::from_slice(&run(&plugin, "report", &opts, stdin).unwrap()).unwrap();
        let executed: Value = serde_json::from_slice(
            &with_second_thread(|| run(&plugin, "report", &opts, stdin)).unwrap(),
        )
        .unwrap();
        let tag = if clear_env { " (clear_env)" } else { "" };
        println!("forked:   {forked}\nexecuted: {executed}");
        check(
            &format!("forked child is another process{tag}"),
            forked["pid"].as_i64() != Some(me),
            &mut failures,
        );
        check(
            &format!("forked child leads its own process group{tag}"),
            forked["pgid"] == forked["pid"] && executed["pgid"] == executed["pid"],
            &mut failures,
        );
        check(
            &format!("forked child is named after the plugin{tag}"),
            forked["comm"] == "probe",
            &mut failures,
        );
        check(
            &format!("close-on-exec descriptor closed, the other inherited{tag}"),
            forked["open"] == json!([false, true]) && executed["open"] == json!([false, true]),
            &mut failures,
        );
        let want_home = if clear_env {
            Value::Null
        } else {
            json!("/home/forked-test")
        };
        check(
            &format!("environment as given{tag}"),
            forked["home"] == want_home,
            &mut failures,
        );
        let same = [
            "command",
            "containerId",
            "netns",
            "ifname",
            "args",
            "path",
            "extra",
            "home",
            "stdin",
            "blocked",
            "comm",
        ]
        .iter()
        .all(|k| forked[k] == executed[k]);
        check(
            &format!("forked and executed see the same{tag}"),
            same,
            &mut failures,
        );
        check(
            &format!("stdin delivered{tag}"),
            forked["stdin"] == String::from_utf8_lossy(stdin).as_ref(),
            &mut failures,
        );
    }

    let opts = options(Some(Duration::from_secs(20)), false);
    let failed = |r: Result<Vec<u8>, InvokeError>| match r {
        Err(InvokeError::Plugin { error, status, .. }) => {
            format!("{} {} {status}", error.code, error.msg)
        }
        other => format!("unexpected: {other:?}"),
    };
    let forked = failed(run(&plugin, "fail", &opts, stdin));
    let executed = failed(with_second_thread(|| run(&plugin, "fail", &opts, stdin)));
    println!("fail: forked {forked:?}, executed {executed:?}");
    check(
        "a failing plugin's error is the same",
        forked == executed && forked.starts_with("11 "),
        &mut failures,
    );

    let forked = failed(run(&plugin, "panic", &opts, stdin));
    let executed = failed(with_second_thread(|| run(&plugin, "panic", &opts, stdin)));
    println!("panic: forked {forked:?}, executed {executed:?}");
    check(
        "a panicking plugin exits 101 either way",
        forked.ends_with("exit status 101") && executed.ends_with("exit status 101"),
        &mut failures,
    );

    let quick = options(Some(Duration::from_millis(300)), false);
    let started = Instant::now();
    let r = run(&plugin, "sleep", &quick, stdin);
    let took = started.elapsed();
    check(
        "a forked plugin past its deadline is killed and reaped",
        matches!(r, Err(InvokeError::Timeout { .. }))
            && took < Duration::from_secs(10)
            && nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)).is_err(),
        &mut failures,
    );

    // A plugin under another name, or one that is not this executable, is executed.
    let other = dir.path().join("sh-plugin");
    std::fs::write(&other, "#!/bin/sh\necho '{\"pid\":'$$'}'\n").unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out: Value = serde_json::from_slice(&run(&other, "report", &opts, stdin).unwrap()).unwrap();
    check(
        "a script is executed",
        out["pid"].as_i64().is_some_and(|p| p != me),
        &mut failures,
    );

    if failures.is_empty() {
        println!("forked: all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("forked: {} failed: {failures:?}", failures.len());
        ExitCode::FAILURE
    }
}
