//! Write a loader's batches to files, to set another loader's output beside this one's
//! (the Python package's tests compare their tensors with these, byte for byte).
//!
//! `cargo run -p loader-examples --example dump_batches -- URL OUT BATCH_SIZE SEED SHUFFLE
//! TRANSFORM [KEY=VALUE...]` with SHUFFLE `0` or `1`, TRANSFORM `eval`, `train` or `none`
//! (u8 HWC), and store options after. Writes `OUT/batch-0000.bin` (the values' bytes,
//! native order) and `OUT/batch-0000.json` (shape, labels, keys) per batch of epoch 0.

use loader_core::{
    DataLoader, Dataset, LoaderOptions, Pipeline, SourceContext, from_url, store_url,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, out, batch_size, seed, shuffle, transform, options @ ..] = &args[..] else {
        return Err(
            "usage: dump_batches URL OUT BATCH_SIZE SEED SHUFFLE TRANSFORM [KEY=VALUE...]".into(),
        );
    };
    let options: Vec<(String, String)> = options
        .iter()
        .filter_map(|o| o.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    let seed: u64 = seed.parse()?;
    let store = from_url(&store_url(url)?, options)?;
    let context = SourceContext::new(store.clone(), &LoaderOptions::default());
    let dataset = Dataset::open_blocking(url, &context)?;
    let builder = DataLoader::builder(store, dataset)
        .batch_size(batch_size.parse()?)
        .shuffle(shuffle == "1")
        .seed(seed);
    let builder = match transform.as_str() {
        "eval" => builder.transform(Pipeline::imagenet_eval()),
        "train" => builder.transform(Pipeline::imagenet_train(seed)),
        _ => builder,
    };
    let mut loader = builder.build()?;
    std::fs::create_dir_all(out)?;
    for (i, batch) in (&mut loader).enumerate() {
        let batch = batch?.into_tensors();
        let base = std::path::Path::new(out).join(format!("batch-{i:04}"));
        std::fs::write(base.with_extension("bin"), batch.images.as_bytes())?;
        let keys: Vec<&str> = batch.info.keys.iter().map(|k| &**k).collect();
        let meta = serde_json::json!({
            "shape": batch.images.shape(),
            "dtype": batch.images.dtype().name(),
            "labels": batch.labels.as_i64(),
            "keys": keys,
        });
        std::fs::write(base.with_extension("json"), meta.to_string())?;
    }
    Ok(())
}
