//! Arbitrary text as a CSV or JSON-lines manifest, with and without a known class list:
//! any input gives a dataset or an error naming a line, never a panic. A parsed dataset
//! keeps its promises: valid keys, no duplicate (key, range), labels inside the class list.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use loader_core::{Dataset, ManifestFormat};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let format = if selector & 1 == 0 {
        ManifestFormat::Csv
    } else {
        ManifestFormat::JsonLines
    };
    let parsed = if selector & 2 == 0 {
        Dataset::parse_manifest(text, format)
    } else {
        let classes: Vec<String> = ["cat", "dog", "7"].map(String::from).to_vec();
        Dataset::parse_manifest_with_classes(text, format, &classes)
    };
    match parsed {
        Ok(dataset) => {
            assert!(!dataset.is_empty());
            let mut keys = HashSet::new();
            for item in dataset.items() {
                assert!(loader_core::storage::key_problem(&item.key).is_none());
                // Packed files list one key with many ranges: a sample is (key, range).
                let sample = (item.key.clone(), item.range.clone());
                assert!(keys.insert(sample), "duplicate sample {:?} {:?}", item.key, item.range);
                if !dataset.classes().is_empty() {
                    assert!((0..dataset.classes().len() as i64).contains(&item.label));
                }
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(!text.is_empty());
        }
    }
});
