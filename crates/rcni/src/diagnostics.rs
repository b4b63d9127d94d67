//! `rcni lab`, `rcni conformance` and `rcni doctor`: their flags handed to the diagnostics
//! crates (`rcni-lab`, `rcni-conformance`, `rcni-doctor`), which do the work and print the
//! reports; a failed check only sets the exit code.

use std::sync::Arc;

use serde_json::json;

use cni_types::code;

use crate::cli::{ConformanceArgs, DoctorArgs, Global, LabArgs};
use crate::failure::Failure;
use crate::netns::LinuxNamespaces;
use crate::policy::store::Datastore;
use crate::setup;

/// `rcni lab`: the report is printed as the lab goes.
pub fn lab(g: &Global, l: &LabArgs) -> Result<(), Failure> {
    let opts = rcni_lab::LabOptions {
        config: l.config.clone(),
        bin_dir: g.bin_dirs.first().cloned(),
        json: g.json,
        record: l.record.clone(),
    };
    if rcni_lab::run(&opts).ok() {
        Ok(())
    } else {
        Err(Failure::Reported)
    }
}

/// `rcni conformance`: the table, as text or JSON.
pub fn conformance(g: &Global, c: &ConformanceArgs) -> Result<(), Failure> {
    let bin_dir = rcni_conformance::bin_dir(&g.bin_dirs).map_err(Failure::usage)?;
    let opts = rcni_conformance::Options {
        bin_dir,
        plugins: c.plugins.clone(),
    };
    let table = rcni_conformance::run(&opts)
        .map_err(|e| Failure::other("conformance", code::INTERNAL, e))?;
    if g.json {
        let v = json!({"failed": table.failures(), "plugins": &table.plugins});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", table.render());
        println!("rcni conformance: {} failed", table.failures());
    }
    if table.failures() == 0 {
        Ok(())
    } else {
        Err(Failure::Reported)
    }
}

/// `rcni doctor explain MESSAGE` (`-`: the message from stdin).
pub fn explain(g: &Global, message: &str) -> Result<(), Failure> {
    let text = if message == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Failure::usage(format!("cannot read the message from stdin: {e}")))?;
        buf
    } else {
        message.to_string()
    };
    rcni_doctor::print(&rcni_doctor::explain(&text), g.json);
    Ok(())
}

/// `rcni doctor`: inspects the node (and fixes it with `--fix`); exit status 1 unless clean.
pub fn doctor(g: &Global, d: &DoctorArgs) -> Result<(), Failure> {
    let rt = setup::runtime(g);
    let opts = rcni_doctor::Options {
        conf_dir: g.conf_dir.clone(),
        pod_state_dir: d.pod_state_dir.clone(),
        fix: d.fix,
        json: g.json,
        namespaces: Arc::new(LinuxNamespaces),
        policy: policy_check(d),
    };
    match rcni_doctor::inspect(&rt, opts) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Failure::Reported),
        Err(e) => Err(Failure::other("doctor", code::INTERNAL, e)),
    }
}

/// The NetworkPolicy check when the etcd flags are given: the datastore read as
/// `rcni policy` reads it.
fn policy_check(d: &DoctorArgs) -> Option<rcni_doctor::PolicyCheck<'_>> {
    let etcd = d.etcd.as_ref()?;
    let prefix = d.prefix.as_deref().unwrap_or(cni_etcd::DEFAULT_PREFIX);
    let read = move || {
        let stored = Datastore::open(etcd, prefix).and_then(|mut ds| ds.cluster());
        stored
            .map(|s| rcni_doctor::StoredCluster {
                cluster: s.cluster,
                bad: s.bad,
                nodes: s.nodes,
            })
            .map_err(|p| {
                let text = p.text.strip_prefix("error: ").unwrap_or(&p.text);
                text.to_string()
            })
    };
    Some(rcni_doctor::PolicyCheck {
        node: d.node_name.clone(),
        read: Box::new(read),
    })
}
