//! What the checks read from Markdown: headings (and the anchors GitHub makes of them), the
//! rows of the crate table, and the repository paths a text names in backticks.

use std::collections::BTreeSet;

use crate::metadata::Edges;

/// The text of every heading (`#` to `######`), without the marks.
pub fn headings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !fenced && (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.push(line[hashes..].trim().to_string());
        }
    }
    out
}

/// The anchor GitHub gives a heading: lower case, spaces to `-`, punctuation other than `-`
/// and `_` dropped.
pub fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The spans between backticks on one line.
fn code_spans(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

/// One row of the crate table: the package named in its first cell and the internal
/// dependencies of its third (dev-dependencies in brackets).
pub fn crate_rows(text: &str, packages: &BTreeSet<String>) -> Vec<(String, Edges)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| crate | job | internal dependencies |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        let Some(name) = code_spans(cells[0]).find(|n| packages.contains(*n)) else {
            rows.push((
                cells[0].trim_start_matches("| ").to_string(),
                Edges::default(),
            ));
            continue;
        };
        let deps = cells.get(2).copied().unwrap_or_default();
        let (normal, dev) = deps.split_once('[').unwrap_or((deps, ""));
        let names = |s: &str| -> BTreeSet<String> { code_spans(s).map(str::to_string).collect() };
        rows.push((
            name.to_string(),
            Edges {
                normal: names(normal),
                dev: names(dev),
            },
        ));
    }
    rows
}

/// Repository paths named in backticks (`crates/...`, `docs/...`, ...), with any `#anchor` or
/// `:line` cut off; patterns with `*`, `<` or `{` are not paths.
pub fn repo_paths(text: &str) -> BTreeSet<String> {
    const ROOTS: [&str; 7] = [
        "crates/", "bench/", "scripts/", "docs/", "deploy/", "fuzz/", ".ci/",
    ];
    text.lines()
        .flat_map(code_spans)
        .filter(|s| ROOTS.iter().any(|r| s.starts_with(r)))
        .filter(|s| !s.contains(['*', '<', '{', ' ']))
        .map(|s| {
            let s = s.split('#').next().unwrap_or(s);
            s.split(':').next().unwrap_or(s).to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        assert_eq!(
            anchor("The crash and attribution contract"),
            "the-crash-and-attribution-contract"
        );
        assert_eq!(
            anchor("An ADD, from `rcni add` to a lease"),
            "an-add-from-rcni-add-to-a-lease"
        );
    }

    #[test]
    fn a_table_row_gives_its_crate_and_both_kinds_of_edges() {
        let text = "| crate | job | internal dependencies | notable third-party |\n\
                    |---|---|---|---|\n\
                    | `a` | does `x` | `b`, `c` [`d`] | serde |\n\
                    | `bench/harness` (`e`) | bench | none | |\n\nafter";
        let packages: BTreeSet<String> = ["a", "e"].map(String::from).into();
        let rows = crate_rows(text, &packages);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, "a");
        assert_eq!(rows[0].1.normal, ["b", "c"].map(String::from).into());
        assert_eq!(rows[0].1.dev, ["d"].map(String::from).into());
        assert_eq!(rows[1].0, "e");
        assert!(rows[1].1.normal.is_empty());
    }

    #[test]
    fn paths_lose_anchors_and_patterns_are_skipped() {
        let p =
            repo_paths("see `crates/a/src/b.rs:12`, `docs/x.md#y`, `crates/*/Cargo.toml`, `x.rs`");
        assert_eq!(
            p,
            ["crates/a/src/b.rs", "docs/x.md"].map(String::from).into()
        );
    }
}
