//! The lab's step-by-step report: each check is a step on one layer, with a verdict and detail.

use serde::Serialize;

/// The layer a step proves something on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    Setup,
    PluginResult,
    Kernel,
    Ipam,
    Traffic,
    /// CHECK and a repeated ADD of a live attachment.
    Lifecycle,
    Teardown,
    /// Controlled failures, their evidence and their cleanup.
    Failures,
    /// The lab's scope before and after the whole run.
    Snapshot,
    /// The record of every plugin run.
    Evidence,
}

impl Layer {
    fn title(self) -> &'static str {
        match self {
            Layer::Setup => "setup",
            Layer::PluginResult => "plugin result",
            Layer::Kernel => "kernel",
            Layer::Ipam => "ipam",
            Layer::Traffic => "traffic",
            Layer::Lifecycle => "lifecycle",
            Layer::Teardown => "teardown",
            Layer::Failures => "failures",
            Layer::Snapshot => "snapshot",
            Layer::Evidence => "evidence",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
    /// Evidence recorded without a verdict (what a failed ADD left); never counts as passed.
    Note,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub layer: Layer,
    pub check: String,
    pub verdict: Verdict,
    pub detail: String,
}

/// Collects steps; prints each one as it happens unless the output is JSON.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub steps: Vec<Step>,
    #[serde(skip)]
    pub quiet: bool,
}

impl Report {
    pub fn new(quiet: bool) -> Self {
        Report {
            steps: Vec::new(),
            quiet,
        }
    }

    pub fn record(
        &mut self,
        layer: Layer,
        check: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) {
        let step = Step {
            layer,
            check: check.into(),
            verdict,
            detail: detail.into(),
        };
        if !self.quiet {
            let mark = match step.verdict {
                Verdict::Pass => "ok  ",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "skip",
                Verdict::Note => "note",
            };
            let detail = if step.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", step.detail)
            };
            println!(
                "  [{mark}] {:<13} {}{detail}",
                step.layer.title(),
                step.check
            );
        }
        self.steps.push(step);
    }

    /// Records a check from a boolean.
    pub fn check(
        &mut self,
        layer: Layer,
        check: impl Into<String>,
        ok: bool,
        detail: impl Into<String>,
    ) -> bool {
        self.record(
            layer,
            check,
            if ok { Verdict::Pass } else { Verdict::Fail },
            detail,
        );
        ok
    }

    /// Records a failure from an error.
    pub fn fail(&mut self, layer: Layer, check: impl Into<String>, err: impl std::fmt::Display) {
        self.record(layer, check, Verdict::Fail, err.to_string());
    }

    pub fn ok(&self) -> bool {
        self.steps.iter().all(|s| s.verdict != Verdict::Fail)
    }

    pub fn count(&self, v: Verdict) -> usize {
        self.steps.iter().filter(|s| s.verdict == v).count()
    }

    /// Passed, failed and skipped checks per layer, in the order layers first appear.
    pub fn by_layer(&self) -> Vec<(Layer, [usize; 3])> {
        let mut out: Vec<(Layer, [usize; 3])> = Vec::new();
        for s in &self.steps {
            let slot = match s.verdict {
                Verdict::Pass => 0,
                Verdict::Fail => 1,
                Verdict::Skip => 2,
                Verdict::Note => continue,
            };
            match out.iter_mut().find(|(l, _)| *l == s.layer) {
                Some((_, c)) => c[slot] += 1,
                None => {
                    let mut c = [0; 3];
                    c[slot] = 1;
                    out.push((s.layer, c));
                }
            }
        }
        out
    }

    /// One line per layer: `kernel 12 passed, 0 failed, 1 skipped`.
    pub fn layer_lines(&self) -> Vec<String> {
        self.by_layer()
            .into_iter()
            .map(|(l, [p, f, s])| format!("{:<13} {p} passed, {f} failed, {s} skipped", l.title()))
            .collect()
    }

    pub fn to_json(&self, evidence: Option<serde_json::Value>) -> String {
        let layers: serde_json::Map<String, serde_json::Value> = self
            .by_layer()
            .into_iter()
            .map(|(l, [p, f, s])| {
                (
                    serde_json::to_value(l)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    serde_json::json!({"passed": p, "failed": f, "skipped": s}),
                )
            })
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({
            "ok": self.ok(),
            "passed": self.count(Verdict::Pass),
            "failed": self.count(Verdict::Fail),
            "skipped": self.count(Verdict::Skip),
            "notes": self.count(Verdict::Note),
            "layers": layers,
            "steps": self.steps,
            "evidence": evidence,
        }))
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_and_json() {
        let mut r = Report::new(true);
        assert!(r.check(Layer::Kernel, "eth0 exists", true, ""));
        r.record(Layer::Ipam, "lease", Verdict::Skip, "not host-local");
        assert!(r.ok());
        r.fail(Layer::Traffic, "http", "refused");
        assert!(!r.ok());
        r.record(Layer::Failures, "left", Verdict::Note, "a veth");
        let v: serde_json::Value = serde_json::from_str(&r.to_json(None)).unwrap();
        assert_eq!(v["failed"], 1);
        assert_eq!(v["notes"], 1);
        assert_eq!(v["layers"]["kernel"]["passed"], 1);
        assert_eq!(v["layers"]["traffic"]["failed"], 1);
        assert_eq!(v["layers"]["ipam"]["skipped"], 1);
        assert!(
            v["layers"].get("failures").is_none(),
            "a note is not a check"
        );
        assert_eq!(v["steps"][1]["layer"], "ipam");
        assert_eq!(v["steps"][2]["verdict"], "fail");
    }
}
