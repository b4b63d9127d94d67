//! Collected measurements and their outputs: a Markdown table, JSON lines, and the samples
//! the chart is drawn from.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde_json::json;

use crate::stats::{median, quantile};

/// Samples of one quantity for one implementation.
pub struct Series {
    pub figure: &'static str,
    pub item: String,
    pub implementation: &'static str,
    pub unit: &'static str,
    pub samples: Vec<f64>,
}

/// One row of the table: a quantity measured for rcni and Go.
pub struct Row {
    pub figure: &'static str,
    pub item: String,
    pub unit: &'static str,
    pub rcni: Option<f64>,
    pub go: Option<f64>,
    pub note: String,
}

#[derive(Default)]
pub struct Report {
    pub series: Vec<Series>,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    /// Adds both implementations' samples and a median row.
    pub fn add_pair(
        &mut self,
        figure: &'static str,
        item: &str,
        unit: &'static str,
        rcni: Vec<f64>,
        go: Vec<f64>,
        note: &str,
    ) {
        self.rows.push(Row {
            figure,
            item: item.to_string(),
            unit,
            rcni: median(&rcni),
            go: median(&go),
            note: note.to_string(),
        });
        for (implementation, samples) in [("rcni", rcni), ("go", go)] {
            self.series.push(Series {
                figure,
                item: item.to_string(),
                implementation,
                unit,
                samples,
            });
        }
    }

    /// The in-process kernel floor for a latency item, shown against the plugins' medians.
    pub fn add_floor(&mut self, item: &str, samples: Vec<f64>) {
        let floor = median(&samples);
        let find = |imp: &str| {
            self.series
                .iter()
                .find(|s| s.figure == "latency" && s.item == item && s.implementation == imp)
                .and_then(|s| median(&s.samples))
        };
        let (rcni, go) = (find("rcni"), find("go"));
        let times = |v: Option<f64>| match (v, floor) {
            (Some(v), Some(f)) if f > 0.0 => format!("{:.2}x", v / f),
            _ => "n/a".into(),
        };
        self.rows.push(Row {
            figure: "kernel floor",
            item: format!("{item}: kernel work only, in-process"),
            unit: "ms",
            rcni: floor,
            go: None,
            note: format!(
                "rcni plugins at {} of the floor, Go at {}",
                times(rcni),
                times(go)
            ),
        });
        self.series.push(Series {
            figure: "kernel floor",
            item: item.to_string(),
            implementation: "rcni",
            unit: "ms",
            samples,
        });
    }

    pub fn add_row(&mut self, row: Row) {
        self.rows.push(row);
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| figure | measure | rcni | Go | rcni/Go | note |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &self.rows {
            let fmt = |v: Option<f64>| match v {
                Some(v) if v >= 100.0 => format!("{v:.0} {}", r.unit),
                Some(v) => format!("{v:.2} {}", r.unit),
                None => "n/a".to_string(),
            };
            let ratio = match (r.rcni, r.go) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "n/a".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                r.figure,
                r.item,
                fmt(r.rcni),
                fmt(r.go),
                ratio,
                r.note
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "\n{n}");
        }
        s
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.md"), self.markdown())?;
        let mut lines = String::new();
        for r in &self.rows {
            let ratio = match (r.rcni, r.go) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            };
            let _ = writeln!(
                lines,
                "{}",
                json!({"kind": "row", "figure": r.figure, "item": r.item, "unit": r.unit,
                       "rcni": r.rcni, "go": r.go, "rcni_over_go": ratio, "note": r.note})
            );
        }
        for s in &self.series {
            let _ = writeln!(
                lines,
                "{}",
                json!({"kind": "samples", "figure": s.figure, "item": s.item,
                       "implementation": s.implementation, "unit": s.unit,
                       "median": median(&s.samples), "p90": quantile(&s.samples, 0.9),
                       "samples": s.samples})
            );
        }
        std::fs::write(dir.join("results.jsonl"), lines)?;
        Ok(())
    }
}
