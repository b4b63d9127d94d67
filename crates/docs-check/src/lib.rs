//! Readers for the checks in `tests/`: what docs/architecture.md's crate table says, what
//! `cargo metadata` says, the headings of a Markdown file, and the doc sections a source
//! comment cites. The checks themselves are the tests; this crate has no other use.

pub mod citations;
pub mod markdown;
pub mod metadata;

use std::path::{Path, PathBuf};

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/docs-check sits two levels below the workspace root")
        .to_path_buf()
}
