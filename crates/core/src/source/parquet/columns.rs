//! Which leaf columns hold a Parquet dataset's images and labels, and reading the labels.

use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArrayType, DataType};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::{ColumnDescPtr, SchemaDescriptor};

use super::footer::Sparse;

use crate::source::columns::{IMAGE_NAMES, LABEL_NAMES};

/// How a label column's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum LabelValues {
    /// Integers: class indices.
    Integer,
    /// UTF-8 strings: class names.
    Name,
}

/// The leaf columns a dataset is read from.
#[derive(Debug, Clone)]
pub(super) struct Columns {
    /// The image bytes' leaf (`image.bytes` of Hugging Face's struct, or a binary column).
    pub(super) image: usize,
    /// The label's leaf, and how its values read.
    pub(super) label: Option<(usize, LabelValues)>,
    /// The label column's name, for messages and Hugging Face's class names.
    pub(super) label_name: Option<String>,
}

/// The leaf a column name means: the column itself, or Hugging Face's `name.bytes`.
fn leaf(schema: &SchemaDescriptor, name: &str, image: bool) -> Option<usize> {
    let columns = schema.columns();
    let parts = |i: usize| columns[i].path().parts().to_vec();
    (0..columns.len())
        .find(|&i| parts(i) == [name])
        .or_else(|| {
            image
                .then(|| (0..columns.len()).find(|&i| parts(i) == [name, "bytes"]))
                .flatten()
        })
}

fn leaf_names(schema: &SchemaDescriptor) -> String {
    schema
        .columns()
        .iter()
        .map(|c| c.path().string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns of `schema` to read: `image` (or the first of [`IMAGE_NAMES`] present) and
/// `label` (`Some("")`: none; `None`: the first of [`LABEL_NAMES`] present, or none).
pub(super) fn choose(
    schema: &SchemaDescriptor,
    image: Option<&str>,
    label: Option<&str>,
) -> Result<Columns, String> {
    let image = match image {
        Some(name) => leaf(schema, name, true).ok_or_else(|| {
            format!(
                "no column {name:?} (or {name}.bytes) for images; its columns are {}",
                leaf_names(schema)
            )
        })?,
        None => IMAGE_NAMES
            .iter()
            .find_map(|n| leaf(schema, n, true))
            .ok_or_else(|| {
                format!(
                    "no image column among {IMAGE_NAMES:?}; name the column that holds the \
                     image bytes (image_column=..., --image-column); its columns are {}",
                    leaf_names(schema)
                )
            })?,
    };
    let descr = schema.column(image);
    if descr.physical_type() != PhysicalType::BYTE_ARRAY || descr.max_rep_level() > 0 {
        return Err(format!(
            "column {} holds {:?}{}, not one binary value per row: images are read from a \
             binary column or Hugging Face's struct of bytes and path",
            descr.path().string(),
            descr.physical_type(),
            if descr.max_rep_level() > 0 {
                " in lists"
            } else {
                ""
            }
        ));
    }
    let label_name = match label {
        Some("") => None,
        Some(name) => Some(name.to_owned()),
        None => LABEL_NAMES
            .iter()
            .find(|n| leaf(schema, n, false).is_some())
            .map(|n| (*n).to_owned()),
    };
    let label = match &label_name {
        None => None,
        Some(name) => {
            let i = leaf(schema, name, false).ok_or_else(|| {
                format!(
                    "no label column {name:?}; its columns are {}",
                    leaf_names(schema)
                )
            })?;
            Some((i, label_values(&schema.column(i))?))
        }
    };
    Ok(Columns {
        image,
        label,
        label_name,
    })
}

fn label_values(descr: &ColumnDescPtr) -> Result<LabelValues, String> {
    let name = descr.path().string();
    if descr.max_rep_level() > 0 {
        return Err(format!(
            "label column {name} holds lists: several labels per row are not read from \
             Parquet yet; choose a column of one class per row (label_column=...), or none \
             (label_column=\"\")"
        ));
    }
    match descr.physical_type() {
        PhysicalType::INT32 | PhysicalType::INT64
            if matches!(
                descr.logical_type_ref(),
                None | Some(LogicalType::Integer { .. })
            ) && !matches!(
                descr.converted_type(),
                ConvertedType::DATE
                    | ConvertedType::TIME_MILLIS
                    | ConvertedType::TIME_MICROS
                    | ConvertedType::TIMESTAMP_MILLIS
                    | ConvertedType::TIMESTAMP_MICROS
                    | ConvertedType::DECIMAL
            ) =>
        {
            Ok(LabelValues::Integer)
        }
        PhysicalType::BYTE_ARRAY
            if matches!(descr.logical_type_ref(), Some(LogicalType::String))
                || descr.converted_type() == parquet::basic::ConvertedType::UTF8 =>
        {
            Ok(LabelValues::Name)
        }
        other => Err(format!(
            "label column {name} holds {other:?} ({}): Parquet labels are read as classes, \
             from integers or class-name strings; choose another column (label_column=...) \
             or none (label_column=\"\")",
            descr.logical_type_ref().map_or_else(
                || format!("{:?}", descr.converted_type()),
                |t| format!("{t:?}")
            )
        )),
    }
}

/// The class names Hugging Face's `datasets` stores for `column` when it is a `ClassLabel`.
pub(super) fn class_label_names(meta: &ParquetMetaData, column: &str) -> Option<Vec<String>> {
    let kv = meta.file_metadata().key_value_metadata()?;
    let text = kv
        .iter()
        .find(|k| k.key == "huggingface")?
        .value
        .as_deref()?;
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    let feature = json.get("info")?.get("features")?.get(column)?;
    if feature.get("_type")?.as_str()? != "ClassLabel" {
        return None;
    }
    feature
        .get("names")?
        .as_array()?
        .iter()
        .map(|n| n.as_str().map(str::to_owned))
        .collect()
}

/// One row's label value as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Int(i64),
    Name(String),
    Null,
}

/// `decode`'s result, or its panic as an error: parquet's decoders assert on some damaged
/// input (a dictionary-encoded page without its dictionary), and bytes from storage must
/// not end the loader.
pub(super) fn without_panics<T>(decode: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(format!("the Parquet decoder failed on it: {message}"))
    })
}

/// Every value of leaf `column` in row group `rg`, whose column chunk's bytes are `bytes`.
pub(super) fn read_values(
    size: u64,
    rg: &RowGroupMetaData,
    column: usize,
    bytes: Bytes,
) -> Result<Vec<Value>, String> {
    without_panics(|| read_values_of(size, rg, column, bytes))
}

/// A reader of leaf `column` of row group `rg`, whose column chunk's bytes are `bytes`,
/// with the column's highest definition level and the row group's rows.
pub(super) fn column_reader(
    size: u64,
    rg: &RowGroupMetaData,
    column: usize,
    bytes: Bytes,
) -> Result<(ColumnReader, ColumnDescPtr, usize), String> {
    let chunk = rg.column(column);
    let (start, _) = chunk.byte_range();
    let rows = usize::try_from(rg.num_rows()).map_err(|_| "a negative row count".to_owned())?;
    let sparse = Sparse {
        size,
        at: start,
        bytes,
    };
    let pages = SerializedPageReader::new(Arc::new(sparse), chunk, rows, None)
        .map_err(|e| e.to_string())?;
    let descr = chunk.column_descr_ptr();
    let reader = parquet::column::reader::get_column_reader(descr.clone(), Box::new(pages));
    Ok((reader, descr, rows))
}

/// Which rows of binary leaf `column` in row group `rg` are null, whose column chunk's
/// bytes are `bytes`.
pub(super) fn read_nulls(
    size: u64,
    rg: &RowGroupMetaData,
    column: usize,
    bytes: Bytes,
) -> Result<Vec<bool>, String> {
    without_panics(|| {
        let (reader, descr, rows) = column_reader(size, rg, column, bytes)?;
        let ColumnReader::ByteArrayColumnReader(mut reader) = reader else {
            return Err("the image column is not binary".into());
        };
        let mut defs = Vec::with_capacity(rows.min(1 << 16));
        let values = read_all(&mut reader, rows, &mut defs)?;
        Ok(spread(values, &defs, descr.max_def_level(), rows)?
            .iter()
            .map(Option::is_none)
            .collect())
    })
}

/// Whether integer leaf `descr` holds unsigned values (by its logical type, or the legacy
/// converted type older writers set alone).
pub(super) fn is_unsigned(descr: &ColumnDescPtr) -> bool {
    matches!(
        descr.logical_type_ref(),
        Some(LogicalType::Integer(int)) if !int.is_signed
    ) || matches!(
        descr.converted_type(),
        ConvertedType::UINT_8
            | ConvertedType::UINT_16
            | ConvertedType::UINT_32
            | ConvertedType::UINT_64
    )
}

/// Every value of the `path` leaf `column` of an image struct in row group `rg` (`None`
/// for a null), and how many rows have the whole struct null.
pub(super) fn read_paths(
    size: u64,
    rg: &RowGroupMetaData,
    column: usize,
    bytes: Bytes,
) -> Result<(Vec<Option<String>>, u64), String> {
    without_panics(|| {
        let (reader, descr, rows) = column_reader(size, rg, column, bytes)?;
        let ColumnReader::ByteArrayColumnReader(mut reader) = reader else {
            return Err("the image paths are not strings".into());
        };
        let mut defs = Vec::with_capacity(rows.min(1 << 16));
        let values = read_all(&mut reader, rows, &mut defs)?;
        // The struct is optional when the levels above the leaf's own hold one.
        let leaf_optional =
            descr.self_type().get_basic_info().repetition() == parquet::basic::Repetition::OPTIONAL;
        let struct_optional = descr.max_def_level() - i16::from(leaf_optional) > 0;
        let whole_nulls = if struct_optional {
            defs.iter().filter(|&&d| d == 0).count() as u64
        } else {
            0
        };
        let paths = spread(values, &defs, descr.max_def_level(), rows)?
            .into_iter()
            .map(|v| {
                v.map(|v| {
                    String::from_utf8(v.data().to_vec())
                        .map_err(|_| "an image path that is not UTF-8".to_owned())
                })
                .transpose()
            })
            .collect::<Result<_, _>>()?;
        Ok((paths, whole_nulls))
    })
}

fn read_values_of(
    size: u64,
    rg: &RowGroupMetaData,
    column: usize,
    bytes: Bytes,
) -> Result<Vec<Value>, String> {
    let (reader, descr, rows) = column_reader(size, rg, column, bytes)?;
    let max_def = descr.max_def_level();
    // Not sized from the footer's row count: a count is not trusted with memory.
    let mut defs = Vec::with_capacity(rows.min(1 << 16));
    let unsigned = is_unsigned(&descr);
    let values: Vec<Value> = match reader {
        ColumnReader::Int32ColumnReader(mut r) => read_all(&mut r, rows, &mut defs)?
            .into_iter()
            .map(|v| {
                Value::Int(if unsigned {
                    i64::from(v as u32)
                } else {
                    i64::from(v)
                })
            })
            .collect(),
        ColumnReader::Int64ColumnReader(mut r) => read_all(&mut r, rows, &mut defs)?
            .into_iter()
            .map(|v| {
                if unsigned && v < 0 {
                    Err(format!(
                        "a label of {} (unsigned), past what a class index holds",
                        v as u64
                    ))
                } else {
                    Ok(Value::Int(v))
                }
            })
            .collect::<Result<_, _>>()?,
        ColumnReader::ByteArrayColumnReader(mut r) => {
            read_all::<ByteArrayType>(&mut r, rows, &mut defs)?
                .into_iter()
                .map(|v| {
                    String::from_utf8(v.data().to_vec())
                        .map(Value::Name)
                        .map_err(|_| "a label that is not UTF-8".to_owned())
                })
                .collect::<Result<_, _>>()?
        }
        _ => return Err("a label column of another type".into()),
    };
    Ok(spread(values, &defs, max_def, rows)?
        .into_iter()
        .map(|v| v.unwrap_or(Value::Null))
        .collect())
}

/// Reads `rows` records of a column, filling `defs`; its values (nulls left out).
pub(super) fn read_all<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    rows: usize,
    defs: &mut Vec<i16>,
) -> Result<Vec<T::T>, String> {
    let mut values = Vec::new();
    let mut read = 0;
    while read < rows {
        let (records, _, _) = reader
            .read_records(rows - read, Some(defs), None, &mut values)
            .map_err(|e| e.to_string())?;
        if records == 0 {
            return Err(format!(
                "the column chunk holds {read} rows where its row group says {rows}"
            ));
        }
        read += records;
    }
    Ok(values)
}

/// Values (nulls left out) spread over their `rows` by definition levels: `None` for a
/// null (the row's value, or a struct holding it, is missing).
pub(super) fn spread<V>(
    values: Vec<V>,
    defs: &[i16],
    max_def: i16,
    rows: usize,
) -> Result<Vec<Option<V>>, String> {
    let count = |n: usize| format!("{n} values for {rows} rows");
    if max_def == 0 {
        if values.len() != rows {
            return Err(count(values.len()));
        }
        return Ok(values.into_iter().map(Some).collect());
    }
    if defs.len() != rows {
        return Err(count(defs.len()));
    }
    let present = defs.iter().filter(|&&d| d == max_def).count();
    if present != values.len() {
        return Err(format!(
            "{} values where the definition levels say {present}",
            values.len()
        ));
    }
    let mut values = values.into_iter();
    Ok(defs
        .iter()
        .map(|&d| if d == max_def { values.next() } else { None })
        .collect())
}
