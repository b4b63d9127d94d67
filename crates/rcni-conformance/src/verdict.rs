//! The conformance table: one verdict per (plugin, check).

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "detail", rename_all = "kebab-case")]
pub enum Verdict {
    Pass,
    Fail(String),
    /// The check does not apply to this plugin; the text says why.
    NotApplicable(String),
}

impl Verdict {
    /// Pass when `ok`, else a failure saying `why`.
    pub fn expect(ok: bool, why: impl FnOnce() -> String) -> Verdict {
        if ok {
            Verdict::Pass
        } else {
            Verdict::Fail(why())
        }
    }

    pub fn is_fail(&self) -> bool {
        matches!(self, Verdict::Fail(_))
    }

    fn cell(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail(_) => "FAIL",
            Verdict::NotApplicable(_) => "n/a",
        }
    }
}

/// Checks in the order of the table's columns.
pub const CHECKS: &[&str] = &[
    "version",
    "no-command",
    "unknown-command",
    "missing-env",
    "bad-ifname",
    "bad-json",
    "missing-name",
    "unsupported-version",
    "check-gate",
    "status-gate",
    "gc-gate",
    "add",
    "check",
    "result-versions",
    "passthrough",
    "status",
    "gc",
    "del-idempotent",
    "clean-stdout",
];

/// Every plugin's verdicts.
#[derive(Debug, Default, Serialize)]
pub struct Table {
    pub plugins: BTreeMap<String, BTreeMap<&'static str, Verdict>>,
}

impl Table {
    pub fn record(&mut self, plugin: &str, check: &'static str, v: Verdict) {
        debug_assert!(CHECKS.contains(&check), "unknown check {check}");
        self.plugins
            .entry(plugin.to_string())
            .or_default()
            .insert(check, v);
    }

    pub fn failures(&self) -> usize {
        self.plugins
            .values()
            .flat_map(|m| m.values())
            .filter(|v| v.is_fail())
            .count()
    }

    /// The table as text: a grid, then every failure with its reason.
    pub fn render(&self) -> String {
        let width = self
            .plugins
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(6)
            .max(6);
        let mut out = String::new();
        for (i, check) in CHECKS.iter().enumerate() {
            out.push_str(&format!("  c{:<2} {check}\n", i + 1));
        }
        out.push_str(&format!("{:<width$}", "plugin"));
        for i in 0..CHECKS.len() {
            out.push_str(&format!(" {:>4}", format!("c{}", i + 1)));
        }
        out.push('\n');
        for (plugin, verdicts) in &self.plugins {
            out.push_str(&format!("{plugin:<width$}"));
            for check in CHECKS {
                let cell = verdicts.get(check).map_or("-", Verdict::cell);
                out.push_str(&format!(" {cell:>4}"));
            }
            out.push('\n');
        }
        let mut failures = Vec::new();
        for (plugin, verdicts) in &self.plugins {
            for check in CHECKS {
                if let Some(Verdict::Fail(why)) = verdicts.get(check) {
                    failures.push(format!("  {plugin} {check}: {why}"));
                }
            }
        }
        if !failures.is_empty() {
            out.push_str("failures:\n");
            out.push_str(&failures.join("\n"));
            out.push('\n');
        }
        let mut not_applicable = Vec::new();
        for (plugin, verdicts) in &self.plugins {
            // Each distinct reason once, with the checks it covers.
            let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
            for check in CHECKS {
                if let Some(Verdict::NotApplicable(why)) = verdicts.get(check) {
                    match reasons.iter_mut().find(|(w, _)| *w == why.as_str()) {
                        Some((_, checks)) => checks.push(check),
                        None => reasons.push((why.as_str(), vec![check])),
                    }
                }
            }
            for (why, checks) in reasons {
                not_applicable.push(format!("  {plugin} {}: {why}", checks.join(", ")));
            }
        }
        if !not_applicable.is_empty() {
            out.push_str("not applicable:\n");
            out.push_str(&not_applicable.join("\n"));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_and_listed() {
        let mut t = Table::default();
        t.record("bridge", "version", Verdict::Pass);
        t.record("bridge", "add", Verdict::Fail("exit 1".into()));
        t.record("loopback", "gc", Verdict::NotApplicable("no 1.1.0".into()));
        assert_eq!(t.failures(), 1);
        let text = t.render();
        assert!(text.contains("bridge add: exit 1"), "{text}");
        assert!(text.contains("  loopback gc: no 1.1.0"), "{text}");
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["plugins"]["bridge"]["add"]["verdict"], "fail");
        assert_eq!(v["plugins"]["loopback"]["gc"]["verdict"], "not-applicable");
    }
}
