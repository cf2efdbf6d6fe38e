//! Token streams: resuming a 3-source mixture of token datasets at token position 10^10
//! and taking the first batch there (blocks computed from the documents' lengths, the
//! global order found without replay; the files are sparse, 10 GB each on local disk), and
//! packing blocks of 2,048 tokens into rows and batches on one core.
//!
//! `cargo bench -p loader-benches --bench tokens`

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loader_core::tokens::{
    Blocking, Documents, Packing, Placement, Row, TokenFile, TokenFiles, TokenType, collate,
};
use loader_core::{BatchInfo, DataLoader, Dataset, LoaderState, Source, StopRule, from_url};

const L: u64 = 2048;

/// A token dataset of `tokens` tokens in documents of 1 to 4,000 (mean 2,000) tokens, as
/// one file `{seed}.bin` in `dir`: sparse, its ids all 0.
fn dataset(dir: &std::path::Path, tokens: u64, seed: u64) -> Dataset {
    let mut lengths = Vec::new();
    let (mut total, mut x) = (0u64, seed);
    while total < tokens {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = 1 + (x >> 33) % 4000;
        lengths.push(len);
        total += len;
    }
    let file = TokenFile {
        dtype: TokenType::U16,
        documents: Documents::from_lengths(lengths).expect("documents"),
        placement: Placement::From(0),
        blocking: Blocking::new(L, false).expect("blocking"),
        vocab: None,
        first_document: 0,
    };
    let name = format!("{seed}.bin");
    std::fs::File::create(dir.join(&name))
        .and_then(|f| f.set_len(total * 2))
        .expect("sparse file");
    Dataset::from_tokens(TokenFiles::new(vec![(name.into(), file)]).expect("files"))
        .expect("dataset")
}

fn resume(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("dir");
    let store = from_url(
        &dir.path().to_string_lossy(),
        Vec::<(String, String)>::new(),
    )
    .expect("store");
    // 3 sources of 5·10^9 tokens, weights 5:3:2: position 10^10 / 2,048 of the mixture.
    let sources: Vec<Source> = [(1, 5.0), (2, 3.0), (3, 2.0)]
        .into_iter()
        .map(|(seed, w)| {
            let data = dataset(dir.path(), 5_000_000_000, seed);
            Source::new(Arc::clone(&store), data).weight(w)
        })
        .collect();
    let build = || {
        DataLoader::mixture(sources.clone())
            .batch_size(8)
            .shuffle(true)
            .seed(7)
            .stop(StopRule::AllExhausted)
            .tokens(Packing::new())
            .expect("tokens")
            .build()
            .expect("loader")
    };
    let mut loader = build();
    let position = 10_000_000_000 / L;
    let state = LoaderState {
        order: Some(loader.order_stamp()),
        ..LoaderState::at(0, position)
    };
    let mut group = c.benchmark_group("tokens");
    group.measurement_time(Duration::from_secs(5));
    // What a restarted job does: take the saved state on (its order checked against this
    // one), then read the first batch at position 10^10 / 2,048 (its 8 blocks from disk).
    group.bench_function("resume_at_10e10_tokens_3_sources", |b| {
        b.iter(|| loader.resume(state.clone()).expect("resume"))
    });
    // Its engine's shutdown left out of the time (a restarted job's old one is gone).
    group.bench_function("build_resume_and_first_batch", |b| {
        b.iter_with_large_drop(|| {
            let mut loader = build();
            loader.resume(state.clone()).expect("resume");
            let batch = loader.next().expect("a batch").expect("read");
            (loader, batch)
        })
    });
    group.finish();
}

fn pack(c: &mut Criterion) {
    let docs = Documents::from_lengths((0..4096).map(|i| 1 + (i * 7919) % 4000)).expect("docs");
    let blocking = Blocking::new(L, false).expect("blocking");
    let ids: Vec<i64> = (0..docs.tokens() as i64).map(|t| t % 50_000).collect();
    let packing = Packing::new();
    let mut group = c.benchmark_group("tokens");
    group.throughput(Throughput::Elements(8 * L));
    group.bench_function("pack_and_collate_8_rows_of_2048", |b| {
        let mut i = 0u64;
        b.iter(|| {
            let rows: Vec<Row> = (0..8)
                .map(|_| {
                    i = (i + 1) % blocking.blocks(docs.tokens());
                    let block = blocking.block(&docs, i);
                    let tokens = &ids[block.tokens.start as usize..block.tokens.end as usize];
                    packing.row(tokens, &block, block.first_document as i64)
                })
                .collect();
            collate(&rows, BatchInfo::default()).expect("collate")
        })
    });
    group.finish();
}

criterion_group!(benches, resume, pack);
criterion_main!(benches);
