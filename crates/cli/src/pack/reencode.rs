//! A sample's image as it goes into a pack: as it is, or decoded, resized and encoded
//! again as JPEG (on the loader's CPU pool).

use bytes::Bytes;
use loader_core::StageError;
use loader_core::decoder::{DecodeOptions, Format, Pipeline, SampleData, SampleKey, decode};

/// A sample's image as it is packed: its bytes as they are (JPEG and PNG, without
/// `resize`), or re-encoded as JPEG at `quality` when its shorter side is over `resize`.
pub fn reencode(
    bytes: Bytes,
    resize: Option<u32>,
    pipeline: Option<&Pipeline>,
    quality: u8,
) -> Result<(Bytes, &'static str), StageError> {
    let format = Format::sniff(&bytes);
    let as_is = match format {
        Some(Format::Jpeg) => Some("jpg"),
        Some(Format::Png) => Some("png"),
        _ => None,
    };
    let (Some(px), Some(pipeline)) = (resize, pipeline) else {
        return match as_is {
            Some(ext) => Ok((bytes, ext)),
            None => Err(format!(
                "a {} image: shards are read as JPEG and PNG; give --resize to re-encode \
                 it as JPEG",
                format.map_or("unknown", |f| f.name())
            )
            .into()),
        };
    };
    let image = decode(&bytes, &DecodeOptions::default())?;
    if let Some(ext) = as_is.filter(|_| image.width.min(image.height) <= px as usize) {
        // Already small enough: kept, not degraded by a second encode.
        return Ok((bytes, ext));
    }
    let (pixels, width, height) = if image.width.min(image.height) > px as usize {
        let sample = pipeline.apply(&image, SampleKey { epoch: 0, index: 0 })?;
        let [h, w, _] = sample.shape;
        match sample.data {
            SampleData::U8(data) => (data, w, h),
            SampleData::F32(_) => return Err("the resize gave floats, not pixels".into()),
        }
    } else {
        (image.data, image.width, image.height)
    };
    let dims = |n: usize| u16::try_from(n).map_err(|_| format!("{n} px is too large for JPEG"));
    let mut out = Vec::with_capacity(pixels.len() / 8);
    jpeg_encoder::Encoder::new(&mut out, quality).encode(
        &pixels,
        dims(width)?,
        dims(height)?,
        jpeg_encoder::ColorType::Rgb,
    )?;
    Ok((Bytes::from(out), "jpg"))
}
