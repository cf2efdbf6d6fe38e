#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Elastic resume through the command line, in separate processes: three ranks of a mixture
//! stop after a few batches and save their states (all the same), two ranks of other batch
//! sizes resume from rank 0's state; what the five processes printed with `--print-keys` is
//! exactly what one uninterrupted process reads in the epoch, each sample once.

mod common;

use std::path::Path;
use std::process::Output;

use common::{loader, ok, succeeded};

fn generate(dir: &Path, images: &str, seed: &str) {
    ok(loader().arg("gen").arg(dir).args([
        "--images",
        images,
        "--classes",
        "2",
        "--tiny",
        "--data-seed",
        seed,
    ]));
}

/// `loader run` of the mixture with `extra` arguments, started (not waited for).
fn run(a: &Path, b: &Path, extra: &[String]) -> std::process::Child {
    loader()
        .arg("run")
        .arg(a)
        .arg(b)
        .args([
            "--weights",
            "2,1",
            "--shuffle",
            "--seed",
            "3",
            "--print-keys",
        ])
        .args(["--decode-threads", "1"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn three_ranks_stop_two_resume_and_together_read_one_epoch_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    generate(&a, "30", "0");
    generate(&b, "14", "1");

    let whole = succeeded(
        run(&a, &b, &args(&["--batch-size", "5", "--epochs", "1"]))
            .wait_with_output()
            .unwrap(),
    );
    let mut expected = lines(&whole);
    assert!(expected.len() > 30, "{expected:?}");
    assert!(expected.iter().all(|l| l.starts_with("0\t")));
    // Both sources are read, by their weights.
    let from_b = expected.iter().filter(|l| l.starts_with("0\t1\t")).count();
    assert_eq!(from_b, 14, "first_exhausted: the smaller source read whole");

    // Three ranks, 3 global batches of 3 x 2, each rank saving its state.
    let first: Vec<_> = (0..3)
        .map(|rank| {
            let state = dir.path().join(format!("state-{rank}.json"));
            let mut a = args(&[
                "--batch-size",
                "2",
                "--world-size",
                "3",
                "--stop-after-batches",
                "3",
            ]);
            a.extend(["--rank".into(), rank.to_string(), "--save-state".into()]);
            a.push(state.to_string_lossy().into_owned());
            run(&a_path(dir.path()), &b_path(dir.path()), &a)
        })
        .collect();
    let mut got: Vec<String> = Vec::new();
    for child in first {
        got.extend(lines(&succeeded(child.wait_with_output().unwrap())));
    }
    assert_eq!(got.len(), 18);
    let states: Vec<String> = (0..3)
        .map(|r| std::fs::read_to_string(dir.path().join(format!("state-{r}.json"))).unwrap())
        .collect();
    assert!(
        states.iter().all(|s| s == &states[0]),
        "ranks' states differ"
    );
    let state: serde_json::Value = serde_json::from_str(&states[0]).unwrap();
    assert_eq!(
        (state["epoch"].as_u64(), state["position"].as_u64()),
        (Some(0), Some(18))
    );

    // Two ranks of batch 3 resume from rank 0's state and finish the epoch.
    let second: Vec<_> = (0..2)
        .map(|rank| {
            let mut a = args(&["--batch-size", "3", "--world-size", "2", "--epochs", "1"]);
            a.extend(["--rank".into(), rank.to_string(), "--resume".into()]);
            a.push(
                dir.path()
                    .join("state-0.json")
                    .to_string_lossy()
                    .into_owned(),
            );
            run(&a_path(dir.path()), &b_path(dir.path()), &a)
        })
        .collect();
    for child in second {
        got.extend(lines(&succeeded(child.wait_with_output().unwrap())));
    }
    got.sort();
    expected.sort();
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(unique.len(), got.len(), "a sample delivered twice");
    assert_eq!(got, expected, "not one epoch exactly");

    // Another mixture is refused, naming what changed; --set mixture.new_segment=true
    // continues it.
    let reweighted = || {
        let mut command = loader();
        command.arg("run").arg(&a).arg(&b).args([
            "--weights",
            "1,1",
            "--shuffle",
            "--seed",
            "3",
            "--batch-size",
            "3",
        ]);
        command
    };
    let state = dir.path().join("state-0.json");
    let out = reweighted().arg("--resume").arg(&state).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("weights (2:1)") && stderr.contains("new_segment"),
        "{stderr}"
    );
    ok(reweighted()
        .args(["--set", "mixture.new_segment=true", "--resume"])
        .arg(&state));
}

fn a_path(dir: &Path) -> std::path::PathBuf {
    dir.join("a")
}

fn b_path(dir: &Path) -> std::path::PathBuf {
    dir.join("b")
}
