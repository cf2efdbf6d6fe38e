//! Transforms composed into one shareable, seeded pipeline. Rooms: `sample` (what a
//! pipeline takes and gives), `builder` (the steps, checked), `view` (an image between
//! steps, crops pending), `write` (the output: u8 HWC or normalized f32 CHW); here the
//! pipeline itself and its runs.

mod builder;
mod sample;
mod view;
mod write;

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use builder::PipelineBuilder;
pub use sample::{Output, Sample, SampleData, SampleKey, Transform};
use view::{View, pad};

use crate::decode::decode_planned;
use crate::geometry::{self, Rect};
use crate::wanted::{Decoded, Wanted};

use crate::augment::RandomErasing;
use crate::{DecodeError, DecodeErrorKind, DecodeOptions, Image, Result};

/// ImageNet's per-channel mean, for [`Output::F32Chw`].
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet's per-channel standard deviation.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

#[derive(Debug, Clone)]
struct Inner {
    transforms: Vec<Transform>,
    output: Output,
    decode: DecodeOptions,
    seed: u64,
    /// `RandomErasing` steps, run on the output in order.
    erasing: Vec<RandomErasing>,
    /// `((v / 255) - mean[c]) / std[c]` for every byte value, per channel: exact and fast.
    lut: Vec<[f32; 256]>,
}

/// Decode options, transforms and an output format, ready to run on any thread.
/// Cloning is cheap (shared), and it is `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
}

thread_local! {
    /// The last decoded image's pixel buffer, for the next image this thread decodes.
    static PIXELS: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A buffer bigger than this (a 2,400 x 2,400 RGB image) is freed, not kept per thread.
const KEEP_PIXELS: usize = 16 << 20;

/// Decode `bytes` into this thread's pixel buffer and run `f` on the image (or the part of
/// it `plan` asks for). A 500 x 375 RGB image is 562 KB: allocated afresh per image, its
/// pages were faulted in and zeroed each time, ~5% of a decode thread in a profile.
fn with_pixels<R>(
    bytes: &[u8],
    options: &DecodeOptions,
    plan: impl FnOnce(usize, usize) -> Wanted,
    f: impl FnOnce(&Decoded) -> Result<R>,
) -> Result<R> {
    let decoded = decode_planned(bytes, options, PIXELS.take(), plan)?;
    let out = f(&decoded);
    if decoded.image.data.capacity() <= KEEP_PIXELS {
        PIXELS.set(decoded.image.data);
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
            erasing: Vec::new(),
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

    /// The same steps with other decoder settings.
    pub fn with_decode_options(&self, decode: DecodeOptions) -> Pipeline {
        let mut inner = (*self.inner).clone();
        inner.decode = decode;
        Pipeline {
            inner: Arc::new(inner),
        }
    }

    /// The output kind.
    pub fn output(&self) -> &Output {
        &self.inner.output
    }

    /// The shape of every output when the last resizing step fixes it (a crop), for
    /// 3-channel input: `[H, W, C]` for u8 HWC, `[C, H, W]` for the others.
    pub fn output_shape(&self) -> Option<[usize; 3]> {
        let (h, w) = self.inner.transforms.iter().rev().find_map(|t| match *t {
            Transform::CenterCrop { height, width }
            | Transform::RandomResizedCrop { height, width, .. } => Some(Some((height, width))),
            Transform::Resize { .. } => Some(None),
            Transform::RandomRotation(ref r) if r.expand => Some(None),
            _ => None,
        })??;
        Some(match &self.inner.output {
            Output::U8Hwc => [h, w, 3],
            Output::U8Chw => [3, h, w],
            Output::F32Chw { mean, .. } => [mean.len(), h, w],
        })
    }

    /// Decode `bytes` and transform them.
    pub fn run(&self, bytes: &[u8], key: SampleKey) -> Result<Sample> {
        self.run_reusing(bytes, key, SampleData::F32(Vec::new()))
    }

    /// Decode and transform straight into `out` (e.g. a slot of a batch buffer); returns
    /// the shape written. `out` must have exactly the output's length.
    pub fn run_into_f32(
        &self,
        bytes: &[u8],
        key: SampleKey,
        out: &mut [f32],
    ) -> Result<[usize; 3]> {
        let plan = |w, h| self.plan(key, w, h);
        with_pixels(bytes, &self.inner.decode, plan, |decoded| {
            let (view, mut rng) = self.transform(&decoded.image, Frame::of(decoded), key)?;
            let shape = self.write_f32(&view, out)?;
            self.erase_f32(&mut rng, out, shape);
            Ok(shape)
        })
    }

    /// Transform a decoded image into a new buffer.
    pub fn apply(&self, image: &Image, key: SampleKey) -> Result<Sample> {
        let (view, rng) = self.transform(image, Frame::whole(image), key)?;
        self.finish(view, rng, SampleData::F32(Vec::new()))
    }

    /// [`run`](Self::run), writing the output into the memory of `reuse` (e.g. the data of
    /// a sample already consumed) when it is of the output's type; its values are
    /// discarded. A loader that hands consumed samples back allocates no fresh memory per
    /// sample.
    pub fn run_reusing(&self, bytes: &[u8], key: SampleKey, reuse: SampleData) -> Result<Sample> {
        let plan = |w, h| self.plan(key, w, h);
        with_pixels(bytes, &self.inner.decode, plan, |decoded| {
            self.apply_reusing(decoded, key, reuse)
        })
    }

    fn apply_reusing(
        &self,
        decoded: &Decoded,
        key: SampleKey,
        reuse: SampleData,
    ) -> Result<Sample> {
        let (view, rng) = self.transform(&decoded.image, Frame::of(decoded), key)?;
        self.finish(view, rng, reuse)
    }

    /// The output steps on a transformed view.
    fn finish(&self, view: View<'_>, mut rng: ChaCha8Rng, reuse: SampleData) -> Result<Sample> {
        let (h, w, c) = (view.rect.h, view.rect.w, view.image.channels);
        match self.inner.output {
            Output::U8Hwc | Output::U8Chw => {
                let mut out = match reuse {
                    SampleData::U8(v) => v,
                    SampleData::F32(_) => Vec::new(),
                };
                out.clear();
                out.resize(h * w * c, 0);
                let shape = self.write_u8(&view, &mut out)?;
                self.erase_u8(&mut rng, &mut out, shape);
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
                let mut sample = self.push_f32(&view, out)?;
                if let SampleData::F32(data) = &mut sample.data {
                    self.erase_f32(&mut rng, data, sample.shape);
                }
                Ok(sample)
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
        let (view, mut rng) = self.transform(image, Frame::whole(image), key)?;
        let shape = self.write_f32(&view, out)?;
        self.erase_f32(&mut rng, out, shape);
        Ok(shape)
    }

    /// Transform a decoded image into `out` as u8 (HWC, or CHW after `ToImage`); returns
    /// the shape written.
    pub fn apply_into_u8(
        &self,
        image: &Image,
        key: SampleKey,
        out: &mut [u8],
    ) -> Result<[usize; 3]> {
        let (view, mut rng) = self.transform(image, Frame::whole(image), key)?;
        let shape = self.write_u8(&view, out)?;
        self.erase_u8(&mut rng, out, shape);
        Ok(shape)
    }

    fn erase_f32(&self, rng: &mut ChaCha8Rng, out: &mut [f32], shape: [usize; 3]) {
        if let Output::F32Chw { mean, std } = &self.inner.output {
            for e in &self.inner.erasing {
                e.apply_f32(rng, out, shape, mean, std);
            }
        }
    }

    fn erase_u8(&self, rng: &mut ChaCha8Rng, out: &mut [u8], shape: [usize; 3]) {
        if self.inner.output == Output::U8Chw {
            for e in &self.inner.erasing {
                e.apply_u8(rng, out, shape);
            }
        }
    }

    /// The sample's steps on the image; the random stream goes on to the output's steps.
    fn transform<'a>(
        &self,
        image: &'a Image,
        frame: Frame,
        key: SampleKey,
    ) -> Result<(View<'a>, ChaCha8Rng)> {
        let mut rng = self.rng(key);
        // A partial decode: the first step (a crop, as `plan` requires) is drawn on the
        // whole image's size, then moved onto the decoded part.
        let mut view = View {
            rect: Rect {
                x: 0,
                y: 0,
                w: frame.full.0,
                h: frame.full.1,
            },
            image: Cow::Borrowed(image),
            flip: false,
        };
        let mut pending = frame.partial().then_some(frame);
        let mut steps = self.inner.transforms.iter().peekable();
        while let Some(t) = steps.next() {
            let planned = matches!(
                t,
                Transform::RandomResizedCrop { .. }
                    | Transform::CenterCrop { .. }
                    | Transform::Resize { .. }
            );
            if pending.is_some() && !planned {
                return Err(not_planned());
            }
            match *t {
                Transform::Resize { size, filter } => {
                    // After a draft decode the size comes from the whole image's, and the
                    // resize reads all of the smaller decoded one.
                    let (source_h, source_w) = match pending.take() {
                        Some(Frame {
                            origin: Some(_), ..
                        }) => return Err(not_planned()),
                        Some(frame) => {
                            view.rect = Rect {
                                x: 0,
                                y: 0,
                                w: view.image.width,
                                h: view.image.height,
                            };
                            (frame.full.1, frame.full.0)
                        }
                        None => (view.rect.h, view.rect.w),
                    };
                    let (h, w) = geometry::resize_shorter(source_h, source_w, size);
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
                        if pending.is_some() {
                            return Err(not_planned());
                        }
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
                    place(&mut view, pending.take())?;
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
                    place(&mut view, pending.take())?;
                    view.resize_to(height, width, filter)?;
                }
                Transform::RandomHorizontalFlip { p } => {
                    if rng.random::<f64>() < p {
                        view.flip = !view.flip;
                    }
                }
                Transform::ColorJitter(ref jitter) => {
                    let mut image = view.take_image();
                    jitter.apply(&mut image, &mut rng);
                    view.replace(image);
                }
                Transform::RandAugment(ref policy) => {
                    let image = policy.apply(view.take_image(), &mut rng);
                    view.replace(image);
                }
                Transform::TrivialAugmentWide(ref policy) => {
                    let image = policy.apply(view.take_image(), &mut rng);
                    view.replace(image);
                }
                Transform::GaussianBlur(ref blur) => {
                    let image = blur.apply(&view.take_image(), &mut rng)?;
                    view.replace(image);
                }
                Transform::RandomRotation(ref rotation) => {
                    let image = rotation.apply(&view.take_image(), &mut rng);
                    view.replace(image);
                }
                Transform::RandomAffine(ref affine) => {
                    let image = affine.apply(&view.take_image(), &mut rng);
                    view.replace(image);
                }
            }
        }
        if pending.is_some() {
            return Err(not_planned());
        }
        Ok((view, rng))
    }

    /// This sample's random stream: the same for what is wanted of the decode and for the steps.
    fn rng(&self, key: SampleKey) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(mix(mix(mix(self.inner.seed) ^ key.epoch) ^ key.index))
    }

    /// What the steps will read of a `width` x `height` image, when the first step crops
    /// (drawn as the step will draw it, from the sample's own stream) or resizes.
    fn plan(&self, key: SampleKey, width: usize, height: usize) -> Wanted {
        match self.inner.transforms.first() {
            Some(&Transform::RandomResizedCrop {
                scale,
                ratio,
                height: out_h,
                width: out_w,
                ..
            }) => Wanted {
                region: Some(geometry::random_resized_crop(
                    &mut self.rng(key),
                    height,
                    width,
                    scale,
                    ratio,
                )),
                target: Some((out_w, out_h)),
            },
            Some(&Transform::CenterCrop {
                height: h,
                width: w,
            }) if h <= height && w <= width => {
                let (y, x) = geometry::center_crop_offsets(height, width, h, w);
                Wanted {
                    region: Some(Rect { x, y, w, h }),
                    target: None,
                }
            }
            Some(&Transform::Resize { size, .. }) => {
                let (h, w) = geometry::resize_shorter(height, width, size);
                Wanted {
                    region: None,
                    target: Some((w.max(1), h.max(1))),
                }
            }
            _ => Wanted::default(),
        }
    }
}

/// Where a decoded image sits in the whole one.
#[derive(Debug, Clone, Copy)]
struct Frame {
    /// The decoded part's top-left corner in the whole image, when it is only a part.
    origin: Option<(usize, usize)>,
    /// The whole image's (width, height) at full scale.
    full: (usize, usize),
    /// The decoded pixels are at 1/`scale` of each side.
    scale: usize,
}

impl Frame {
    fn whole(image: &Image) -> Self {
        Self {
            origin: None,
            full: (image.width, image.height),
            scale: 1,
        }
    }

    fn of(decoded: &Decoded) -> Self {
        let scale = decoded.scale.max(1);
        let scaled = (
            decoded.full.0.div_ceil(scale),
            decoded.full.1.div_ceil(scale),
        );
        let part =
            decoded.origin != (0, 0) || (decoded.image.width, decoded.image.height) != scaled;
        Self {
            origin: part.then_some(decoded.origin),
            full: decoded.full,
            scale,
        }
    }

    /// Whether the decoded pixels are other than the whole image at full size.
    fn partial(&self) -> bool {
        self.origin.is_some() || self.scale > 1
    }
}

/// Move a crop drawn on the whole image at full scale onto the decoded pixels that hold
/// it (a part, perhaps at a smaller scale: then the crop's edges move out to whole
/// pixels of that scale).
fn place(view: &mut View<'_>, frame: Option<Frame>) -> Result<()> {
    let Some(frame) = frame else {
        return Ok(());
    };
    let (d, (ox, oy)) = (frame.scale, frame.origin.unwrap_or((0, 0)));
    let r = view.rect;
    let (x0, y0) = (r.x / d, r.y / d);
    let (x1, y1) = ((r.x + r.w).div_ceil(d), (r.y + r.h).div_ceil(d));
    let inside =
        x0 >= ox && y0 >= oy && x1 - ox <= view.image.width && y1 - oy <= view.image.height;
    if !inside {
        return Err(not_planned());
    }
    view.rect = Rect {
        x: x0 - ox,
        y: y0 - oy,
        w: x1 - x0,
        h: y1 - y0,
    };
    Ok(())
}

fn not_planned() -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::Unsupported,
        "internal: the decoded part of the image does not hold the crop drawn",
    )
}
