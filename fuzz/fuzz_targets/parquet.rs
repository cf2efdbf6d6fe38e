//! Arbitrary bytes as a Parquet file, opened and read row by row as the loader reads one
//! (footer, offset index, columns, labels, pages): a dataset or an error naming the file,
//! never a panic; an opened file has one outcome per row.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_core::parquet::Parquet;

fuzz_target!(|data: &[u8]| {
    match Parquet::new().read_in_memory("fuzz.parquet", data.to_vec()) {
        Ok((dataset, rows)) => assert_eq!(rows.len(), dataset.len()),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("fuzz.parquet") || text.contains("memory"),
                "{text}"
            );
        }
    }
});
