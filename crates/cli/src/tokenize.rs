//! `loader tokenize`: a text corpus (JSON lines, one document a line) tokenized once, on
//! every core, by Hugging Face's `tokenizers` (a `tokenizer.json`), into a Megatron-LM
//! indexed dataset (`PREFIX.bin` + `PREFIX.idx`) that the loader, Megatron-LM and anything
//! reading its layout read in place. The ids are the Python `tokenizers` package's for the
//! same file and text (the test compares them).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::Instant;

use loader_core::source::megatron::MegatronWriter;
use loader_core::tokens::TokenType;
use tokenizers::Tokenizer;

use crate::Result;

/// Arguments of `loader tokenize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSON-lines files, one document a line (blank lines are no documents).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The tokenizer: a Hugging Face `tokenizer.json` (its special tokens added as it says).
    #[arg(long, value_name = "FILE")]
    tokenizer: PathBuf,
    /// Where the dataset goes: PREFIX.bin and PREFIX.idx.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
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

/// One document waiting for its batch: its text and where it came from, for errors.
struct Line {
    text: String,
    at: String,
}

pub fn main(args: Args) -> Result {
    if args.batch == 0 {
        return Err("--batch 0: give the documents tokenized at once, 1 or more".into());
    }
    if let Some(url) = args
        .inputs
        .iter()
        .find(|p| p.to_string_lossy().contains("://"))
    {
        return Err(format!(
            "{}: loader tokenize reads local files; copy the corpus to local disk first",
            url.display()
        )
        .into());
    }
    let tokenizer = Tokenizer::from_file(&args.tokenizer)
        .map_err(|e| format!("tokenizer {}: {e}", args.tokenizer.display()))?;
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
                args.tokenizer.display()
            )
        })?),
        None => None,
    };
    let started = Instant::now();
    let mut writer = MegatronWriter::create(&args.out, dtype)?;
    let mut tokens = 0u64;
    let mut pending: Vec<Line> = Vec::with_capacity(args.batch);
    let mut flush = |pending: &mut Vec<Line>, writer: &mut MegatronWriter| -> Result {
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
        let file = std::fs::File::open(input)
            .map_err(|e| format!("cannot read {}: {e}", input.display()))?;
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let at = format!("{} line {}", input.display(), n + 1);
            let line = line.map_err(|e| format!("{at}: {e}"))?;
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
         {:.0} tokens/s, written to {}.bin and .idx",
        dtype.name(),
        tokens as f64 / seconds.max(1e-9),
        args.out.display()
    );
    Ok(())
}
