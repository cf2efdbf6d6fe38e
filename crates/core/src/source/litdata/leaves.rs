//! A sample's leaves: which hold its image and label, and an item's bytes (a `u32` size
//! per leaf, then each leaf's bytes) cut into its record.

use std::sync::Arc;

use bytes::Bytes;
use loader_scheduler::{Label, Record};

use crate::source::columns::{IMAGE_NAMES, LABEL_NAMES};

/// Whether a leaf's format holds an image file's bytes.
fn is_image_format(format: &str) -> bool {
    format == "jpeg" || format == "bytes" || format.starts_with("image:")
}

/// The leaves read, by position in an item.
#[derive(Debug)]
pub(super) struct Columns {
    /// Every leaf's name, handed with the bytes of those neither image nor label.
    names: Vec<Arc<str>>,
    pub(super) image: usize,
    pub(super) label: Option<usize>,
}

impl Columns {
    /// How many leaves an item has.
    pub(super) fn leaves(&self) -> usize {
        self.names.len()
    }

    /// The leaves to read: `image` (or the first of [`IMAGE_NAMES`] present, or the one
    /// leaf holding image bytes) and `label` (`Some("")`: none; `None`: the first of
    /// [`LABEL_NAMES`] or `class` present, or none).
    pub(super) fn choose(
        leaves: &[(String, String)],
        image: Option<&str>,
        label: Option<&str>,
    ) -> Result<Self, String> {
        let find = |n: &str| leaves.iter().position(|(name, _)| name == n);
        let listed = || format!("its leaves (name, format) are {leaves:?}");
        let image = match image {
            Some(n) => find(n).ok_or_else(|| format!("no leaf {n:?} for images; {}", listed()))?,
            None => IMAGE_NAMES
                .iter()
                .find_map(|n| find(n))
                .or_else(|| {
                    let mut images = leaves
                        .iter()
                        .enumerate()
                        .filter(|(_, (_, f))| is_image_format(f));
                    match (images.next(), images.next()) {
                        (Some((i, _)), None) => Some(i),
                        _ => None,
                    }
                })
                .ok_or_else(|| {
                    format!(
                        "no image leaf among {IMAGE_NAMES:?}, nor one leaf of image bytes; name \
                         the one that holds the image bytes (image_column=..., \
                         --image-column; a tuple's leaves are named \"0\", \"1\", ...); {}",
                        listed()
                    )
                })?,
        };
        let (name, format) = &leaves[image];
        if !is_image_format(format) {
            let hint = if format == "pil" {
                "; litdata stores a PIL image that is not a JPEG as \"pil\", raw pixels: \
                 optimize with the file's bytes, or litdata's JPEG"
            } else {
                ""
            };
            return Err(format!(
                "leaf {name:?} is stored as {format:?}: images are read from leaves stored as \
                 \"jpeg\", \"bytes\" or \"image:...\" (an image file's bytes){hint}"
            ));
        }
        let label = match label {
            Some("") => None,
            Some(n) => Some(find(n).ok_or_else(|| format!("no label leaf {n:?}; {}", listed()))?),
            // LitData's own examples name it `class`.
            None => LABEL_NAMES.iter().chain(&["class"]).find_map(|n| find(n)),
        };
        if let Some(i) = label {
            let (name, format) = &leaves[i];
            if format != "int" {
                return Err(format!(
                    "label leaf {name:?} is stored as {format:?}: LitData labels are read as \
                     classes from Python ints (\"int\"); choose another (label_column=...) or \
                     none (label_column=\"\")"
                ));
            }
        }
        Ok(Self {
            names: leaves.iter().map(|(n, _)| Arc::from(n.as_str())).collect(),
            image,
            label,
        })
    }

    /// One item's record: its image, its label, its other leaves as members.
    pub(super) fn record(&self, item: &Bytes) -> Result<Record, String> {
        let n = self.names.len();
        let head = 4 * n;
        let sizes = item
            .get(..head)
            .ok_or("the item ends inside its leaf sizes")?;
        let mut at = head;
        let mut image = None;
        let mut label = Label::None;
        let mut members = Vec::new();
        for (i, size) in sizes.chunks_exact(4).enumerate() {
            let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
            let span = at
                .checked_add(size)
                .filter(|&e| e <= item.len())
                .map(|e| at..e)
                .ok_or_else(|| {
                    format!(
                        "its leaves need more than its {} bytes: was the chunk replaced?",
                        item.len()
                    )
                })?;
            at = span.end;
            let bytes = item.slice(span);
            if i == self.image {
                image = Some(bytes);
            } else if Some(i) == self.label {
                let value: [u8; 8] = bytes[..]
                    .try_into()
                    .map_err(|_| format!("an int label of {} bytes", bytes.len()))?;
                label = Label::Class(i64::from_le_bytes(value));
            } else {
                members.push((Arc::clone(&self.names[i]), bytes));
            }
        }
        Ok(Record {
            bytes: image,
            members,
            label: Some(label),
        })
    }
}
