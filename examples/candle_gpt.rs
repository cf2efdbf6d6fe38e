//! Train a tiny language model with candle on packed token rows read by loader from S3: a
//! generated corpus written as a Megatron-LM dataset (`MegatronWriter`), served by the test
//! kit's S3 server behind a delay proxy (50 ms per request by default), read in blocks of
//! 64 tokens as `TokenBatch`es and moved into candle tensors (`tokens_to_candle`). The
//! model is the smallest that learns from them, a bigram model (an embedding, then a linear
//! layer to the vocabulary); the corpus follows a rule it can learn (each token mostly
//! determines the next), so the loss falls from ln 64. Prints the loss and the share of the
//! time spent waiting for data.
//!
//! `cargo run --release -p loader-examples --features candle --example candle_gpt -- --steps 300 --rtt 50`

// The image examples' helpers: this one trains on tokens, so their image half goes unused.
#[path = "support/served.rs"]
#[allow(dead_code)]
mod served;

use std::error::Error;
use std::time::Duration;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, Linear, Optimizer, VarBuilder, VarMap};
use loader_core::source::megatron::MegatronWriter;
use loader_core::tokens::{Packing, TokenType};
use loader_core::{DataLoader, LoaderOptions, open_with};
use loader_testkit::{DelayProxy, S3Server};
use served::{Options, Timing};

/// Ids the corpus uses.
const VOCAB: usize = 64;
/// Tokens a row trains on.
const BLOCK: &str = "64";

/// An embedding of each token, then logits over the next.
struct Bigram {
    embed: Embedding,
    head: Linear,
}

impl Bigram {
    fn new(vb: VarBuilder<'_>) -> candle_core::Result<Self> {
        Ok(Self {
            embed: candle_nn::embedding(VOCAB, 32, vb.pp("embed"))?,
            head: candle_nn::linear(32, VOCAB, vb.pp("head"))?,
        })
    }

    /// `[B, L]` ids to `[B * L, VOCAB]` logits.
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.embed.forward(&ids.flatten_all()?)?;
        self.head.forward(&x)
    }
}

/// Documents of 20 to 200 tokens, each token the last one's `5t + 3 mod 64` but one time in
/// twenty, a random one: a pseudo-random generator keeps the corpus the same every run.
fn corpus(documents: usize) -> Vec<Vec<i64>> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..documents)
        .map(|_| {
            let len = 20 + (next() % 181) as usize;
            let mut doc = vec![(next() % VOCAB as u64) as i64];
            while doc.len() < len {
                let last = doc[doc.len() - 1];
                let rule = (5 * last + 3) % VOCAB as i64;
                doc.push(if next() % 20 == 0 {
                    (next() % VOCAB as u64) as i64
                } else {
                    rule
                });
            }
            doc
        })
        .collect()
}

/// Train for `options.steps` steps, epoch after epoch; returns where the time went.
fn train(options: Options) -> Result<Timing, Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("corpus"))?;
    let mut writer = MegatronWriter::create(&dir.path().join("corpus/part-0"), TokenType::U16)?;
    for document in corpus(2_000) {
        writer.add_document(&document)?;
    }
    writer.finish()?;
    let server = S3Server::start(dir.path())?;
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(options.rtt_ms))?;
    let mut settings = LoaderOptions::default();
    settings.set("source.block_size", BLOCK)?;
    settings.set("source.vocab_size", &VOCAB.to_string())?;
    let (store, dataset) = open_with("s3://corpus", server.options_for(&proxy.url()), &settings)?;
    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(options.batch_size)
        .shuffle(true)
        .seed(7)
        .tokens(Packing::new())?
        .build()?;

    let device = Device::Cpu;
    let vars = VarMap::new();
    let model = Bigram::new(VarBuilder::from_varmap(&vars, DType::F32, &device))?;
    let mut optimizer = candle_nn::AdamW::new_lr(vars.all_vars(), 3e-2)?;
    served::train(
        options.steps,
        || loader.next(),
        |batch| {
            let batch = loader_candle::tokens_to_candle(batch, &device)?;
            let logits = model.forward(&batch.input_ids)?;
            // No padding and no masked boundary here: every label is a token.
            let labels = batch.labels.flatten_all()?.to_dtype(DType::U32)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &labels)?;
            optimizer.backward_step(&loss)?;
            Ok(loss.to_scalar::<f32>()?)
        },
    )
}

fn main() -> Result<(), Box<dyn Error>> {
    served::run(train)
}
