//! Arbitrary bytes as a Parquet file, opened and read row by row as the loader reads one
//! (footer, offset index, columns, labels, pages): a dataset or an error, never a panic;
//! an opened file has one outcome per row.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_core::parquet::Parquet;

fuzz_target!(|data: &[u8]| {
    if let Ok((dataset, rows)) = Parquet::new().read_in_memory("fuzz.parquet", data.to_vec()) {
        assert_eq!(rows.len(), dataset.len());
    }
});
