#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report
//! Damaged pages in Parquet files written by pyarrow (`fixtures/parquet/make.py`), edited
//! here as a disk or an attacker would: bytes changed inside a page of a file written with
//! page checksums, and a page header claiming more bytes than its column chunk holds. Each
//! is an error naming the file and row group, never data.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use loader_core::parquet::Parquet;
use loader_core::{Dataset, DynStorage};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::serialized_reader::ReadOptionsBuilder;

mod common;
use common::{Outcome, damaged};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parquet")
}

fn open(name: &'static str) -> impl FnOnce(&DynStorage) -> Result<Dataset, String> + Send {
    move |store: &DynStorage| {
        Parquet::new()
            .cache_dir(None)
            .load_blocking(store, &[name.into()])
            .map_err(|e| e.to_string())
    }
}

/// The byte ranges of the image column's pages in row group 0, from the file's offset index.
fn image_pages(file: &[u8]) -> Vec<(usize, usize)> {
    let options = ReadOptionsBuilder::new().with_page_index().build();
    let reader =
        SerializedFileReader::new_with_options(Bytes::from(file.to_vec()), options).unwrap();
    let meta = reader.metadata();
    let column = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().string() == "image.bytes")
        .unwrap();
    meta.page_index()
        .and_then(|p| p.offset_index(0, column))
        .unwrap()
        .page_locations()
        .iter()
        .map(|p| (p.offset as usize, p.compressed_page_size as usize))
        .collect()
}

/// `file` in the fixtures with `edit` made to its bytes, read whole with every failure
/// skipped (the bytes as stored: no decode).
fn read_edited(name: &'static str, edit: impl FnOnce(&mut Vec<u8>) + Send + 'static) -> Outcome {
    damaged(
        &fixtures(),
        move |dir| {
            let path = dir.join(name);
            let mut bytes = std::fs::read(&path).unwrap();
            edit(&mut bytes);
            std::fs::write(&path, bytes).unwrap();
        },
        open(name),
        name,
    )
    .unwrap()
}

#[test]
fn a_page_changed_in_a_file_with_checksums_is_an_error_naming_file_and_row_group() {
    for name in ["pa-snappy-crc.parquet", "pa-zstd-crc.parquet"] {
        assert_eq!(
            read_edited(name, |_| {}),
            (40, Vec::new()),
            "{name} as written"
        );
        let whole = std::fs::read(fixtures().join(name)).unwrap();
        // 40 bytes in the middle of the second page of the image column: inside its
        // compressed stream, where a literal run would carry them into a row's bytes.
        let (at, len) = image_pages(&whole)[1];
        assert!(len > 200, "{name}: a page of {len} bytes");
        let middle = at + len / 2;
        let (loaded, errors) = read_edited(name, move |bytes| {
            bytes[middle..middle + 40]
                .iter_mut()
                .for_each(|b| *b ^= 0x5a);
        });
        assert!(
            loaded < 40 && !errors.is_empty(),
            "{name}: {loaded} rows, {errors:?}"
        );
        assert_eq!(
            loaded + errors.len(),
            40,
            "{name}: every row loaded or reported"
        );
        for e in &errors {
            assert!(e.contains(name), "{name}: {e}");
            assert!(
                e.contains("row group 0") && e.contains("checksum"),
                "{name}: {e}"
            );
        }
    }
}

#[test]
fn a_page_header_claiming_more_than_its_column_chunk_is_refused_before_decompressing() {
    // Without an offset index a row group's image column is one unit: its pages' claims
    // together are held to the footer's total for the chunk before any page is inflated.
    let name = "pa-noindex-onegroup.parquet";
    let whole = std::fs::read(fixtures().join(name)).unwrap();
    let options = ReadOptionsBuilder::new().build();
    let reader =
        SerializedFileReader::new_with_options(Bytes::from(whole.clone()), options).unwrap();
    let chunk = reader.metadata().row_group(0).column(0);
    assert_eq!(chunk.column_path().string(), "image.bytes");
    let start = chunk.data_page_offset() as usize;
    let total = chunk.uncompressed_size() as usize;
    // The first page's header: field 1 (its type) and field 2 (its size decompressed), each
    // an i32 of Thrift's compact protocol: 0x15, then a varint.
    let varint_end = |mut i: usize| {
        while whole[i] & 0x80 != 0 {
            i += 1;
        }
        i + 1
    };
    assert_eq!(whole[start], 0x15);
    let size_at = varint_end(start + 1);
    assert_eq!(whole[size_at], 0x15);
    let (from, to) = (size_at + 1, varint_end(size_at + 1));
    // The largest claim its bytes can hold, so nothing after it moves.
    let width = to - from;
    let claim = (1u64 << (7 * width - 1)) - 1;
    assert!(
        claim > 4096,
        "a claim of {claim} against a chunk of {total}"
    );
    let mut zigzag = claim << 1;
    let mut encoded = Vec::new();
    for i in 0..width {
        let last = i + 1 == width;
        encoded.push((zigzag & 0x7f) as u8 | if last { 0 } else { 0x80 });
        zigzag >>= 7;
    }
    let (loaded, errors) = read_edited(name, move |bytes| {
        bytes[from..to].copy_from_slice(&encoded);
    });
    assert_eq!(loaded, 0, "{errors:?}");
    assert_eq!(errors.len(), 40);
    for e in &errors {
        assert!(e.contains(name) && e.contains("row group 0"), "{e}");
        assert!(e.contains("the footer gives the column chunk"), "{e}");
    }
}
