//! Protocol checks that need no kernel work: VERSION, the environment, the config and the
//! per-command version gates (CHECK from 0.4.0, STATUS and GC from 1.1.0). Each plugin must refuse
//! these before it changes anything.

use cni_types::SpecVersion;

use super::exec::{Env, Outcome};
use super::verdict::Verdict;
use super::Subject;

/// The versions the plugin's VERSION answer claims, and the verdict on that answer.
pub fn version(s: &mut Subject) -> (Verdict, Vec<String>) {
    let out = s.call(&Env::command("VERSION"), r#"{"cniVersion":"1.1.0"}"#);
    let Some(v) = out.json().filter(|_| out.success()) else {
        return (Verdict::Fail(out.describe()), Vec::new());
    };
    let claimed: Vec<String> = v["supportedVersions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let well_formed = v["cniVersion"].is_string()
        && !claimed.is_empty()
        && claimed.iter().all(|c| SpecVersion::parse(c).is_ok());
    (
        Verdict::expect(well_formed, || {
            format!("not a VERSION answer: {}", out.describe())
        }),
        claimed,
    )
}

/// An error with `code` and a well-formed error object.
fn expect_code(out: &Outcome, code: u64) -> Verdict {
    Verdict::expect(out.error_code() == Some(code), || {
        format!("expected error code {code}, got {}", out.describe())
    })
}

fn config(version: &str, plugin: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"conformance","type":"{plugin}"}}"#)
}

pub fn run_all(s: &mut Subject, claims_1_1: bool) {
    let name = s.name.clone();
    let full = s.full_env("ADD", "conf-proto", "eth0");

    // Without CNI_COMMAND, an error 4, or (Go's skeleton with an about text) the about
    // text on stderr and exit 0 with nothing on stdout.
    let out = s.call(&Env::default(), "{}");
    let about = out.success() && out.stdout.trim().is_empty() && !out.stderr.trim().is_empty();
    let v = if about {
        Verdict::Pass
    } else {
        expect_code(&out, 4)
    };
    s.record("no-command", v);

    let out = s.call(
        &full.clone().with("CNI_COMMAND", "FOO"),
        &config("1.0.0", &name),
    );
    s.record("unknown-command", expect_code(&out, 4));

    // Every missing variable named at once.
    let out = s.call(
        &Env::command("ADD").with("CNI_CONTAINERID", "conf-proto"),
        &config("1.0.0", &name),
    );
    let names_both = out.stdout.contains("CNI_NETNS") && out.stdout.contains("CNI_IFNAME");
    let v = match expect_code(&out, 4) {
        Verdict::Pass if !names_both => Verdict::Fail(format!(
            "the error does not name every missing variable: {}",
            out.describe()
        )),
        v => v,
    };
    s.record("missing-env", v);

    let out = s.call(
        &full.clone().with("CNI_IFNAME", "abcdefghijklmnop"),
        &config("1.0.0", &name),
    );
    s.record("bad-ifname", expect_code(&out, 4));

    let out = s.call(&full, "{not json");
    s.record("bad-json", expect_code(&out, 6));

    let out = s.call(
        &full,
        &format!(r#"{{"cniVersion":"1.0.0","type":"{name}"}}"#),
    );
    s.record("missing-name", expect_code(&out, 7));

    let out = s.call(&full, &config("0.9.0", &name));
    s.record("unsupported-version", expect_code(&out, 1));

    let check = full.clone().with("CNI_COMMAND", "CHECK");
    let out = s.call(&check, &config("0.3.1", &name));
    s.record("check-gate", expect_code(&out, 1));

    for (check_id, command) in [("status-gate", "STATUS"), ("gc-gate", "GC")] {
        if !claims_1_1 {
            s.record(
                check_id,
                Verdict::NotApplicable("the plugin does not claim spec 1.1.0".into()),
            );
            continue;
        }
        let env = Env::command(command).with("CNI_PATH", s.cni_path());
        let out = s.call(&env, &config("1.0.0", &name));
        s.record(check_id, expect_code(&out, 1));
    }
}

/// True if every stdout seen was empty or one JSON value, and every failure an error object.
pub fn clean_stdout(outcomes: &[Outcome]) -> Verdict {
    let bad = outcomes.iter().find(|o| {
        let out = o.stdout.trim();
        if o.success() {
            !out.is_empty() && o.json().is_none()
        } else {
            o.error_code().is_none() && !o.timed_out
        }
    });
    match bad {
        None => Verdict::Pass,
        Some(o) => Verdict::Fail(format!(
            "stdout is not one result or error object: {}",
            o.describe()
        )),
    }
}
