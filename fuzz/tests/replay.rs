//! Every seed and every regression input of every target, run through the target's body
//! without the fuzzer: none may panic, hang or go over its allocation limit.

use std::path::PathBuf;

#[test]
fn every_seed_and_regression_runs_clean() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut ran = 0;
    for (target, body) in lockstep_fuzz::TARGETS {
        for kind in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(kind).join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                let data = std::fs::read(entry.path()).unwrap_or_default();
                if std::panic::catch_unwind(|| body(&data)).is_err() {
                    panic!("{} fails", entry.path().display());
                }
                ran += 1;
            }
        }
    }
    assert!(ran > 0, "no corpus found under {}", root.display());
}
