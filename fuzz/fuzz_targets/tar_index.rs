//! Arbitrary bytes as a WebDataset tar shard: an index or an error naming an offset, never
//! a panic; an index keeps its promises: every member's bytes lie inside the shard, and
//! no sample has a suffix twice.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use loader_core::webdataset::index_tar;

fuzz_target!(|data: &[u8]| {
    match index_tar("fuzz.tar", data) {
        Ok(samples) => {
            for sample in samples {
                assert!(!sample.key.is_empty() || !sample.members.is_empty());
                let mut suffixes = HashSet::new();
                for (suffix, offset, size) in &sample.members {
                    assert!(offset + size <= data.len() as u64, "{suffix} past the end");
                    assert!(suffixes.insert(suffix.clone()), "{suffix} twice");
                }
            }
        }
        Err(e) => assert!(e.to_string().contains("fuzz.tar")),
    }
});
