//! docs/architecture.md (and the other docs) kept true to the tree: the crate table against
//! `cargo metadata`, every repository path the docs name, every link between docs and every
//! doc section a source comment cites, and the one place `unsafe` is allowed.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use docs_check::citations::{citations, Section};
use docs_check::markdown::{anchor, crate_rows, headings, repo_paths};
use docs_check::{metadata, workspace_root};

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The Markdown files a reader of the repository starts from.
fn docs(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md")];
    for e in fs::read_dir(root.join("docs")).expect("docs/").flatten() {
        if e.path().extension().is_some_and(|x| x == "md") {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// Every `.rs` file under `dir`, skipping build output.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.ends_with("target") {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn workspace_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["crates", "bench", "fuzz"] {
        sources(&root.join(dir), &mut out);
    }
    out
}

#[test]
fn the_crate_table_is_cargo_metadata() {
    let root = workspace_root();
    let crates = metadata::workspace(&root);
    let names: BTreeSet<String> = crates.keys().cloned().collect();
    let rows = crate_rows(&read(&root.join("docs/architecture.md")), &names);
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, said) in &rows {
        let Some(real) = crates.get(name) else {
            problems.push(format!("row {name:?} names no workspace crate"));
            continue;
        };
        if !seen.insert(name.clone()) {
            problems.push(format!("{name}: two rows"));
        }
        if said.normal != real.normal {
            problems.push(format!(
                "{name}: the table says {:?}, Cargo.toml has {:?}",
                said.normal, real.normal
            ));
        }
        if said.dev != real.dev {
            problems.push(format!(
                "{name}: dev-dependencies: the table says {:?}, Cargo.toml has {:?}",
                said.dev, real.dev
            ));
        }
    }
    for name in names.difference(&seen) {
        problems.push(format!("{name} has no row"));
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md:\n{}",
        problems.join("\n")
    );
}

/// The directories `.gitignore` names from the root (`/bench/out`): what runs write, not
/// what the repository holds.
fn ignored_dirs(root: &Path) -> Vec<String> {
    read(&root.join(".gitignore"))
        .lines()
        .filter_map(|l| l.strip_prefix('/'))
        .filter(|l| !l.contains('*'))
        .map(|l| format!("{}/", l.trim_end_matches('/')))
        .collect()
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = workspace_root();
    let ignored = ignored_dirs(&root);
    let mut missing = Vec::new();
    for doc in docs(&root) {
        for path in repo_paths(&read(&doc)) {
            let output = ignored.iter().any(|d| path.starts_with(d.as_str()));
            if !output && !root.join(&path).exists() {
                missing.push(format!("{}: {path}", doc.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The anchors of `file` (a doc), for links and citations.
fn anchors(root: &Path, file: &str) -> Option<BTreeSet<String>> {
    let text = fs::read_to_string(root.join(file)).ok()?;
    Some(headings(&text).iter().map(|h| anchor(h)).collect())
}

#[test]
fn every_link_between_docs_reaches_a_section() {
    let root = workspace_root();
    let mut broken = Vec::new();
    for doc in docs(&root) {
        let text = read(&doc);
        let dir = doc.parent().expect("in a directory");
        for link in text.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or_default();
            if target.starts_with("http") || !target.contains(".md") && !target.starts_with('#') {
                continue;
            }
            let (file, frag) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            let Ok(rel) = file.strip_prefix(&root) else {
                continue;
            };
            match anchors(&root, &rel.to_string_lossy()) {
                None => broken.push(format!("{}: {target}: no such file", doc.display())),
                Some(a) if !frag.is_empty() && !a.contains(frag) => {
                    broken.push(format!("{}: {target}: no such section", doc.display()))
                }
                Some(_) => {}
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_doc_section_a_comment_cites_exists() {
    let root = workspace_root();
    let mut broken = Vec::new();
    for file in workspace_sources(&root) {
        for c in citations(&read(&file)) {
            let Some(anchors) = anchors(&root, &c.file) else {
                broken.push(format!("{}: {}: no such file", file.display(), c.file));
                continue;
            };
            let wanted = match &c.section {
                Section::Anchor(a) => a.clone(),
                Section::Heading(h) => anchor(h),
            };
            if !anchors.contains(&wanted) {
                broken.push(format!("{}: {} {:?}", file.display(), c.file, c.section));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "citations of sections that do not exist:\n{}",
        broken.join("\n")
    );
}

#[test]
fn unsafe_is_allowed_only_where_the_architecture_says() {
    let root = workspace_root();
    let doc = read(&root.join("docs/architecture.md"));
    let mut unnamed = Vec::new();
    for file in workspace_sources(&root) {
        let allows = read(&file).lines().any(|l| {
            let l = l.trim_start();
            (l.starts_with("#[") || l.starts_with("#![")) && l.contains("allow(unsafe_code")
        });
        if allows {
            let rel = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .to_string_lossy()
                .into_owned();
            let short = rel.strip_prefix("crates/").unwrap_or(&rel);
            if !doc.contains(short) {
                unnamed.push(rel);
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "unsafe code allowed in files docs/architecture.md's dependency rule does not name: {unnamed:?}"
    );
}
