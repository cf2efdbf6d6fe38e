//! Transforms composed into one shareable, seeded pipeline.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::decode::decode_reusing;
use crate::geometry::{self, Rect};
use crate::resize::{Filter, pixels, resize};
use crate::{DecodeError, DecodeErrorKind, DecodeOptions, Image, Result};

/// ImageNet's per-channel mean, for [`Output::F32Chw`].
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet's per-channel standard deviation.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Identifies a sample for its augmentation: the same key gets the same random draws on
/// every run and every thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SampleKey {
    /// The epoch.
    pub epoch: u64,
    /// The dataset index.
    pub index: u64,
}

/// One step of a pipeline, with torchvision's semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum Transform {
    /// `Resize(size)`: the shorter side becomes `size`, the aspect ratio is kept.
    Resize {
        /// The shorter side after resizing.
        size: usize,
        /// Resampling filter.
        filter: Filter,
    },
    /// `CenterCrop((height, width))`; zero-padded if the image is smaller.
    CenterCrop {
        /// Crop height.
        height: usize,
        /// Crop width.
        width: usize,
    },
    /// `RandomResizedCrop((height, width), scale, ratio)`.
    RandomResizedCrop {
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
        /// Range of the crop's area as a fraction of the image's.
        scale: (f64, f64),
        /// Range of the crop's aspect ratio (width / height), drawn log-uniformly.
        ratio: (f64, f64),
        /// Resampling filter.
        filter: Filter,
    },
    /// `RandomHorizontalFlip(p)`.
    RandomHorizontalFlip {
        /// Probability of flipping.
        p: f64,
    },
}

/// What a pipeline hands back.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The pixels as they are: u8, height × width × channels.
    U8Hwc,
    /// `ToTensor` then `Normalize(mean, std)`: f32, channels × height × width. Give one
    /// mean and std per channel (mean 0 and std 1 for `ToTensor` alone).
    F32Chw {
        /// Per-channel mean, subtracted after scaling to [0, 1].
        mean: Vec<f32>,
        /// Per-channel standard deviation, divided by.
        std: Vec<f32>,
    },
}

/// The pixels a pipeline produced.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleData {
    /// For [`Output::U8Hwc`].
    U8(Vec<u8>),
    /// For [`Output::F32Chw`].
    F32(Vec<f32>),
}

/// A transformed sample: its data and shape (`[H, W, C]` for u8, `[C, H, W]` for f32).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The shape, in the layout of the data.
    pub shape: [usize; 3],
    /// The values.
    pub data: SampleData,
}

#[derive(Debug)]
struct Inner {
    transforms: Vec<Transform>,
    output: Output,
    decode: DecodeOptions,
    seed: u64,
    /// `((v / 255) - mean[c]) / std[c]` for every byte value, per channel: exact and fast.
    lut: Vec<[f32; 256]>,
}

/// Decode options, transforms and an output format, ready to run on any thread.
/// Cloning is cheap (shared), and it is `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
}

/// Builds a [`Pipeline`] step by step, in torchvision's order.
#[derive(Debug, Clone)]
pub struct PipelineBuilder {
    transforms: Vec<Transform>,
    output: Output,
    decode: DecodeOptions,
    seed: u64,
}

impl PipelineBuilder {
    /// Add any transform.
    pub fn then(mut self, transform: Transform) -> Self {
        self.transforms.push(transform);
        self
    }

    /// `Resize(size)` with the bilinear filter.
    pub fn resize(self, size: usize) -> Self {
        self.then(Transform::Resize {
            size,
            filter: Filter::Bilinear,
        })
    }

    /// `CenterCrop(size)`.
    pub fn center_crop(self, size: usize) -> Self {
        self.then(Transform::CenterCrop {
            height: size,
            width: size,
        })
    }

    /// `RandomResizedCrop(size)` with the default scale (0.08, 1) and ratio (3/4, 4/3).
    pub fn random_resized_crop(self, size: usize) -> Self {
        self.then(Transform::RandomResizedCrop {
            height: size,
            width: size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            filter: Filter::Bilinear,
        })
    }

    /// `RandomHorizontalFlip(p)`.
    pub fn random_horizontal_flip(self, p: f64) -> Self {
        self.then(Transform::RandomHorizontalFlip { p })
    }

    /// `ToTensor()` followed by `Normalize(mean, std)`.
    pub fn to_tensor_normalized(mut self, mean: &[f32], std: &[f32]) -> Self {
        self.output = Output::F32Chw {
            mean: mean.to_vec(),
            std: std.to_vec(),
        };
        self
    }

    /// Keep u8 HWC pixels (the default output).
    pub fn to_u8(mut self) -> Self {
        self.output = Output::U8Hwc;
        self
    }

    /// The seed of the random transforms.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Decoder settings (pixel budget, colour mode).
    pub fn decode_options(mut self, options: DecodeOptions) -> Self {
        self.decode = options;
        self
    }

    /// Check the parameters and build.
    pub fn build(self) -> Result<Pipeline> {
        let invalid = |m: String| DecodeError::new(DecodeErrorKind::InvalidArgument, m);
        for t in &self.transforms {
            match *t {
                Transform::Resize { size: 0, .. } => {
                    return Err(invalid("Resize to 0 pixels".into()));
                }
                Transform::CenterCrop { height, width }
                | Transform::RandomResizedCrop { height, width, .. }
                    if height == 0 || width == 0 =>
                {
                    return Err(invalid(format!("a {height}x{width} crop")));
                }
                Transform::RandomResizedCrop { scale, ratio, .. }
                    if !(0.0 < scale.0
                        && scale.0 <= scale.1
                        && 0.0 < ratio.0
                        && ratio.0 <= ratio.1) =>
                {
                    return Err(invalid(format!(
                        "RandomResizedCrop scale {scale:?} / ratio {ratio:?}"
                    )));
                }
                Transform::RandomHorizontalFlip { p } if !(0.0..=1.0).contains(&p) => {
                    return Err(invalid(format!("flip probability {p}")));
                }
                _ => {}
            }
        }
        let lut = match &self.output {
            Output::U8Hwc => Vec::new(),
            Output::F32Chw { mean, std } => {
                if mean.len() != std.len()
                    || mean.is_empty()
                    || std.iter().any(|s| *s == 0.0 || !s.is_finite())
                {
                    return Err(invalid(format!("Normalize mean {mean:?} / std {std:?}")));
                }
                mean.iter()
                    .zip(std)
                    .map(|(m, s)| std::array::from_fn(|v| ((v as f32 / 255.0) - m) / s))
                    .collect()
            }
        };
        Ok(Pipeline {
            inner: Arc::new(Inner {
                transforms: self.transforms,
                output: self.output,
                decode: self.decode,
                seed: self.seed,
                lut,
            }),
        })
    }
}

/// An image on its way through the steps: crops and a flip stay pending (a rectangle and
/// a flag) until a resize or the output reads the pixels, so they cost no copy.
struct View<'a> {
    image: Cow<'a, Image>,
    rect: Rect,
    flip: bool,
}

impl View<'_> {
    /// A sub-rectangle given in the coordinates the view shows (after the pending flip).
    fn crop(&mut self, shown: Rect) {
        let x = if self.flip {
            self.rect.w - shown.x - shown.w
        } else {
            shown.x
        };
        self.rect = Rect {
            x: self.rect.x + x,
            y: self.rect.y + shown.y,
            w: shown.w,
            h: shown.h,
        };
    }

    /// The pixels as shown, as a new image (used only on rare paths: padding, a flip
    /// followed by a resize).
    fn materialize(&self) -> Image {
        let (c, r) = (self.image.channels, self.rect);
        let mut data = Vec::with_capacity(r.w * r.h * c);
        for y in r.y..r.y + r.h {
            for xs in 0..r.w {
                let x = if self.flip {
                    r.x + r.w - 1 - xs
                } else {
                    r.x + xs
                };
                data.extend_from_slice(self.image.pixel(x, y));
            }
        }
        Image {
            width: r.w,
            height: r.h,
            channels: c,
            data,
        }
    }

    fn replace(&mut self, image: Image) {
        self.rect = Rect {
            x: 0,
            y: 0,
            w: image.width,
            h: image.height,
        };
        self.image = Cow::Owned(image);
        self.flip = false;
    }

    fn resize_to(&mut self, height: usize, width: usize, filter: Filter) -> Result<()> {
        if self.flip {
            // Keep torchvision's order exactly: flip first, then resample.
            let flipped = self.materialize();
            self.replace(flipped);
        }
        let resized = resize(&self.image, pixels(self.rect), height, width, filter)?;
        self.replace(resized);
        Ok(())
    }

    /// `Resize` to (`height`, `width`) then a crop of it, computed only where the crop
    /// is: the evaluation pipeline's resize then costs a third less.
    fn resize_and_crop(
        &mut self,
        height: usize,
        width: usize,
        crop: Rect,
        filter: Filter,
    ) -> Result<()> {
        if self.flip {
            let flipped = self.materialize();
            self.replace(flipped);
        }
        let (sx, sy) = (
            self.rect.w as f64 / width as f64,
            self.rect.h as f64 / height as f64,
        );
        let region = (
            self.rect.x as f64 + crop.x as f64 * sx,
            self.rect.y as f64 + crop.y as f64 * sy,
            crop.w as f64 * sx,
            crop.h as f64 * sy,
        );
        let resized = resize(&self.image, region, crop.h, crop.w, filter)?;
        self.replace(resized);
        Ok(())
    }
}

thread_local! {
    /// The last decoded image's pixel buffer, for the next image this thread decodes.
    static PIXELS: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A buffer bigger than this (a 2,400 x 2,400 RGB image) is freed, not kept per thread.
const KEEP_PIXELS: usize = 16 << 20;

/// Decode `bytes` into this thread's pixel buffer and run `f` on the image. A 500 x 375
/// RGB image is 562 KB: allocated afresh per image, its pages were faulted in and zeroed
/// each time, ~5% of a decode thread in a profile.
fn with_pixels<R>(
    bytes: &[u8],
    options: &DecodeOptions,
    f: impl FnOnce(&Image) -> Result<R>,
) -> Result<R> {
    let image = decode_reusing(bytes, options, PIXELS.take())?;
    let out = f(&image);
    if image.data.capacity() <= KEEP_PIXELS {
        PIXELS.set(image.data);
    }
    out
}

fn mix(mut z: u64) -> u64 {
    // SplitMix64's finaliser, to turn (seed, epoch, index) into independent streams.
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Pipeline {
    /// Start with no transforms, u8 output, default decode options and seed 0.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder {
            transforms: Vec::new(),
            output: Output::U8Hwc,
            decode: DecodeOptions::default(),
            seed: 0,
        }
    }

    /// torchvision's ImageNet evaluation transform: Resize(256), CenterCrop(224),
    /// ToTensor, Normalize(ImageNet mean, std) → f32 `[3, 224, 224]`.
    pub fn imagenet_eval() -> Pipeline {
        Self::builder()
            .resize(256)
            .center_crop(224)
            .to_tensor_normalized(&IMAGENET_MEAN, &IMAGENET_STD)
            .build()
            .expect("the ImageNet evaluation parameters are valid")
    }

    /// torchvision's ImageNet training transform: RandomResizedCrop(224),
    /// RandomHorizontalFlip(0.5), ToTensor, Normalize → f32 `[3, 224, 224]`.
    pub fn imagenet_train(seed: u64) -> Pipeline {
        Self::builder()
            .random_resized_crop(224)
            .random_horizontal_flip(0.5)
            .to_tensor_normalized(&IMAGENET_MEAN, &IMAGENET_STD)
            .seed(seed)
            .build()
            .expect("the ImageNet training parameters are valid")
    }

    /// The decoder settings.
    pub fn decode_options(&self) -> &DecodeOptions {
        &self.inner.decode
    }

    /// The output kind.
    pub fn output(&self) -> &Output {
        &self.inner.output
    }

    /// The shape of every output when the last resizing step fixes it (a crop), for
    /// 3-channel input: `[C, H, W]` for f32, `[H, W, C]` for u8.
    pub fn output_shape(&self) -> Option<[usize; 3]> {
        let (h, w) = self.inner.transforms.iter().rev().find_map(|t| match *t {
            Transform::CenterCrop { height, width }
            | Transform::RandomResizedCrop { height, width, .. } => Some(Some((height, width))),
            Transform::Resize { .. } => Some(None),
            Transform::RandomHorizontalFlip { .. } => None,
        })??;
        Some(match &self.inner.output {
            Output::U8Hwc => [h, w, 3],
            Output::F32Chw { mean, .. } => [mean.len(), h, w],
        })
    }

    /// Decode `bytes` and transform them.
    pub fn run(&self, bytes: &[u8], key: SampleKey) -> Result<Sample> {
        with_pixels(bytes, &self.inner.decode, |image| self.apply(image, key))
    }

    /// Decode and transform straight into `out` (e.g. a slot of a batch buffer); returns
    /// the shape written. `out` must have exactly the output's length.
    pub fn run_into_f32(
        &self,
        bytes: &[u8],
        key: SampleKey,
        out: &mut [f32],
    ) -> Result<[usize; 3]> {
        with_pixels(bytes, &self.inner.decode, |image| {
            let view = self.transform(image, key)?;
            self.write_f32(&view, out)
        })
    }

    /// Transform a decoded image into a new buffer.
    pub fn apply(&self, image: &Image, key: SampleKey) -> Result<Sample> {
        self.apply_reusing(image, key, SampleData::F32(Vec::new()))
    }

    /// [`run`](Self::run), writing the output into the memory of `reuse` (e.g. the data of
    /// a sample already consumed) when it is of the output's type; its values are
    /// discarded. A loader that hands consumed samples back allocates no fresh memory per
    /// sample.
    pub fn run_reusing(&self, bytes: &[u8], key: SampleKey, reuse: SampleData) -> Result<Sample> {
        with_pixels(bytes, &self.inner.decode, |image| {
            self.apply_reusing(image, key, reuse)
        })
    }

    fn apply_reusing(&self, image: &Image, key: SampleKey, reuse: SampleData) -> Result<Sample> {
        let view = self.transform(image, key)?;
        let (h, w, c) = (view.rect.h, view.rect.w, view.image.channels);
        match self.inner.output {
            Output::U8Hwc => {
                let mut out = match reuse {
                    SampleData::U8(v) => v,
                    SampleData::F32(_) => Vec::new(),
                };
                out.clear();
                out.resize(h * w * c, 0);
                let shape = self.write_u8(&view, &mut out)?;
                Ok(Sample {
                    shape,
                    data: SampleData::U8(out),
                })
            }
            Output::F32Chw { .. } => {
                let out = match reuse {
                    SampleData::F32(v) => v,
                    SampleData::U8(_) => Vec::new(),
                };
                self.push_f32(&view, out)
            }
        }
    }

    /// Transform a decoded image into `out` as f32 CHW; returns the shape written.
    pub fn apply_into_f32(
        &self,
        image: &Image,
        key: SampleKey,
        out: &mut [f32],
    ) -> Result<[usize; 3]> {
        let view = self.transform(image, key)?;
        self.write_f32(&view, out)
    }

    /// Transform a decoded image into `out` as u8 HWC; returns the shape written.
    pub fn apply_into_u8(
        &self,
        image: &Image,
        key: SampleKey,
        out: &mut [u8],
    ) -> Result<[usize; 3]> {
        let view = self.transform(image, key)?;
        self.write_u8(&view, out)
    }

    fn transform<'a>(&self, image: &'a Image, key: SampleKey) -> Result<View<'a>> {
        let seed = mix(mix(mix(self.inner.seed) ^ key.epoch) ^ key.index);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut view = View {
            rect: Rect {
                x: 0,
                y: 0,
                w: image.width,
                h: image.height,
            },
            image: Cow::Borrowed(image),
            flip: false,
        };
        let mut steps = self.inner.transforms.iter().peekable();
        while let Some(t) = steps.next() {
            match *t {
                Transform::Resize { size, filter } => {
                    let (h, w) = geometry::resize_shorter(view.rect.h, view.rect.w, size);
                    let (h, w) = (h.max(1), w.max(1));
                    match steps.peek() {
                        Some(Transform::CenterCrop { height, width })
                            if *height <= h && *width <= w =>
                        {
                            let (top, left) = geometry::center_crop_offsets(h, w, *height, *width);
                            view.resize_and_crop(
                                h,
                                w,
                                Rect {
                                    x: left,
                                    y: top,
                                    w: *width,
                                    h: *height,
                                },
                                filter,
                            )?;
                            steps.next();
                        }
                        _ => view.resize_to(h, w, filter)?,
                    }
                }
                Transform::CenterCrop { height, width } => {
                    if height > view.rect.h || width > view.rect.w {
                        let padded = pad(&view.materialize(), height, width);
                        view.replace(padded);
                    }
                    let (y, x) =
                        geometry::center_crop_offsets(view.rect.h, view.rect.w, height, width);
                    view.crop(Rect {
                        x,
                        y,
                        w: width,
                        h: height,
                    });
                }
                Transform::RandomResizedCrop {
                    height,
                    width,
                    scale,
                    ratio,
                    filter,
                } => {
                    let region = geometry::random_resized_crop(
                        &mut rng,
                        view.rect.h,
                        view.rect.w,
                        scale,
                        ratio,
                    );
                    view.crop(region);
                    view.resize_to(height, width, filter)?;
                }
                Transform::RandomHorizontalFlip { p } => {
                    if rng.random::<f64>() < p {
                        view.flip = !view.flip;
                    }
                }
            }
        }
        Ok(view)
    }

    fn write_u8(&self, view: &View<'_>, out: &mut [u8]) -> Result<[usize; 3]> {
        let (r, c) = (view.rect, view.image.channels);
        check_len(out.len(), r.h * r.w * c)?;
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
    fn f32_rows<'v>(
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
    fn push_f32(&self, view: &View<'_>, mut out: Vec<f32>) -> Result<Sample> {
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

    fn write_f32(&self, view: &View<'_>, out: &mut [f32]) -> Result<[usize; 3]> {
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

/// torchvision's zero padding so a center crop of `height` x `width` fits.
fn pad(image: &Image, height: usize, width: usize) -> Image {
    let [left, top, right, bottom] =
        geometry::center_crop_padding(image.height, image.width, height, width);
    let (w, h, c) = (
        image.width + left + right,
        image.height + top + bottom,
        image.channels,
    );
    let mut data = vec![0u8; w * h * c];
    for y in 0..image.height {
        let src = &image.data[y * image.width * c..][..image.width * c];
        data[((y + top) * w + left) * c..][..image.width * c].copy_from_slice(src);
    }
    Image {
        width: w,
        height: h,
        channels: c,
        data,
    }
}
