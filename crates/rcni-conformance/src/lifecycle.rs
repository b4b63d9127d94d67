//! The lifecycle of a real attachment for plugins with a recipe: ADD in the plugin's best version,
//! CHECK, ADD in every older result version the plugin claims, prevResult passed through by meta
//! plugins, STATUS, GC keeping the valid attachment and then releasing it, and DEL idempotent also
//! without the namespace.

use std::path::Path;

use serde_json::{json, Value};

use cni_linux::{Handle, NetNs};
use rcni_lab::scratch::Namespaces;

use super::exec::Env;
use super::recipe::{Kind, Recipe};
use super::verdict::Verdict;
use super::Subject;

/// Result versions tried besides the main one, oldest first.
const RESULT_VERSIONS: &[&str] = &["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The highest of 1.1.0 and 1.0.0 the plugin claims.
pub fn main_version(claimed: &[String]) -> Option<&'static str> {
    ["1.1.0", "1.0.0"]
        .into_iter()
        .find(|v| claimed.iter().any(|c| c == v))
}

/// host-local lease files of `plugin` (every file of the network dir but its bookkeeping).
fn leases(scratch: &Path, plugin: &str) -> Vec<String> {
    let dir = Path::new(&Recipe::data_dir(scratch, plugin)).join(format!("conformance-{plugin}"));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with("last_reserved_ip") && n != "lock")
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn has_link(ns: &NetNs, name: &str) -> bool {
    Handle::in_netns(ns)
        .and_then(|mut h| h.link_by_name(name))
        .is_ok()
}

/// One attachment being driven through its life.
struct Attachment<'a> {
    cid: String,
    pod: &'a NetNs,
    /// Extra config keys: the meta plugins' prevResult.
    extra: Value,
}

/// The checks of the lifecycle, in the order they run.
pub const LIFECYCLE: [&str; 7] = [
    "add",
    "check",
    "result-versions",
    "passthrough",
    "status",
    "gc",
    "del-idempotent",
];

pub fn run_all(s: &mut Subject, recipe: Recipe, claimed: &[String], spaces: &mut Namespaces) {
    let (version, pod) = match prepare(s, recipe, claimed, spaces) {
        Ok(ready) => ready,
        Err(verdict) => {
            for c in LIFECYCLE {
                s.record(c, verdict.clone());
            }
            return;
        }
    };
    let host_end = format!("rcv{}", short(&s.name));
    let extra = match prev_result(s, recipe, &pod, &host_end, version) {
        Ok(v) => v,
        Err(e) => {
            for c in LIFECYCLE {
                s.record(c, Verdict::Fail(format!("fixture: {e}")));
            }
            return;
        }
    };
    let att = Attachment {
        cid: "conf-a".into(),
        pod: &pod,
        extra,
    };
    let Some(result) = add_and_check(s, recipe, &att, version) else {
        return;
    };

    // Results rendered in the requested version.
    let v = if recipe.kind == Kind::Meta {
        na("meta plugins return their prevResult; see passthrough")
    } else {
        result_versions(s, recipe, claimed, version, spaces)
    };
    s.record("result-versions", v);
    s.record("passthrough", passthrough(recipe, &att, &result));
    status_and_gc(s, recipe, claimed, &att);
    let v = del_idempotent(s, recipe, &att, version, &result);
    s.record("del-idempotent", v);
}

fn na(why: &str) -> Verdict {
    Verdict::NotApplicable(why.to_string())
}

/// The version to drive the attachment in and its pod namespace, once the host fixture is up
/// and the kernel has what the plugin needs; else the verdict of every lifecycle check.
fn prepare(
    s: &mut Subject,
    recipe: Recipe,
    claimed: &[String],
    spaces: &mut Namespaces,
) -> Result<(&'static str, NetNs), Verdict> {
    let version =
        main_version(claimed).ok_or_else(|| na("the plugin claims neither 1.0.0 nor 1.1.0"))?;
    recipe
        .host_fixture(s.host)
        .map_err(|e| Verdict::Fail(format!("fixture: {e}")))?;
    match recipe.missing_kernel_feature(s.host) {
        Ok(None) => {}
        Ok(Some(why)) => return Err(na(&why)),
        Err(e) => return Err(Verdict::Fail(format!("kernel probe: {e}"))),
    }
    let pod = spaces
        .create(&format!("{}-a", short(&s.name)))
        .map_err(|e| Verdict::Fail(format!("cannot create a pod namespace: {e}")))?;
    Ok((version, pod))
}

/// ADD, then CHECK against its result; the result, or `None` when ADD failed (the other
/// checks are then not applicable and the attachment is deleted).
fn add_and_check(
    s: &mut Subject,
    recipe: Recipe,
    att: &Attachment,
    version: &str,
) -> Option<Value> {
    let out = call(s, recipe, "ADD", att, version, &json!({}));
    let result = out.json().filter(|_| out.success());
    let add_verdict = match &result {
        None => Verdict::Fail(out.describe()),
        Some(r) => verify_add(s, recipe, att, version, r),
    };
    let added = !add_verdict.is_fail();
    s.record("add", add_verdict);
    if !added {
        for c in &LIFECYCLE[1..] {
            s.record(c, na("ADD failed"));
        }
        let _ = call(s, recipe, "DEL", att, version, &json!({}));
        return None;
    }
    let result = result.unwrap_or_default();
    let out = call(
        s,
        recipe,
        "CHECK",
        att,
        version,
        &json!({"prevResult": result}),
    );
    s.record(
        "check",
        Verdict::expect(out.success() && out.stdout.trim().is_empty(), || {
            out.describe()
        }),
    );
    Some(result)
}

/// A meta plugin passes the prevResult through; it may add interfaces of its own
/// (bandwidth's IFB) after the given ones.
fn passthrough(recipe: Recipe, att: &Attachment, result: &Value) -> Verdict {
    if recipe.kind != Kind::Meta {
        return na("only meta plugins get a prevResult on ADD");
    }
    let prev = &att.extra["prevResult"];
    let given = prev["interfaces"].as_array().cloned().unwrap_or_default();
    let kept = result["interfaces"]
        .as_array()
        .is_some_and(|got| got.len() >= given.len() && got[..given.len()] == given[..]);
    Verdict::expect(result["ips"] == prev["ips"] && kept, || {
        format!("result {result} does not carry prevResult {prev}")
    })
}

/// STATUS and GC, for plugins that claim spec 1.1.0.
fn status_and_gc(s: &mut Subject, recipe: Recipe, claimed: &[String], att: &Attachment) {
    if !claimed.iter().any(|c| c == "1.1.0") {
        s.record("status", na("the plugin does not claim spec 1.1.0"));
        s.record("gc", na("the plugin does not claim spec 1.1.0"));
        return;
    }
    let env = Env::command("STATUS").with("CNI_PATH", s.cni_path());
    let conf = recipe.config(&s.name, "1.1.0", &s.scratch, &json!({}));
    let out = s.call(&env, &conf.to_string());
    s.record(
        "status",
        Verdict::expect(out.success() && out.stdout.trim().is_empty(), || {
            out.describe()
        }),
    );
    let v = gc(s, recipe, att);
    s.record("gc", v);
}

fn short(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect()
}

/// For a meta plugin, the prevResult of a fixture interface; `{}` for the others.
fn prev_result(
    s: &Subject,
    recipe: Recipe,
    pod: &NetNs,
    host_end: &str,
    version: &str,
) -> Result<Value, String> {
    if recipe.kind != Kind::Meta {
        return Ok(json!({}));
    }
    let prev = recipe.meta_fixture(s.host, pod, host_end, version)?;
    Ok(json!({ "prevResult": prev }))
}

fn call(
    s: &mut Subject,
    recipe: Recipe,
    command: &str,
    att: &Attachment<'_>,
    version: &str,
    more: &Value,
) -> super::exec::Outcome {
    let mut extra = att.extra.clone();
    if let Value::Object(m) = more {
        for (k, v) in m {
            extra[k.clone()] = v.clone();
        }
    }
    let conf = recipe.config(&s.name, version, &s.scratch, &extra);
    let env = Env::command(command)
        .with("CNI_CONTAINERID", att.cid.clone())
        .with("CNI_NETNS", att.pod.path().display().to_string())
        .with("CNI_IFNAME", recipe.ifname)
        .with("CNI_PATH", s.cni_path());
    s.call(&env, &conf.to_string())
}

fn verify_add(
    s: &Subject,
    recipe: Recipe,
    att: &Attachment<'_>,
    version: &str,
    r: &Value,
) -> Verdict {
    if r["cniVersion"] != version {
        return Verdict::Fail(format!(
            "result cniVersion {} for a {version} config",
            r["cniVersion"]
        ));
    }
    match recipe.kind {
        Kind::Interface => {
            let pod_path = att.pod.path().display().to_string();
            let in_pod = r["interfaces"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|i| i["name"] == recipe.ifname && i["sandbox"] == pod_path.as_str());
            // loopback returns no interfaces before 1.0.0-era results; lo must be up anyway.
            if !in_pod && recipe.ifname != "lo" {
                return Verdict::Fail(format!(
                    "no interface {} with sandbox {pod_path} in {r}",
                    recipe.ifname
                ));
            }
            Verdict::expect(has_link(att.pod, recipe.ifname), || {
                format!("{} is not in the pod's namespace", recipe.ifname)
            })
        }
        Kind::Ipam => {
            let ips = r["ips"].as_array().map_or(0, Vec::len);
            if ips == 0 {
                return Verdict::Fail(format!("no ips in {r}"));
            }
            if recipe.uses_host_local(&s.name) && leases(&s.scratch, &s.name).is_empty() {
                return Verdict::Fail("no lease file was written".into());
            }
            Verdict::Pass
        }
        Kind::Meta => Verdict::Pass,
    }
}

/// ADD at each older version the plugin claims, in a fresh pod: the result's `cniVersion`
/// is the requested one; then DEL.
fn result_versions(
    s: &mut Subject,
    recipe: Recipe,
    claimed: &[String],
    main: &str,
    spaces: &mut Namespaces,
) -> Verdict {
    let mut tried = 0;
    for (i, v) in RESULT_VERSIONS.iter().enumerate() {
        if *v == main || !claimed.iter().any(|c| c == v) {
            continue;
        }
        let pod = match spaces.create(&format!("{}-v{i}", short(&s.name))) {
            Ok(p) => p,
            Err(e) => return Verdict::Fail(e),
        };
        let att = Attachment {
            cid: format!("conf-v{i}"),
            pod: &pod,
            extra: recipe.attachment_keys(&s.name, i + 1),
        };
        let out = call(s, recipe, "ADD", &att, v, &json!({}));
        let got = out.json().filter(|_| out.success());
        let _ = call(s, recipe, "DEL", &att, v, &json!({}));
        match got {
            Some(r) if r["cniVersion"] == *v => tried += 1,
            Some(r) => {
                return Verdict::Fail(format!("asked for {v}, got cniVersion {}", r["cniVersion"]))
            }
            None => return Verdict::Fail(format!("ADD at {v}: {}", out.describe())),
        }
    }
    if tried == 0 {
        Verdict::NotApplicable("the plugin claims no other result version".into())
    } else {
        Verdict::Pass
    }
}

/// GC keeps a valid attachment; GC without it releases its lease (host-local users).
fn gc(s: &mut Subject, recipe: Recipe, att: &Attachment<'_>) -> Verdict {
    let env = Env::command("GC").with("CNI_PATH", s.cni_path());
    let keep =
        json!({"cni.dev/valid-attachments": [{"containerID": att.cid, "ifname": recipe.ifname}]});
    let conf = recipe.config(&s.name, "1.1.0", &s.scratch, &keep);
    let before = leases(&s.scratch, &s.name);
    let out = s.call(&env, &conf.to_string());
    if !(out.success() && out.stdout.trim().is_empty()) {
        return Verdict::Fail(format!("GC keeping the attachment: {}", out.describe()));
    }
    if leases(&s.scratch, &s.name) != before {
        return Verdict::Fail("GC released the lease of a valid attachment".into());
    }
    if recipe.kind == Kind::Interface && !has_link(att.pod, recipe.ifname) {
        return Verdict::Fail("GC removed a valid attachment's interface".into());
    }
    let none = json!({"cni.dev/valid-attachments": []});
    let conf = recipe.config(&s.name, "1.1.0", &s.scratch, &none);
    let out = s.call(&env, &conf.to_string());
    if !(out.success() && out.stdout.trim().is_empty()) {
        return Verdict::Fail(format!("GC with no valid attachment: {}", out.describe()));
    }
    if recipe.uses_host_local(&s.name) && !leases(&s.scratch, &s.name).is_empty() {
        return Verdict::Fail("GC with no valid attachment kept the lease".into());
    }
    Verdict::Pass
}

/// DEL, DEL again, and DEL with a vanished namespace all succeed silently, and the
/// attachment is gone.
fn del_idempotent(
    s: &mut Subject,
    recipe: Recipe,
    att: &Attachment<'_>,
    version: &str,
    result: &Value,
) -> Verdict {
    let prev = json!({"prevResult": result});
    for round in ["DEL", "a second DEL"] {
        let out = call(s, recipe, "DEL", att, version, &prev);
        if !(out.success() && out.stdout.trim().is_empty()) {
            return Verdict::Fail(format!("{round}: {}", out.describe()));
        }
    }
    if recipe.kind == Kind::Interface && recipe.ifname != "lo" && has_link(att.pod, recipe.ifname) {
        return Verdict::Fail(format!("{} is still in the pod after DEL", recipe.ifname));
    }
    if recipe.uses_host_local(&s.name) && !leases(&s.scratch, &s.name).is_empty() {
        return Verdict::Fail("the lease is still there after DEL".into());
    }
    let gone = format!(
        "/run/netns/rconf-gone-{}-{}",
        std::process::id(),
        short(&s.name)
    );
    let conf = recipe.config(&s.name, version, &s.scratch, &att.extra);
    let env = Env::command("DEL")
        .with("CNI_CONTAINERID", att.cid.clone())
        .with("CNI_NETNS", gone.clone())
        .with("CNI_IFNAME", recipe.ifname)
        .with("CNI_PATH", s.cni_path());
    let out = s.call(&env, &conf.to_string());
    // A plugin that opens the netns path with O_CREAT (to lock it) makes a plain file there;
    // the suite removes it so nothing of the run is left, and says so.
    let made = Path::new(&gone).is_file();
    if made {
        let _ = std::fs::remove_file(&gone);
    }
    if made && !out.success() {
        return Verdict::Fail(format!(
            "DEL with a vanished netns created {gone} as a plain file, then failed: {}",
            out.describe()
        ));
    }
    Verdict::expect(
        out.success() && out.stdout.trim().is_empty() && !made,
        || {
            if made {
                format!("DEL with a vanished netns created {gone} as a plain file")
            } else {
                format!("DEL with a vanished netns: {}", out.describe())
            }
        },
    )
}
