//! Writing Parquet files in Hugging Face's image layout, as `datasets` writes them: an
//! `image` struct of `bytes` and `path` and an int64 `label`; uncompressed pages of about
//! 1 MiB (an image is compressed already), with an offset index so a reader fetches a page
//! at a time. `loader pack --format parquet` and `loader gen --parquet` write with it.

use std::io::Write;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::source::error::WriteError;

type Result<T = (), E = WriteError> = std::result::Result<T, E>;

const SCHEMA: &str = "message schema {
    optional group image {
        optional binary bytes;
        optional binary path (STRING);
    }
    optional int64 label;
}";

/// The same without the label column: an unlabelled dataset's rows, which must not read
/// back as labelled ones of no class.
const SCHEMA_UNLABELLED: &str = "message schema {
    optional group image {
        optional binary bytes;
        optional binary path (STRING);
    }
}";

/// One row: an image, the name `datasets` keeps beside it, its class if it has one.
pub struct ImageRow {
    /// The image's encoded bytes.
    pub image: bytes::Bytes,
    /// The name `datasets` keeps beside them.
    pub path: String,
    /// Its class, or none for an unlabelled sample.
    pub label: Option<i64>,
}

/// The writer's settings: pages of about 1 MiB, no dictionary, statistics per column
/// chunk only (their null counts tell a reader which rows are paths; per page, min and
/// max of images would only bloat every page header), an offset index unless `page_index`
/// is false.
pub fn writer_properties(page_index: bool) -> WriterPropertiesBuilder {
    WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_data_page_size_limit(1 << 20)
        // A page ends once it holds about the limit: checked every few rows.
        .set_write_batch_size(4)
        .set_offset_index_disabled(!page_index)
        // Not the parquet crate's version: a pack resumed by a later build writes the same
        // bytes.
        .set_created_by("loader".to_owned())
}

/// The `huggingface` metadata `datasets` reads a file's features from: an `Image` column
/// and, when `labelled`, a `ClassLabel` of `classes` (a plain int64 without them).
pub fn features(labelled: bool, classes: &[String]) -> KeyValue {
    let mut features = serde_json::json!({"image": {"_type": "Image"}});
    if labelled {
        features["label"] = if classes.is_empty() {
            serde_json::json!({"dtype": "int64", "_type": "Value"})
        } else {
            serde_json::json!({"names": classes, "_type": "ClassLabel"})
        };
    }
    let info = serde_json::json!({"info": {"features": features}});
    KeyValue::new("huggingface".to_owned(), info.to_string())
}

/// A file being written, a row group at a time.
pub struct ImageWriter<W: Write + Send> {
    writer: SerializedFileWriter<W>,
}

impl<W: Write + Send> ImageWriter<W> {
    /// A file written to `out` with `properties`, with a label column when `labelled`.
    pub fn new(out: W, properties: WriterProperties, labelled: bool) -> Result<Self> {
        let schema = if labelled { SCHEMA } else { SCHEMA_UNLABELLED };
        let schema = Arc::new(parse_message_type(schema)?);
        Ok(Self {
            writer: SerializedFileWriter::new(out, schema, Arc::new(properties))?,
        })
    }

    /// Writes `rows` as one row group (their labels are left out of a file without a label
    /// column).
    pub fn write_group(&mut self, rows: Vec<ImageRow>) -> Result {
        let mut images = Vec::with_capacity(rows.len());
        let mut paths = Vec::with_capacity(rows.len());
        let mut labels = Vec::with_capacity(rows.len());
        let mut label_defs = Vec::with_capacity(rows.len());
        for row in rows {
            images.push(ByteArray::from(row.image));
            paths.push(ByteArray::from(row.path.into_bytes()));
            // A sample without a class is a null label (the column is optional).
            label_defs.push(i16::from(row.label.is_some()));
            labels.extend(row.label);
        }
        let mut rg = self.writer.next_row_group()?;
        let mut column = 0;
        while let Some(mut col) = rg.next_column()? {
            match (column, col.untyped()) {
                (0, ColumnWriter::ByteArrayColumnWriter(w)) => {
                    w.write_batch(&images, Some(&vec![2; images.len()]), None)?;
                }
                (1, ColumnWriter::ByteArrayColumnWriter(w)) => {
                    w.write_batch(&paths, Some(&vec![2; paths.len()]), None)?;
                }
                (2, ColumnWriter::Int64ColumnWriter(w)) => {
                    w.write_batch(&labels, Some(&label_defs), None)?;
                }
                _ => return Err(WriteError::Sample("the schema's columns changed".into())),
            }
            col.close()?;
            column += 1;
        }
        rg.close()?;
        Ok(())
    }

    /// The file finished (its footer written), and what it was written to.
    pub fn finish(self) -> Result<W> {
        Ok(self.writer.into_inner()?)
    }
}
