//! Arbitrary URLs and options through `from_url`: a store or an error that names what to
//! fix, never a panic; nothing is fetched. Secrets given as options never show in the
//! store's name or `Debug`, or in the error.
#![no_main]

use libfuzzer_sys::fuzz_target;

const SECRET: &str = "fuzzSECRETvalue0123456789";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line is the URL, the others `name=value` options.
    let mut lines = text.lines();
    let url = lines.next().unwrap_or_default();
    let mut options: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if text.contains(SECRET) {
        // The secret placed in a URL or a non-secret option (an endpoint) is shown as
        // that, like any endpoint; only the secret option must stay hidden.
        return;
    }
    options.push(("aws_secret_access_key".into(), SECRET.into()));
    match loader_storage::from_url(url, options) {
        Ok(store) => {
            let shown = format!("{} {store:?}", store.name());
            assert!(!shown.contains(SECRET), "{shown}");
        }
        Err(e) => {
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(SECRET), "{shown}");
        }
    }
});
