//! Arbitrary text as a CSV or JSON-lines manifest, with and without a known class list, read
//! as classes, multi-label sets or values: any input gives a dataset or an error naming a
//! line, never a panic. A parsed dataset keeps its promises: valid keys, no duplicate
//! (key, range), labels of one kind, class indices inside the class list, sets sorted and
//! below their class count, values finite and of one length.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use loader_core::{Dataset, Label, LabelKind, ManifestSyntax};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let format = if selector & 1 == 0 {
        ManifestSyntax::Csv
    } else {
        ManifestSyntax::JsonLines
    };
    let known: Vec<String> = ["cat", "dog", "7"].map(String::from).to_vec();
    let classes = (selector & 2 != 0).then_some(known.as_slice());
    let kind = match (selector >> 2) % 3 {
        0 => LabelKind::Class,
        1 => LabelKind::MultiLabel,
        _ => LabelKind::Values,
    };
    let parsed = Dataset::parse_manifest_as(text, format, kind, classes);
    match parsed {
        Ok(dataset) => {
            assert!(!dataset.is_empty());
            let mut keys = HashSet::new();
            let head = dataset.get(0).expect("a non-empty dataset has a sample 0");
            let first = std::mem::discriminant(&head.label);
            for item in dataset.iter() {
                assert!(loader_core::storage::key_problem(&item.key).is_none());
                // Packed files list one key with many ranges: a sample is (key, range).
                let sample = (item.key.clone(), item.range.clone());
                assert!(keys.insert(sample), "duplicate sample {:?} {:?}", item.key, item.range);
                assert_eq!(std::mem::discriminant(&item.label), first, "{:?}", item.label);
                let n = dataset.classes().len();
                match &item.label {
                    Label::Class(c) if n != 0 => assert!((0..n as i64).contains(c)),
                    Label::Classes(set) => {
                        assert!(n == 0 || set.of as usize == n);
                        assert!(set.indices.windows(2).all(|w| w[0] < w[1]));
                        assert!(set.indices.iter().all(|&i| i < set.of));
                    }
                    Label::Value(v) => assert!(v.is_finite()),
                    Label::Values(v) => {
                        assert!(!v.is_empty() && v.iter().all(|x| x.is_finite()));
                        if let Label::Values(head) = &head.label {
                            assert_eq!(v.len(), head.len());
                        }
                    }
                    _ => {}
                }
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(!text.is_empty());
        }
    }
});
