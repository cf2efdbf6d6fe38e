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

use loader_core::source::megatron;
use loader_core::tokens::{Blocking, Documents, Packing, TokenFile, TokenType};
use loader_core::{DataLoader, LoaderOptions, Source, from_url, open_with};
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

/// The fixtures in folders of their own under a bucket `tokens`: `u16/`, `i32/`, `both/`.
fn bucket() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (folder, names) in [
        ("u16", &["u16"][..]),
        ("i32", &["i32-multi"]),
        ("both", &["u16", "i32-multi"]),
    ] {
        let to = dir.path().join("tokens").join(folder);
        std::fs::create_dir_all(&to).unwrap();
        for name in names {
            for ext in ["idx", "bin"] {
                let file = format!("{name}.{ext}");
                std::fs::copy(fixtures().join(&file), to.join(&file)).unwrap();
            }
        }
    }
    dir
}

#[test]
fn a_megatron_dataset_opened_by_its_url_is_read_once_across_ranks_as_packed_rows() {
    let dir = bucket();
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let storage = server.options_for(&proxy.url());
    let mut options = LoaderOptions::default();
    options.set("source.block_size", "32").unwrap();
    options.set("source.vocab_size", "50000").unwrap();
    let (store, dataset) = open_with("s3://tokens/u16", storage.clone(), &options).unwrap();
    let want = &expected()["u16"];
    let stream: Vec<i64> = want.documents.concat();
    // 1,342 tokens: 41 blocks of 32 + 1, the last 30 dropped.
    assert_eq!(dataset.len(), (stream.len() - 1) / 32);
    assert!(!dataset.has_labels());
    let documents = Documents::from_lengths(want.documents.iter().map(|d| d.len() as u64)).unwrap();
    let blocking = Blocking::new(32, false).unwrap();
    let mut seen = Vec::new();
    for rank in 0..2 {
        let loader = DataLoader::builder(store.clone(), dataset.clone())
            .batch_size(4)
            .shuffle(true)
            .seed(7)
            .distributed(rank, 2)
            .tokens(Packing::new())
            .unwrap()
            .build()
            .unwrap();
        for batch in loader {
            let batch = batch.unwrap();
            let b = batch.info.indices.len();
            assert_eq!(batch.input_ids.shape(), [b, 32]);
            let inputs = batch.input_ids.as_i64().unwrap();
            let labels = batch.labels.as_i64().unwrap();
            let positions = batch.position_ids.as_i64().unwrap();
            for (row, &index) in batch.info.indices.iter().enumerate() {
                let block = blocking.block(&documents, index);
                let tokens = &stream[block.tokens.start as usize..block.tokens.end as usize];
                let want = Packing::new().row(tokens, &block, block.first_document as i64);
                let cut = |v: &[i64]| v[row * 32..row * 32 + 32].to_vec();
                assert_eq!(cut(inputs), want.input_ids, "block {index}: inputs");
                assert_eq!(
                    cut(inputs),
                    tokens[..32],
                    "block {index}: the stream's tokens"
                );
                assert_eq!(cut(labels), tokens[1..], "block {index}: labels");
                assert_eq!(
                    cut(positions),
                    want.position_ids,
                    "block {index}: positions"
                );
                assert!(batch.info.keys[row].ends_with("u16.bin"));
                // A rank with no block left repeats one (41 blocks, 2 ranks): padding.
                if row < b - batch.info.padding {
                    seen.push(index);
                }
            }
            let cu = batch.cu_seqlens.as_i32().unwrap();
            assert_eq!((cu[0], cu[cu.len() - 1]), (0, 32 * b as i32));
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..dataset.len() as u64).collect::<Vec<_>>(),
        "every block once"
    );

    // Files of other id types in one folder, or in one mixture: refused, naming them.
    let err = open_with("s3://tokens/both", storage.clone(), &options)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("u16.bin") && err.contains("int32") && err.contains("uint16"),
        "{err}"
    );
    let mut wide = options.clone();
    wide.set("source.vocab_size", "1048576").unwrap();
    let (i32_store, i32_data) = open_with("s3://tokens/i32", storage.clone(), &wide).unwrap();
    let err = DataLoader::mixture(vec![
        Source::new(store.clone(), dataset.clone()),
        Source::new(i32_store, i32_data),
    ])
    .tokens(Packing::new())
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("source 1") && err.contains("int32"), "{err}");
    // Without a block size, the error says which setting to give.
    let err = open_with(
        "s3://tokens/u16",
        storage.clone(),
        &LoaderOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("source.block_size"), "{err}");
    // An image dataset asked for token rows: refused.
    let images = tempfile::tempdir().unwrap();
    loader_testkit::DatasetSpec::tiny(4, 2)
        .write(images.path())
        .unwrap();
    let (image_store, image_data) = loader_core::open(&images.path().to_string_lossy()).unwrap();
    let err = DataLoader::builder(image_store, image_data)
        .tokens(Packing::new())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no token blocks"), "{err}");
}

#[derive(serde::Deserialize)]
struct PeerExpected {
    documents: Vec<Vec<i64>>,
    /// By row length: every block the peer's reader gives (LitData's
    /// `TokensLoader(block_size=row + 1)`), or its documents cut as make.py says, in order.
    blocks: BTreeMap<String, Vec<Vec<i64>>>,
}

/// A fixture folder's datasets (each a folder beside its `expected.json`) in a bucket
/// `bucket` served over S3 behind a 20 ms delay proxy: every block of every dataset is read
/// as `expected.json` says, in order, each row's documents runs of the documents written.
/// Gives the bucket's folder, the server and proxy (to keep them up), and the store's
/// settings, for the refusals after.
fn read_as_written(
    fixtures: &Path,
    bucket: &str,
) -> (
    tempfile::TempDir,
    S3Server,
    DelayProxy,
    Vec<(String, String)>,
) {
    read_as_written_with(fixtures, bucket, &[])
}

/// [`read_as_written`], the datasets named in `settings` opened with those settings too.
fn read_as_written_with(
    fixtures: &Path,
    bucket: &str,
    settings: &[(&str, &[(&str, &str)])],
) -> (
    tempfile::TempDir,
    S3Server,
    DelayProxy,
    Vec<(String, String)>,
) {
    let expected: BTreeMap<String, PeerExpected> =
        serde_json::from_slice(&std::fs::read(fixtures.join("expected.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in expected.keys() {
        let to = dir.path().join(bucket).join(name);
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(fixtures.join(name)).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
    let server = S3Server::start(dir.path()).unwrap();
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(20)).unwrap();
    let storage = server.options_for(&proxy.url());
    for (name, want) in &expected {
        for (row, blocks) in &want.blocks {
            let mut given = vec![
                ("source.block_size", row.as_str()),
                ("source.vocab_size", "50000"),
            ];
            for (dataset, more) in settings {
                if dataset == name {
                    given.extend_from_slice(more);
                }
            }
            let options = with(&given);
            let url = format!("s3://{bucket}/{name}");
            let (store, dataset) = open_with(&url, storage.clone(), &options).unwrap();
            assert_eq!(dataset.len(), blocks.len(), "{name} L={row}");
            let l: usize = row.parse().unwrap();
            let loader = DataLoader::builder(store, dataset)
                .batch_size(5)
                .tokens(Packing::new())
                .unwrap()
                .build()
                .unwrap();
            let mut read = 0;
            for batch in loader {
                let batch = batch.unwrap();
                let inputs = batch.input_ids.as_i64().unwrap();
                let labels = batch.labels.as_i64().unwrap();
                let documents = batch.document_ids.as_i64().unwrap();
                for (r, &index) in batch.info.indices.iter().enumerate() {
                    let cut = |v: &[i64]| v[r * l..r * l + l].to_vec();
                    let mut block = cut(inputs);
                    block.push(labels[r * l + l - 1]);
                    let what = format!("{name} L={row} block {index}");
                    assert_eq!(block, blocks[index as usize], "{what}");
                    assert_eq!(cut(labels), block[1..], "{what}: labels");
                    // Each run of one document id is a run of that document's tokens.
                    let (ids, docs) = (cut(inputs), cut(documents));
                    let mut start = 0;
                    while start < l {
                        let d = docs[start];
                        let end = (start..l).find(|&j| docs[j] != d).unwrap_or(l);
                        let doc = &want.documents[d as usize];
                        assert!(
                            doc.windows(end - start).any(|w| w == &ids[start..end]),
                            "{what}: tokens {start}..{end} are not a run of document {d}"
                        );
                        start = end;
                    }
                    read += 1;
                }
            }
            assert_eq!(read, blocks.len(), "{name} L={row}: every block");
        }
    }
    (dir, server, proxy, storage)
}

/// Why opening `url` on the store `storage` sets up with `settings` is refused.
fn refusal(url: &str, storage: &[(String, String)], settings: &[(&str, &str)]) -> String {
    open_with(url, storage.to_vec(), &with(settings))
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

/// Loader options with `settings` set.
fn with(settings: &[(&str, &str)]) -> LoaderOptions {
    let mut options = LoaderOptions::default();
    for (key, value) in settings {
        options.set(key, value).unwrap();
    }
    options
}

/// LitData chunks written by `litdata.optimize` for `TokensLoader`
/// (fixtures/litdata-tokens/make.py, numpy uint16 and torch int32 ids), read over S3 behind
/// the delay proxy: every block, in order, the ids litdata's own StreamingDataset read back;
/// each row's documents runs of the documents `optimize` was given; a damaged table, a
/// missing block size and image columns refused, naming the chunk or the setting.
#[test]
fn litdata_token_chunks_are_read_block_by_block_as_litdata_reads_them() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litdata-tokens");
    let (dir, _server, _proxy, storage) = read_as_written(&fixtures, "lit");
    let bucket = dir.path().join("lit");
    // Refused: no block size, an image column, a chunk whose table lies.
    let url = "s3://lit/numpy-u16";
    let err = open_with(url, storage.clone(), &LoaderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("TokensLoader") && err.contains("source.block_size"),
        "{err}"
    );
    let options = with(&[("source.block_size", "8"), ("source.image_column", "image")]);
    let err = open_with(url, storage.clone(), &options)
        .unwrap_err()
        .to_string();
    assert!(err.contains("source.image_column"), "{err}");
    let chunk = bucket.join("numpy-u16/chunk-0-3.bin");
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[0] += 1; // one more item than index.json says
    std::fs::write(&chunk, bytes).unwrap();
    let err = open_with(url, storage, &with(&[("source.block_size", "8")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("chunk-0-3.bin") && err.contains("items"),
        "{err}"
    );
}

/// MDS shards written by MosaicML Streaming's own MDSWriter as llm-foundry writes token
/// datasets (fixtures/mds-tokens/make.py: `ndarray:int32` documents of 1 to 300 ids, and
/// `ndarray:uint16:12` rows beside an `int` column), read over S3 behind the delay proxy:
/// every block the documents StreamingDataset reads back, run together per shard; each
/// row's documents runs of them. Refused, naming the shard or the setting: zstd shards (not
/// readable by range), a column that is not an integer array, a missing block size (the
/// error says to set it), and a shard whose first sample's header lies about its shape.
#[test]
fn mds_token_shards_are_read_block_by_block_as_streaming_reads_them() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mds-tokens");
    let (dir, _server, _proxy, storage) = read_as_written(&fixtures, "mds");
    for f in std::fs::read_dir(fixtures.join("zstd")).unwrap() {
        let f = f.unwrap();
        let to = dir.path().join("mds/zstd");
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
    }
    let open = |url: &str, settings: &[(&str, &str)]| refusal(url, &storage, settings);
    let eight = [("source.block_size", "8")];
    let err = open("s3://mds/zstd", &eight);
    assert!(
        err.contains("shard.00000.mds.zstd") && err.contains("compression=None"),
        "{err}"
    );
    let err = open(
        "s3://mds/u16-fixed",
        &[("source.block_size", "8"), ("source.token_column", "id")],
    );
    assert!(
        err.contains("\"id\" is encoded \"int\"") && err.contains("ndarray:"),
        "{err}"
    );
    let err = open("s3://mds/i32", &[]);
    assert!(
        err.contains("token ids") && err.contains("source.block_size"),
        "{err}"
    );
    let err = open(
        "s3://mds/i32",
        &[
            ("source.block_size", "8"),
            ("source.image_column", "tokens"),
        ],
    );
    assert!(err.contains("source.image_column"), "{err}");
    // The first sample's shape header says 2-D: the layout worked out is not the file's.
    let shard = dir.path().join("mds/i32/shard.00000.mds");
    let mut bytes = std::fs::read(&shard).unwrap();
    // Its table's first offset: after the table and the columns' JSON MDSWriter writes.
    let first = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    bytes[first + 4] = 2 << 2; // ndim 2, a uint8 shape
    std::fs::write(&shard, bytes).unwrap();
    let err = open("s3://mds/i32", &eight);
    assert!(
        err.contains("shard.00000.mds")
            && err.contains("sample 0")
            && err.contains("another shape"),
        "{err}"
    );
}

/// Parquet token datasets written by Hugging Face `datasets` (`input_ids`, int32 lists beside
/// a `text` column, row groups of 16 rows, two files) and by pyarrow (`ids`, `list<int64>`,
/// zstd pages with checksums, empty and null lists among them: rows of no document)
/// (fixtures/parquet-tokens/make.py), read over S3 behind the
/// delay proxy: every block the documents each one's reader reads back, run together per
/// row group; each row's documents runs of them. Refused, naming the file or setting: a
/// column of strings, a missing block size (the error says to set it).
#[test]
fn parquet_token_columns_are_read_block_by_block_as_datasets_reads_them() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet-tokens");
    // pyarrow's column is `ids`: named by the setting, as a user would.
    let (dir, _server, _proxy, storage) = read_as_written_with(
        &fixtures,
        "parquet",
        &[("pyarrow", &[("source.token_column", "ids")])],
    );
    let open = |url: &str, settings: &[(&str, &str)]| refusal(url, &storage, settings);
    let err = open(
        "s3://parquet/datasets",
        &[("source.block_size", "8"), ("source.token_column", "text")],
    );
    assert!(
        err.contains("list of") && err.contains("input_ids"),
        "{err}"
    );
    let err = open("s3://parquet/datasets", &[]);
    assert!(
        err.contains("token ids") && err.contains("source.block_size"),
        "{err}"
    );
    // A row group is read whole: an order that would read it for each block is refused.
    let eight = with(&[("source.block_size", "8")]);
    let (store, dataset) = open_with("s3://parquet/datasets", storage.clone(), &eight).unwrap();
    let mut global = eight.clone();
    global.shard_order = loader_core::ShardOrder::Global;
    let err = DataLoader::builder(store, dataset)
        .options(global)
        .tokens(Packing::new())
        .unwrap()
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("shard_order=local"), "{err}");
    // Read in memory as the fuzz target reads it: every block's row, none failing.
    let bytes = std::fs::read(fixtures.join("datasets/train-00000-of-00002.parquet")).unwrap();
    let blocking = Blocking::new(8, false).unwrap();
    let (dataset, rows) = loader_core::parquet::Parquet::new()
        .read_tokens_in_memory("train-00000-of-00002.parquet", bytes, blocking)
        .unwrap();
    assert_eq!(rows.len(), dataset.len());
    assert!(
        rows.iter()
            .all(|r| r.as_ref().is_ok_and(|r| r.input_ids.len() == 8))
    );
    let _ = dir;
}

/// `MdsWriter` with `ndarray_value` writes token shards as MosaicML's MDSWriter does, byte
/// for byte: the `i32` fixture's documents, in shards of at most 400 bytes, give its very
/// shards; an empty document and an id past the type are refused.
#[test]
fn mds_token_shards_are_written_as_mdswriter_writes_them() {
    use loader_core::mds::{MdsColumn, MdsWriter, ndarray_value};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mds-tokens");
    let expected: BTreeMap<String, PeerExpected> =
        serde_json::from_slice(&std::fs::read(fixtures.join("expected.json")).unwrap()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let columns = vec![MdsColumn::variable("tokens", "ndarray:int32")];
    let mut writer = MdsWriter::create(out.path(), columns)
        .unwrap()
        .size_limit(400);
    for document in &expected["i32"].documents {
        let value = ndarray_value(document, TokenType::I32).unwrap();
        writer.write(&[&value]).unwrap();
    }
    writer.finish().unwrap();
    let mut shards = 0;
    for f in std::fs::read_dir(fixtures.join("i32")).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".mds") {
            assert_eq!(
                std::fs::read(out.path().join(&name)).unwrap(),
                std::fs::read(fixtures.join("i32").join(&name)).unwrap(),
                "{name}"
            );
            shards += 1;
        }
    }
    assert!(shards > 2);
    assert!(ndarray_value(&[], TokenType::I32).is_err());
    assert!(ndarray_value(&[70_000], TokenType::U16).is_err());
}

/// `TokenChunkWriter` writes `TokensLoader` chunks as `litdata.optimize` does: the
/// `numpy-u16` fixture's documents, in chunks of at most 100 tokens, give its very chunk
/// files and the same chunk list in `index.json`, which the loader then reads as LitData's.
#[test]
fn litdata_token_chunks_are_written_as_optimize_writes_them() {
    use loader_core::litdata::TokenChunkWriter;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litdata-tokens");
    let expected: BTreeMap<String, PeerExpected> =
        serde_json::from_slice(&std::fs::read(fixtures.join("expected.json")).unwrap()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut writer = TokenChunkWriter::create(out.path(), TokenType::U16, 100).unwrap();
    for document in &expected["numpy-u16"].documents {
        writer.add_document(document).unwrap();
    }
    writer.finish().unwrap();
    let index = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap()
    };
    let (ours, theirs) = (index(out.path()), index(&fixtures.join("numpy-u16")));
    assert_eq!(ours["chunks"], theirs["chunks"]);
    assert_eq!(ours["config"], theirs["config"]);
    for chunk in theirs["chunks"].as_array().unwrap() {
        let name = chunk["filename"].as_str().unwrap();
        assert_eq!(
            std::fs::read(out.path().join(name)).unwrap(),
            std::fs::read(fixtures.join("numpy-u16").join(name)).unwrap(),
            "{name}"
        );
    }
    let eight = with(&[("source.block_size", "8")]);
    let (_, ours) = open_with(
        &out.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
        &eight,
    )
    .unwrap();
    assert_eq!(ours.len(), expected["numpy-u16"].blocks["8"].len());
}

/// `MegatronWriter` writes what megatron-core's IndexedDatasetBuilder wrote, byte for byte:
/// the fixture `u16`'s documents (one sequence each) give its very `.bin` and `.idx`; an
/// empty document and an id past the type are refused.
#[test]
fn megatron_files_are_written_as_megatron_core_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("u16");
    let mut writer = megatron::MegatronWriter::create(&prefix, TokenType::U16).unwrap();
    for document in &expected()["u16"].documents {
        writer.add_document(document).unwrap();
    }
    assert!(writer.add_document(&[]).is_err());
    let err = writer.add_document(&[1, 70_000]).unwrap_err().to_string();
    assert!(err.contains("70000") && err.contains("uint16"), "{err}");
    writer.finish().unwrap();
    for ext in ["bin", "idx"] {
        let ours = std::fs::read(dir.path().join(format!("u16.{ext}"))).unwrap();
        let theirs = std::fs::read(fixtures().join(format!("u16.{ext}"))).unwrap();
        assert!(ours == theirs, "u16.{ext} differs from megatron-core's");
    }
    assert!(megatron::MegatronWriter::create(&prefix, TokenType::U32).is_err());
}

/// Files named out of order are each read once; a LitData and a Megatron source with rows
/// of one length mix (their own cuts kept); a batch of more tokens than `cu_seqlens`'
/// int32 counts is refused when the loader is built.
#[test]
fn named_files_mixed_cuts_and_batch_bounds() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a", "b"] {
        for ext in ["idx", "bin"] {
            let to = dir.path().join(format!("{name}.{ext}"));
            std::fs::copy(fixtures().join(format!("u16.{ext}")), to).unwrap();
        }
    }
    let root = dir.path().to_string_lossy().into_owned();
    let none = Vec::<(String, String)>::new;
    let eight = with(&[("source.block_size", "8")]);
    let url = format!("{root}/{{a.idx,b.idx,a.bin,b.bin}}");
    let (store, megatron) = open_with(&url, none(), &eight).unwrap();
    assert_eq!(megatron.len(), 2 * ((1342 - 1) / 8), "each pair once");
    let litdata =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litdata-tokens/numpy-u16");
    let (lit_store, lit) = open_with(&litdata.to_string_lossy(), none(), &eight).unwrap();
    let mixed = DataLoader::mixture(vec![
        Source::new(store.clone(), megatron.clone()),
        Source::new(lit_store, lit.clone()),
    ])
    .batch_size(4)
    .stop(loader_core::StopRule::AllExhaustedWithoutReplacement)
    .tokens(Packing::new())
    .unwrap()
    .build()
    .unwrap();
    let rows: usize = mixed.map(|b| b.unwrap().info.indices.len()).sum();
    assert_eq!(rows, megatron.len() + lit.len());
    let huge = with(&[
        ("source.block_size", "1000000000"),
        ("source.keep_tail", "true"),
    ]);
    let (store, tail) = open_with(&format!("{root}/a.idx"), none(), &huge).unwrap();
    assert_eq!(tail.len(), 1, "a kept tail");
    let err = DataLoader::builder(store, tail)
        .batch_size(4)
        .tokens(Packing::new())
        .unwrap()
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cu_seqlens"), "{err}");
    // The packing.* options and a Packing given unlike them: refused, not one of them
    // silently unread.
    // An end-of-document id no uint16 file holds would never end a document.
    let past = with(&[("packing.end_of_document", "70000")]);
    let (store, _) = open_with(&url, none(), &eight).unwrap();
    let err = DataLoader::builder(store, megatron.clone())
        .options(past.clone())
        .tokens(past.packing.packing())
        .unwrap()
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no id of these files (uint16"), "{err}");
    let masked = with(&[("packing.mask_boundaries", "true")]);
    let (store, _) = open_with(&url, none(), &eight).unwrap();
    let err = DataLoader::builder(store.clone(), megatron.clone())
        .options(masked.clone())
        .tokens(Packing::new())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("packing.*"), "{err}");
    assert!(
        DataLoader::builder(store, megatron)
            .options(masked.clone())
            .tokens(masked.packing.packing())
            .is_ok()
    );
}

/// `mixture.weigh_by=documents`: two token datasets weighted 1:1, one of 4-token documents
/// and one of 40-token ones, read as many documents of each over an epoch (the short one's
/// blocks weighed up by its documents per block), where `samples` reads as many blocks.
#[test]
fn a_mixture_weighed_by_documents_reads_each_sources_documents_by_weight() {
    let dir = tempfile::tempdir().unwrap();
    for (name, documents, len) in [("a", 200, 4), ("b", 100, 40)] {
        let prefix = dir.path().join(name);
        let mut writer = megatron::MegatronWriter::create(&prefix, TokenType::U16).unwrap();
        for d in 0..documents {
            writer.add_document(&vec![d % 100; len]).unwrap();
        }
        writer.finish().unwrap();
    }
    let root = dir.path().to_string_lossy().into_owned();
    let read = |weigh_by: &str| {
        let eight = with(&[("source.block_size", "8")]);
        let open = |name: &str| {
            let (store, dataset) = open_with(
                &format!("{root}/{name}.idx"),
                Vec::<(String, String)>::new(),
                &eight,
            )
            .unwrap();
            Source::new(store, dataset)
        };
        let (a, b) = (open("a"), open("b"));
        let blocks = [a.dataset.len() as f64, b.dataset.len() as f64];
        let mut options = with(&[("mixture.weigh_by", weigh_by)]);
        options.batch_size = 10;
        let loader = DataLoader::mixture(vec![a, b])
            .options(options)
            .tokens(Packing::new())
            .unwrap()
            .build()
            .unwrap();
        let mut read = [0f64; 2];
        for batch in loader {
            for key in batch.unwrap().info.keys {
                read[usize::from(key.ends_with("b.bin"))] += 1.0;
            }
        }
        // Documents read: blocks read over blocks per document.
        (
            read,
            [read[0] * 200.0 / blocks[0], read[1] * 100.0 / blocks[1]],
        )
    };
    let (blocks, documents) = read("documents");
    assert!(
        (documents[0] / documents[1] - 1.0).abs() < 0.05,
        "blocks {blocks:?}, documents {documents:?}"
    );
    let (blocks, _) = read("samples");
    assert!(
        (blocks[0] / blocks[1] - 1.0).abs() < 0.05,
        "blocks {blocks:?}"
    );
}

/// Token datasets over plain HTTP (no listing, so named): a Megatron pair by its two files'
/// URLs, and MDS shards by their `index.json`; every block read, the stream as written.
#[test]
fn token_datasets_are_read_over_http() {
    let dir = bucket();
    let mds = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mds-tokens/i32");
    std::fs::create_dir_all(dir.path().join("mds")).unwrap();
    for f in std::fs::read_dir(&mds).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.path().join("mds").join(f.file_name())).unwrap();
    }
    let server = loader_testkit::HttpServer::start(dir.path()).unwrap();
    let eight = with(&[("source.block_size", "8")]);
    let read = |url: &str| -> Vec<Vec<i64>> {
        let (store, dataset) = open_with(url, Vec::<(String, String)>::new(), &eight).unwrap();
        let loader = DataLoader::builder(store, dataset)
            .batch_size(4)
            .tokens(Packing::new())
            .unwrap()
            .build()
            .unwrap();
        let mut rows = Vec::new();
        for batch in loader {
            let batch = batch.unwrap();
            let inputs = batch.input_ids.as_i64().unwrap();
            rows.extend(inputs.chunks(8).map(<[i64]>::to_vec));
        }
        rows
    };
    let stream = expected()["u16"].documents.concat();
    let rows = read(&format!("{}/tokens/u16/{{u16.idx,u16.bin}}", server.url()));
    assert_eq!(rows.len(), (stream.len() - 1) / 8);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[..], stream[i * 8..i * 8 + 8], "megatron block {i}");
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mds-tokens");
    let expected: BTreeMap<String, PeerExpected> =
        serde_json::from_slice(&std::fs::read(fixtures.join("expected.json")).unwrap()).unwrap();
    let rows = read(&format!("{}/mds/index.json", server.url()));
    let want: Vec<Vec<i64>> = expected["i32"].blocks["8"]
        .iter()
        .map(|b| b[..8].to_vec())
        .collect();
    assert_eq!(rows, want);
}
