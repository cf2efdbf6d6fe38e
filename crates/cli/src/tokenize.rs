//! `loader tokenize`: a text corpus (JSON lines, one document a line, on local disk or in
//! a store) tokenized once, on every core, by Hugging Face's `tokenizers` (a
//! `tokenizer.json`, by path or URL), into a Megatron-LM indexed dataset (`PREFIX.bin` +
//! `PREFIX.idx`), MDS shards of a `tokens` column (as llm-foundry writes them) or LitData
//! `TokensLoader` chunks, which the loader, and Megatron-LM, MosaicML Streaming or LitData,
//! read in place. The ids are the Python
//! `tokenizers` package's for the same file and text (the test compares them).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::time::Instant;

use loader_core::litdata::TokenChunkWriter;
use loader_core::mds::{MdsColumn, MdsWriter, ndarray_value};
use loader_core::source::megatron::MegatronWriter;
use loader_core::storage::{DynStorage, Storage};
use loader_core::tokens::TokenType;
use loader_core::{LoaderOptions, from_url};
use tokenizers::Tokenizer;

use crate::Result;
use crate::options::parse_store_options;

/// What a store's object is read in: a window of its bytes at a time.
const WINDOW: u64 = 8 << 20;
/// The longest line read, and the largest tokenizer file: a larger one is refused, not
/// held.
const LONGEST: usize = 256 << 20;

/// Arguments of `loader tokenize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSON-lines files, one document a line (blank lines are no documents): paths, or
    /// objects' URLs (`s3://bucket/corpus.jsonl`, `https://...`).
    #[arg(required = true)]
    inputs: Vec<String>,
    /// The tokenizer: a Hugging Face `tokenizer.json` (its special tokens added as it says),
    /// by path or URL.
    #[arg(long, value_name = "FILE")]
    tokenizer: String,
    /// A store's setting, as `loader run` takes it (e.g. `aws_endpoint=...`).
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Where the dataset goes: PREFIX.bin and PREFIX.idx (megatron), or a folder of shards
    /// and index.json (mds).
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
    /// What is written: `megatron` (an indexed dataset), `mds` (MDS shards of one `tokens`
    /// column, `ndarray:uint16` or `ndarray:int32`, uncompressed, so read by range) or
    /// `litdata` (chunks for LitData's `TokensLoader`).
    #[arg(long, value_enum, default_value_t = Format::Megatron)]
    format: Format,
    /// litdata: tokens a chunk holds at most (LitData's `chunk_size`; default 2^25, 64 MiB
    /// of uint16 ids); a block never spans two chunks.
    #[arg(long)]
    chunk_tokens: Option<u64>,
    /// The field of each line that holds its text.
    #[arg(long, default_value = "text")]
    text_field: String,
    /// A token appended to every document, by its text (e.g. `<|endoftext|>`), as
    /// Megatron-LM's `--append-eod` does: what tells documents apart in a flat stream.
    #[arg(long, value_name = "TOKEN")]
    append_eos: Option<String>,
    /// Documents tokenized at once (spread over the cores).
    #[arg(long, default_value_t = 1024)]
    batch: usize,
}

/// What `loader tokenize` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// A Megatron-LM indexed dataset.
    Megatron,
    /// MosaicML Streaming's MDS shards.
    Mds,
    /// LitData's chunks for `TokensLoader`.
    Litdata,
}

/// The dataset being written, of either format.
enum Writer {
    Megatron(MegatronWriter),
    Mds(MdsWriter, TokenType, usize),
    Litdata(TokenChunkWriter, usize),
}

impl Writer {
    fn create(args: &Args, dtype: TokenType) -> Result<Self> {
        let (format, out) = (args.format, args.out.as_path());
        Ok(match format {
            Format::Megatron => Writer::Megatron(MegatronWriter::create(out, dtype)?),
            Format::Mds => {
                let encoding = format!("ndarray:{}", dtype.name());
                let column = MdsColumn::variable("tokens", &encoding);
                Writer::Mds(MdsWriter::create(out, vec![column])?, dtype, 0)
            }
            Format::Litdata => {
                let chunk = args.chunk_tokens.unwrap_or(1 << 25);
                Writer::Litdata(TokenChunkWriter::create(out, dtype, chunk)?, 0)
            }
        })
    }

    fn add_document(&mut self, ids: &[i64]) -> Result {
        match self {
            Writer::Megatron(w) => w.add_document(ids)?,
            Writer::Mds(w, dtype, documents) => {
                w.write(&[&ndarray_value(ids, *dtype)?])?;
                *documents += 1;
            }
            Writer::Litdata(w, documents) => {
                w.add_document(ids)?;
                *documents += 1;
            }
        }
        Ok(())
    }

    fn documents(&self) -> usize {
        match self {
            Writer::Megatron(w) => w.documents(),
            Writer::Mds(_, _, documents) | Writer::Litdata(_, documents) => *documents,
        }
    }

    fn finish(self) -> Result {
        match self {
            Writer::Megatron(w) => w.finish()?,
            Writer::Mds(w, _, _) => w.finish()?,
            Writer::Litdata(w, _) => w.finish()?,
        }
        Ok(())
    }
}

/// One document waiting for its batch: its text and where it came from, for errors.
struct Line {
    text: String,
    at: String,
}

pub fn main(args: Args) -> Result {
    if args.batch == 0 {
        return Err("--batch 0: give the documents tokenized at once, 1 or more".into());
    }
    if args.chunk_tokens.is_some() && args.format != Format::Litdata {
        return Err(
            "--chunk-tokens sizes LitData chunks: give --format litdata, or leave it out".into(),
        );
    }
    let stores = Stores::new(parse_store_options(&args.options)?)?;
    let tokenizer = Tokenizer::from_bytes(stores.whole(&args.tokenizer)?)
        .map_err(|e| format!("tokenizer {}: {e}", args.tokenizer))?;
    let vocab = tokenizer.get_vocab_size(true);
    // uint16 while every id fits (as Megatron-LM chooses): the highest id decides, an
    // added token's id may lie past the vocabulary's size.
    let highest = tokenizer.get_vocab(true).into_values().max().unwrap_or(0);
    let dtype = if highest < 1 << 16 {
        TokenType::U16
    } else {
        TokenType::I32
    };
    let eos = match &args.append_eos {
        Some(token) => Some(tokenizer.token_to_id(token).ok_or_else(|| {
            format!(
                "--append-eos {token:?}: no such token in {}",
                args.tokenizer
            )
        })?),
        None => None,
    };
    let started = Instant::now();
    let mut writer = Writer::create(&args, dtype)?;
    let mut tokens = 0u64;
    let mut pending: Vec<Line> = Vec::with_capacity(args.batch);
    let mut flush = |pending: &mut Vec<Line>, writer: &mut Writer| -> Result {
        let texts: Vec<String> = pending.iter().map(|l| l.text.clone()).collect();
        let encodings = tokenizer
            .encode_batch(texts, true)
            .map_err(|e| format!("tokenizing: {e}"))?;
        for (line, encoding) in pending.drain(..).zip(encodings) {
            let mut ids: Vec<i64> = encoding.get_ids().iter().map(|&id| i64::from(id)).collect();
            ids.extend(eos.map(i64::from));
            writer
                .add_document(&ids)
                .map_err(|e| format!("{}: {e}", line.at))?;
            tokens += ids.len() as u64;
        }
        Ok(())
    };
    for input in &args.inputs {
        let mut lines = stores.lines(input)?;
        let mut n = 0usize;
        while let Some(line) = lines.next_line()? {
            n += 1;
            let at = format!("{input} line {n}");
            let line = String::from_utf8(line).map_err(|e| format!("{at}: not UTF-8: {e}"))?;
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("{at}: not JSON: {e}"))?;
            let text = value
                .get(&args.text_field)
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| {
                    format!(
                        "{at}: no text in a field {:?} (--text-field names it)",
                        args.text_field
                    )
                })?;
            pending.push(Line {
                text: text.to_owned(),
                at,
            });
            if pending.len() >= args.batch {
                flush(&mut pending, &mut writer)?;
            }
        }
    }
    flush(&mut pending, &mut writer)?;
    let documents = writer.documents();
    writer.finish()?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{documents} documents, {tokens} tokens ({}, vocabulary {vocab}) in {seconds:.1} s: \
         {:.0} tokens/s, written to {}{}",
        dtype.name(),
        tokens as f64 / seconds.max(1e-9),
        args.out.display(),
        match args.format {
            Format::Megatron => ".bin and .idx",
            Format::Mds => "/ as MDS shards",
            Format::Litdata => "/ as LitData chunks",
        }
    );
    Ok(())
}

/// Where inputs are read from: local disk, or the stores their URLs name, through the
/// loader's default timeouts and retries.
struct Stores {
    runtime: tokio::runtime::Runtime,
    options: Vec<(String, String)>,
}

impl Stores {
    fn new(options: Vec<(String, String)>) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self { runtime, options })
    }

    /// The store holding `url`'s object, and the object's key.
    fn open(&self, url: &str) -> Result<(DynStorage, String)> {
        let (root, key) = url
            .rsplit_once('/')
            .filter(|(root, key)| !key.is_empty() && root.contains("://") && !root.ends_with('/'))
            .ok_or_else(|| format!("{url}: give an object's URL, e.g. s3://bucket/corpus.jsonl"))?;
        let store = from_url(root, self.options.clone())?;
        Ok((
            LoaderOptions::default().request_stack(store),
            key.to_owned(),
        ))
    }

    /// All of `input` (a path or URL), refused past [`LONGEST`] bytes.
    fn whole(&self, input: &str) -> Result<Vec<u8>> {
        if !input.contains("://") {
            let mut bytes = Vec::new();
            std::fs::File::open(input)
                .and_then(|f| f.take(LONGEST as u64 + 1).read_to_end(&mut bytes))
                .map_err(|e| format!("cannot read {input}: {e}"))?;
            return if bytes.len() > LONGEST {
                Err(format!("{input} is larger than {} MiB", LONGEST >> 20).into())
            } else {
                Ok(bytes)
            };
        }
        let (store, key) = self.open(input)?;
        self.runtime.block_on(async {
            let size = store.head(&key).await?.size;
            if size > LONGEST as u64 {
                return Err(format!("{input} is larger than {} MiB", LONGEST >> 20).into());
            }
            Ok(store.get_range(&key, 0..size).await?.to_vec())
        })
    }

    /// `input`'s lines, a window at a time.
    fn lines(&self, input: &str) -> Result<Lines<'_>> {
        if !input.contains("://") {
            let file =
                std::fs::File::open(input).map_err(|e| format!("cannot read {input}: {e}"))?;
            return Ok(Lines::Local(BufReader::new(file)));
        }
        let (store, key) = self.open(input)?;
        let size = self.runtime.block_on(store.head(&key))?.size;
        Ok(Lines::Stored {
            stores: self,
            store,
            key,
            size,
            at: 0,
            held: Vec::new(),
        })
    }
}

/// A corpus file's lines, without their ends.
enum Lines<'a> {
    Local(BufReader<std::fs::File>),
    Stored {
        stores: &'a Stores,
        store: DynStorage,
        key: String,
        size: u64,
        /// The next byte to read.
        at: u64,
        /// Bytes read and not yet given out as lines.
        held: Vec<u8>,
    },
}

impl Lines<'_> {
    /// The next line, `None` at the end; one longer than [`LONGEST`] is refused.
    fn next_line(&mut self) -> Result<Option<Vec<u8>>> {
        match self {
            Lines::Local(reader) => {
                let mut line = Vec::new();
                let read = reader
                    .by_ref()
                    .take(LONGEST as u64 + 1)
                    .read_until(b'\n', &mut line)?;
                if line.len() > LONGEST {
                    return Err(format!("a line longer than {} MiB", LONGEST >> 20).into());
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                Ok((read > 0).then_some(line))
            }
            Lines::Stored {
                stores,
                store,
                key,
                size,
                at,
                held,
            } => loop {
                if let Some(end) = held.iter().position(|&b| b == b'\n') {
                    let line = held[..end].to_vec();
                    held.drain(..=end);
                    return Ok(Some(line));
                }
                if *at >= *size {
                    return Ok((!held.is_empty()).then(|| std::mem::take(held)));
                }
                if held.len() > LONGEST {
                    return Err(format!("{key}: a line longer than {} MiB", LONGEST >> 20).into());
                }
                let end = (*at + WINDOW).min(*size);
                let bytes = stores.runtime.block_on(store.get_range(key, *at..end))?;
                held.extend_from_slice(&bytes);
                *at = end;
            },
        }
    }
}
