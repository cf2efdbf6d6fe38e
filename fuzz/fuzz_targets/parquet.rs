//! Arbitrary bytes as a Parquet file, opened and read row by row as the loader reads one
//! (footer, offset index, columns, labels, pages): a dataset or an error, never a panic;
//! an opened file has one outcome per row. Then the same bytes as token lists, cut in rows
//! of 4 (footer, row groups decoded whole, blocks): one outcome per block, every row 4 long.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_core::parquet::Parquet;
use loader_core::tokens::Blocking;

fuzz_target!(|data: &[u8]| {
    if let Ok((dataset, rows)) = Parquet::new().read_in_memory("fuzz.parquet", data.to_vec()) {
        assert_eq!(rows.len(), dataset.len());
    }
    let Ok(blocking) = Blocking::new(4, true) else {
        return;
    };
    if let Ok((dataset, rows)) =
        Parquet::new().read_tokens_in_memory("fuzz.parquet", data.to_vec(), blocking)
    {
        assert_eq!(rows.len(), dataset.len());
        for row in rows.into_iter().flatten() {
            assert_eq!(row.input_ids.len(), 4);
        }
    }
});
