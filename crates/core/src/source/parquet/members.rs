//! Other columns of a Parquet dataset (a caption, a size, an id) handed to custom stages
//! as each sample's members, by name. Read at open, like the labels, and held for the
//! run: a column's pages are not aligned with the image column's, so reading them with
//! each image page would cost a request per column.

use bytes::Bytes;
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::ColumnReader;
use parquet::data_type::{ByteArray, DataType, FixedLenByteArray};
use parquet::file::metadata::RowGroupMetaData;
use parquet::schema::types::SchemaDescriptor;

use super::columns::{column_reader, is_unsigned, read_all, spread, without_panics};

/// Most bytes the member columns of a dataset may hold in all, since they are held for the
/// run.
pub(super) const MAX_MEMBER_BYTES: u64 = 1 << 30;

/// The leaf of each column in `names`, checked: a top-level column of one value per row,
/// not the image's or label's.
pub(super) fn choose(
    schema: &SchemaDescriptor,
    names: &[String],
    taken: &[usize],
) -> Result<Vec<usize>, String> {
    let columns = schema.columns();
    names
        .iter()
        .map(|name| {
            let leaf = (0..columns.len())
                .find(|&i| columns[i].path().parts() == [name.as_str()])
                .ok_or_else(|| {
                    let all: Vec<String> = columns.iter().map(|c| c.path().string()).collect();
                    format!(
                        "no member column {name:?} (a top-level column of one value per row); \
                         its columns are {}",
                        all.join(", ")
                    )
                })?;
            let descr = &columns[leaf];
            if taken.contains(&leaf) {
                return Err(format!(
                    "column {name:?} is the image or label column: name it as a member of \
                     no sample, it is handed as the image or label already"
                ));
            }
            // Values whose text would not be what they mean (a decimal's unscaled
            // integer, a date's day count) are refused, not handed out wrong.
            let plain = match descr.logical_type_ref() {
                None => matches!(
                    descr.converted_type(),
                    ConvertedType::NONE
                        | ConvertedType::UTF8
                        | ConvertedType::ENUM
                        | ConvertedType::JSON
                        | ConvertedType::INT_8
                        | ConvertedType::INT_16
                        | ConvertedType::INT_32
                        | ConvertedType::INT_64
                        | ConvertedType::UINT_8
                        | ConvertedType::UINT_16
                        | ConvertedType::UINT_32
                        | ConvertedType::UINT_64
                ),
                Some(t) => matches!(
                    t,
                    LogicalType::Integer { .. }
                        | LogicalType::String
                        | LogicalType::Enum
                        | LogicalType::Json
                ),
            };
            let what = if descr.max_rep_level() > 0 {
                Some("lists".to_owned())
            } else if descr.physical_type() == PhysicalType::INT96 {
                Some("INT96 timestamps".to_owned())
            } else if !plain {
                Some(format!(
                    "{} values",
                    descr.logical_type_ref().map_or_else(
                        || format!("{:?}", descr.converted_type()),
                        |t| format!("{t:?}")
                    )
                ))
            } else {
                None
            };
            if let Some(what) = what {
                return Err(format!(
                    "member column {name:?} holds {what}: members are read from columns of one \
                     integer, float, boolean, string or binary value per row"
                ));
            }
            Ok(leaf)
        })
        .collect()
}

/// Every value of member leaf `column` in row group `rg` as its member's bytes (binary and
/// strings as stored, numbers and booleans as text, as WebDataset's `.cls` holds them);
/// `None` for a null.
pub(super) fn read(
    size: u64,
    rg: &RowGroupMetaData,
    column: usize,
    bytes: Bytes,
) -> Result<Vec<Option<Bytes>>, String> {
    without_panics(|| {
        let (reader, descr, rows) = column_reader(size, rg, column, bytes)?;
        let max_def = descr.max_def_level();
        let unsigned = is_unsigned(&descr);
        let mut defs = Vec::with_capacity(rows.min(1 << 16));
        fn text<T: std::fmt::Display>(values: Vec<T>) -> Vec<Bytes> {
            values
                .into_iter()
                .map(|v| Bytes::from(v.to_string()))
                .collect()
        }
        fn all<T: DataType>(
            mut r: parquet::column::reader::ColumnReaderImpl<T>,
            rows: usize,
            defs: &mut Vec<i16>,
        ) -> Result<Vec<T::T>, String> {
            read_all(&mut r, rows, defs)
        }
        let values: Vec<Bytes> = match reader {
            ColumnReader::BoolColumnReader(r) => text(all(r, rows, &mut defs)?),
            ColumnReader::Int32ColumnReader(r) if unsigned => text(
                all(r, rows, &mut defs)?
                    .into_iter()
                    .map(|v| v as u32)
                    .collect(),
            ),
            ColumnReader::Int32ColumnReader(r) => text(all(r, rows, &mut defs)?),
            ColumnReader::Int64ColumnReader(r) if unsigned => text(
                all(r, rows, &mut defs)?
                    .into_iter()
                    .map(|v| v as u64)
                    .collect(),
            ),
            ColumnReader::Int64ColumnReader(r) => text(all(r, rows, &mut defs)?),
            ColumnReader::FloatColumnReader(r) => text(all(r, rows, &mut defs)?),
            ColumnReader::DoubleColumnReader(r) => text(all(r, rows, &mut defs)?),
            ColumnReader::ByteArrayColumnReader(r) => all(r, rows, &mut defs)?
                .into_iter()
                .map(|v: ByteArray| Bytes::copy_from_slice(v.data()))
                .collect(),
            ColumnReader::FixedLenByteArrayColumnReader(r) => all(r, rows, &mut defs)?
                .into_iter()
                .map(|v: FixedLenByteArray| Bytes::copy_from_slice(v.data()))
                .collect(),
            ColumnReader::Int96ColumnReader(_) => {
                return Err("INT96 values are not read as members".into());
            }
        };
        spread(values, &defs, max_def, rows)
    })
}
