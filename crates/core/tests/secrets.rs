#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Credentials never show: not in `Debug` or `Display` of stores, loaders and errors
//! (including errors the server sends back), not in metrics, not in Chrome traces.

use std::sync::Arc;

use loader_core::{DataLoader, Dataset, ErrorPolicy, Pipeline, Trace, from_url};
use loader_testkit::{DatasetSpec, S3Server};

fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!text.contains(secret), "{what} shows a credential:\n{text}");
    }
}

#[test]
fn credentials_appear_in_no_debug_display_error_metric_or_trace() {
    let dir = tempfile::tempdir().unwrap();
    DatasetSpec::tiny(12, 2)
        .write(&dir.path().join("data"))
        .unwrap();
    let server = S3Server::start(dir.path()).unwrap();
    let secrets = [server.secret_key(), server.access_key()];
    let store = from_url("s3://data", server.options()).unwrap();
    assert_clean("store Debug", &format!("{store:?}"), &secrets);
    assert_clean("store name", store.name(), &secrets);
    assert_clean("server Debug", &format!("{server:?}"), &secrets[..1]);

    let dataset = Dataset::image_folder_blocking(&*store).unwrap();
    let mut items: Vec<(String, i64)> = dataset
        .iter()
        .map(|i| (i.key.to_string(), i.label.class().unwrap_or(-1)))
        .collect();
    items.push(("class_000/missing.jpg".into(), 0));
    let trace = Arc::new(Trace::new());
    let mut loader = DataLoader::builder(Arc::clone(&store), Dataset::from_pairs(items))
        .batch_size(5)
        .error_policy(ErrorPolicy::Skip { max_failures: 1 })
        .trace(Arc::clone(&trace))
        .transform(
            Pipeline::builder()
                .resize(8)
                .center_crop(8)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    assert_clean("loader Debug", &format!("{loader:?}"), &secrets);
    let mut skipped = Vec::new();
    for batch in &mut loader {
        let batch = batch.unwrap();
        for e in &batch.info.skipped {
            skipped.push(format!("{e} / {e:?}"));
        }
        assert_clean("batch Debug", &format!("{batch:?}"), &secrets);
    }
    assert_eq!(skipped.len(), 1);
    assert_clean("a skipped item's error", &skipped.join("\n"), &secrets);
    let summary = loader.metrics().unwrap().summary();
    assert_clean("metrics", &format!("{summary:?}"), &secrets);
    let mut json = Vec::new();
    trace.write_json(&mut json).unwrap();
    assert!(!trace.is_empty());
    assert_clean("trace", &String::from_utf8(json).unwrap(), &secrets);

    // The server's own answer to a request signed with a wrong secret.
    let mut wrong = server.options();
    for (k, v) in &mut wrong {
        if k == "aws_secret_access_key" {
            *v = "wrong-secret-that-must-not-show-up-0123456789".into();
        }
    }
    let bad = from_url("s3://data", wrong).unwrap();
    let err = Dataset::image_folder_blocking(&*bad).unwrap_err();
    let text = format!("{err} / {err:?}");
    assert!(
        text.contains("permission") || text.contains("denied"),
        "{text}"
    );
    assert_clean(
        "a rejected request's error",
        &text,
        &[
            server.secret_key(),
            server.access_key(),
            "wrong-secret-that-must-not-show-up",
        ],
    );
}
