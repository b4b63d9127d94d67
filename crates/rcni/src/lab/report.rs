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
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
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

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&serde_json::json!({
            "ok": self.ok(),
            "passed": self.count(Verdict::Pass),
            "failed": self.count(Verdict::Fail),
            "skipped": self.count(Verdict::Skip),
            "steps": self.steps,
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
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["failed"], 1);
        assert_eq!(v["steps"][1]["layer"], "ipam");
        assert_eq!(v["steps"][2]["verdict"], "fail");
    }
}
