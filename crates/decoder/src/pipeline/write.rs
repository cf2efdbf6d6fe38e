//! A pipeline's output: the view's pixels as u8 HWC, u8 CHW or normalized f32 CHW.

use super::{Output, Pipeline, Sample, SampleData, View};
use crate::{DecodeError, DecodeErrorKind, Result};

impl Pipeline {
    pub(super) fn write_u8(&self, view: &View<'_>, out: &mut [u8]) -> Result<[usize; 3]> {
        let (r, c) = (view.rect, view.image.channels);
        check_len(out.len(), r.h * r.w * c)?;
        if *self.output() == Output::U8Chw {
            let plane = r.h * r.w;
            for y in 0..r.h {
                let row = &view.image.data[((r.y + y) * view.image.width + r.x) * c..][..r.w * c];
                for (x, px) in row.chunks_exact(c).enumerate() {
                    let x = if view.flip { r.w - 1 - x } else { x };
                    for (ch, v) in px.iter().enumerate() {
                        out[ch * plane + y * r.w + x] = *v;
                    }
                }
            }
            return Ok([c, r.h, r.w]);
        }
        for (y, row_out) in out.chunks_exact_mut(r.w * c).enumerate() {
            let row = &view.image.data[((r.y + y) * view.image.width + r.x) * c..][..r.w * c];
            if view.flip {
                for (dst, src) in row_out.chunks_exact_mut(c).zip(row.chunks_exact(c).rev()) {
                    dst.copy_from_slice(src);
                }
            } else {
                row_out.copy_from_slice(row);
            }
        }
        Ok([r.h, r.w, c])
    }

    /// The rows of the f32 CHW output in order (channel by channel, top to bottom), each as
    /// its source row of pixels and the channel's lookup table; checks the channels first.
    pub(super) fn f32_rows<'v>(
        &'v self,
        view: &'v View<'_>,
    ) -> Result<impl Iterator<Item = (&'v [u8], usize, &'v [f32; 256])>> {
        let (r, c) = (view.rect, view.image.channels);
        let lut = &self.inner.lut;
        if lut.len() != c {
            return Err(DecodeError::new(
                DecodeErrorKind::InvalidArgument,
                format!("Normalize has {} channels but the image has {c}", lut.len()),
            ));
        }
        let data = &view.image.data;
        let stride = view.image.width * c;
        Ok(lut.iter().enumerate().flat_map(move |(ch, table)| {
            (r.y..r.y + r.h).map(move |y| (&data[y * stride + r.x * c..][..r.w * c], ch, table))
        }))
    }

    /// The f32 output in `out`'s memory, without first zeroing values it then overwrites.
    pub(super) fn push_f32(&self, view: &View<'_>, mut out: Vec<f32>) -> Result<Sample> {
        let (r, c, flip) = (view.rect, view.image.channels, view.flip);
        out.clear();
        out.reserve_exact(r.h * r.w * c);
        for (row, ch, table) in self.f32_rows(view)? {
            let pixels = row.chunks_exact(c);
            if flip {
                out.extend(pixels.rev().map(|px| table[usize::from(px[ch])]));
            } else {
                out.extend(pixels.map(|px| table[usize::from(px[ch])]));
            }
        }
        Ok(Sample {
            shape: [c, r.h, r.w],
            data: SampleData::F32(out),
        })
    }

    pub(super) fn write_f32(&self, view: &View<'_>, out: &mut [f32]) -> Result<[usize; 3]> {
        let (r, c, flip) = (view.rect, view.image.channels, view.flip);
        let rows = self.f32_rows(view)?;
        check_len(out.len(), r.h * r.w * c)?;
        for ((row, ch, table), dst) in rows.zip(out.chunks_exact_mut(r.w)) {
            let pixels = row.chunks_exact(c);
            if flip {
                for (d, px) in dst.iter_mut().zip(pixels.rev()) {
                    *d = table[usize::from(px[ch])];
                }
            } else {
                for (d, px) in dst.iter_mut().zip(pixels) {
                    *d = table[usize::from(px[ch])];
                }
            }
        }
        Ok([c, r.h, r.w])
    }
}

fn check_len(got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(DecodeError::new(
            DecodeErrorKind::InvalidArgument,
            format!("the output buffer holds {got} values but the sample has {want}"),
        ))
    }
}
