#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Two `loader run` processes, the ranks of one node under torchrun's variables, share one
//! cache directory: each reports its own counters and the node's totals (`node_cache` in
//! `--json`), and the rank that ends last counts both.

mod common;

use std::process::Stdio;

use common::{loader, succeeded, tiny_folder};

#[test]
fn two_ranks_of_a_node_share_a_cache_directory_and_report_the_nodes_totals() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    tiny_folder(&data, 48, 2);
    let cache = dir.path().join("cache");
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            loader()
                .arg("run")
                .arg(&data)
                .args(["--shuffle", "--epochs", "2", "--batch-size", "4", "--json"])
                .args(["--decode-threads", "1", "--world-size", "2"])
                .args(["--rank", &rank.to_string()])
                .arg("--cache-dir")
                .arg(&cache)
                .env("LOCAL_WORLD_SIZE", "2")
                .env("LOCAL_RANK", rank.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let reports: Vec<serde_json::Value> = ranks
        .into_iter()
        .map(|child| {
            let out = succeeded(child.wait_with_output().unwrap());
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    for report in &reports {
        assert_eq!(report["images"], 48, "{report}");
        let node = &report["node_cache"];
        let own = &report["cache"];
        assert!(node["hits"].as_u64() >= own["hits"].as_u64(), "{report}");
    }
    let processes: Vec<u64> = reports
        .iter()
        .map(|r| r["node_cache"]["processes"].as_u64().unwrap())
        .collect();
    assert_eq!(processes.iter().max(), Some(&2), "{processes:?}");
    // The node read each image once per epoch: 96 reads in all, counted by the rank that
    // counted both.
    let last = reports
        .iter()
        .find(|r| r["node_cache"]["processes"] == 2)
        .unwrap();
    let node = &last["node_cache"];
    assert_eq!(
        node["hits"].as_u64().unwrap() + node["misses"].as_u64().unwrap(),
        96,
        "{last}"
    );
    assert!(node["hits"].as_u64().unwrap() > 0, "{last}");
}
