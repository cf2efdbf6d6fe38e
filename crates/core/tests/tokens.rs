#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Token blocks from Megatron-LM indexed datasets written by megatron-core's own
//! IndexedDatasetBuilder (fixtures/megatron/make.py): opened by `megatron::load`, every block read
//! by a ranged GET through the in-process S3 server behind the delay proxy, and the rows
//! packed from them hold, token for token, the documents megatron-core's IndexedDataset
//! reads back, each token an input once and a label once, positions restarting per document.
//! A damaged index or a missing data file is an error naming the file and the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use loader_core::from_url;
use loader_core::source::megatron;
use loader_core::tokens::{Blocking, Documents, Packing, TokenFile, TokenType};
use loader_testkit::{DelayProxy, S3Server};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/megatron")
}

#[derive(serde::Deserialize)]
struct Expected {
    vocab: u64,
    documents: Vec<Vec<i64>>,
}

fn expected() -> BTreeMap<String, Expected> {
    serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

#[test]
fn megatron_datasets_are_read_block_by_block_as_megatron_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tokens")).unwrap();
    for f in std::fs::read_dir(fixtures()).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.path().join("tokens").join(f.file_name())).unwrap();
    }
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let store = from_url("s3://tokens", server.options_for(&proxy.url())).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (name, want) in expected() {
        let bin = format!("{name}.bin");
        let blocking = Blocking::new(1, true).unwrap();
        let loaded = rt
            .block_on(megatron::load(&store, &name, blocking, Some(want.vocab)))
            .unwrap();
        let lengths = want.documents.iter().map(|d| d.len() as u64);
        assert_eq!(
            loaded.documents,
            Documents::from_lengths(lengths).unwrap(),
            "{name}"
        );
        let bin_size = rt.block_on(store.head(&bin)).unwrap().size;
        assert_eq!(
            loaded.documents.tokens() * loaded.dtype.size(),
            bin_size,
            "{name}"
        );
        let stream: Vec<i64> = want.documents.concat();
        // Each token's document and place in it, as Megatron's documents say.
        let places: Vec<(i64, i64)> = want
            .documents
            .iter()
            .enumerate()
            .flat_map(|(d, doc)| (0..doc.len() as i64).map(move |p| (d as i64, p)))
            .collect();
        for len in [7u64, 32, 64] {
            let file = TokenFile {
                blocking: Blocking::new(len, true).unwrap(),
                ..loaded.clone()
            };
            let packing = Packing::new();
            let (mut inputs, mut labels) = (Vec::new(), Vec::new());
            for i in 0..file.blocks() {
                let block = file.block(i);
                let bytes = rt
                    .block_on(store.get_range(&bin, file.byte_range(i)))
                    .unwrap();
                let row = file.row(i, &bytes, &packing).unwrap();
                let what = format!("{name} L={len} block {i}");
                for (j, (&document, &position)) in
                    row.document_ids.iter().zip(&row.position_ids).enumerate()
                {
                    if document < 0 {
                        continue; // padding
                    }
                    let t = block.tokens.start as usize + j;
                    let (d, p) = places[t];
                    assert_eq!(document, d, "{what} position {j}: document");
                    // A document that began in an earlier block restarts at the row's start.
                    let restarted = if block.starts.is_empty() || j < block.starts[0] as usize {
                        p.min(j as i64)
                    } else {
                        p
                    };
                    assert_eq!(position, restarted, "{what} position {j}: position");
                    inputs.push(row.input_ids[j]);
                }
                labels.extend(row.labels.iter().copied().filter(|&l| l != -100));
            }
            assert_eq!(inputs, stream[..stream.len() - 1], "{name} L={len}: inputs");
            assert_eq!(labels, stream[1..], "{name} L={len}: labels");
        }
        // The vocabulary megatron-core's writer was given bounds the ids.
        let bytes = rt.block_on(store.get_range(&bin, 0..bin_size)).unwrap();
        let err = loaded.dtype.ids(&bytes, Some(10)).unwrap_err();
        assert!(err.contains("outside the vocabulary of 10"), "{err}");
        assert!(matches!(loaded.dtype, TokenType::U16 | TokenType::I32));
    }
    // A damaged index and a missing data file: errors naming the file and the store.
    let tokens = dir.path().join("tokens");
    let mut idx = std::fs::read(tokens.join("u16.idx")).unwrap();
    idx[17] = 7; // float32
    std::fs::write(tokens.join("bad.idx"), idx).unwrap();
    std::fs::copy(tokens.join("u16.bin"), tokens.join("bad.bin")).unwrap();
    std::fs::copy(tokens.join("u16.idx"), tokens.join("lost.idx")).unwrap();
    let blocking = Blocking::new(8, true).unwrap();
    let err = rt
        .block_on(megatron::load(&store, "bad", blocking, None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.idx") && err.contains("s3://tokens") && err.contains("float type"),
        "{err}"
    );
    let err = rt
        .block_on(megatron::load(&store, "lost", blocking, None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("lost.bin"), "{err}");
}
