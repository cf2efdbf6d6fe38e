//! A dataset on a plain HTTP server: HTTP cannot list, so a manifest describes it.
//!
//! `cargo run --release -p loader-examples --example http`

use loader_core::{DataLoader, Dataset, LoaderOptions, Pipeline, SourceContext, from_url};
use loader_testkit::{DatasetSpec, HttpServer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let items = DatasetSpec::tiny(32, 4).write(dir.path())?;
    // A manifest: one `key,label` line per image.
    let manifest: String = items
        .iter()
        .map(|i| format!("{},{}\n", i.key, i.label))
        .collect();
    std::fs::write(
        dir.path().join("train.csv"),
        format!("key,label\n{manifest}"),
    )?;

    let server = HttpServer::start(dir.path())?;
    // With a real server: from_url("https://data.example.org/imagenet", ...).
    let store = from_url(&server.url(), Vec::<(String, String)>::new())?;
    // Read behind the loader's default timeouts and retries, as its samples are.
    let mut options = LoaderOptions::default();
    options.set("source.manifest", "train.csv")?;
    let dataset = Dataset::open_blocking("", &SourceContext::new(store.clone(), &options))?;

    let loader = DataLoader::builder(store, dataset)
        .batch_size(8)
        .transform(Pipeline::imagenet_eval())
        .build()?;
    for batch in loader {
        let batch = batch?;
        println!(
            "{:?} from {} .. {}",
            batch.shape,
            batch.info.keys[0],
            batch.info.keys[batch.len() - 1]
        );
    }
    Ok(())
}
