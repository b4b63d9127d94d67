//! Replays every corpus and regression input of `fuzz/` through its target on the stable
//! toolchain, so inputs fuzzing found once stay fixed. A target without a corpus directory
//! fails the test: the corpus is part of the target.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn every_corpus_and_regression_input_replays_without_a_panic() {
    let mut replayed = 0;
    for (name, target) in cni_fuzz::TARGETS {
        let corpus = files(&fuzz_dir().join("corpus").join(name));
        assert!(
            !corpus.is_empty(),
            "target {name} has no corpus in fuzz/corpus/{name}"
        );
        let regressions = files(&fuzz_dir().join("regressions").join(name));
        for input in corpus.iter().chain(&regressions) {
            let bytes = std::fs::read(input).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&bytes));
            assert!(outcome.is_ok(), "{name} panicked on {}", input.display());
            replayed += 1;
        }
    }
    println!("replayed {replayed} inputs");
}

#[test]
fn the_targets_check_something() {
    // A decoded result that renders and decodes again passes; the replay would catch a
    // rendering that does not.
    let ok = br#"{"cniVersion":"1.0.0","ips":[{"address":"198.18.0.2/24"}]}"#;
    cni_fuzz::result(ok);
    let names: Vec<&str> = cni_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate target names");
}
