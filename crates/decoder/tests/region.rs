#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Region decode: a pipeline that crops first decodes only the crop (and a margin) of a
//! JPEG; its output must be exactly the output of decoding the whole image and cropping.

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use loader_decoder::{DecodeOptions, Filter, JpegDecoder, Pipeline, SampleKey, Transform, decode};

// Odd sizes: the last iMCU row and column are partial.
const W: u16 = 203;
const H: u16 = 157;

/// Texture with edges in every direction and colour, so upsampling at a region's border
/// would show.
fn pixels(channels: usize) -> Vec<u8> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut px = Vec::new();
    for y in 0..H as usize {
        for x in 0..W as usize {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state % 48) as usize;
            let stripes = if (x / 5 + y / 7) % 2 == 0 { 90 } else { 0 };
            let px3 = [
                (x * 255 / W as usize + noise) % 256,
                (y * 255 / H as usize + stripes) % 256,
                ((x + y) * 2 + noise) % 256,
            ];
            px.extend(px3.iter().take(channels).map(|&v| v as u8));
        }
    }
    px
}

fn encode(color: ColorType, setup: impl FnOnce(&mut Encoder<&mut Vec<u8>>)) -> Vec<u8> {
    let channels = if color == ColorType::Luma { 1 } else { 3 };
    let mut out = Vec::new();
    let mut encoder = Encoder::new(&mut out, 90);
    setup(&mut encoder);
    encoder.encode(&pixels(channels), W, H, color).unwrap();
    out
}

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let mut all = vec![
        ("grey".into(), encode(ColorType::Luma, |_| {})),
        (
            "progressive 4:2:0".into(),
            encode(ColorType::Rgb, |e| {
                e.set_progressive(true);
                e.set_sampling_factor(SamplingFactor::R_4_2_0)
            }),
        ),
        (
            "restart markers 4:2:0".into(),
            encode(ColorType::Rgb, |e| {
                e.set_restart_interval(3);
                e.set_sampling_factor(SamplingFactor::R_4_2_0)
            }),
        ),
    ];
    for sampling in [
        SamplingFactor::R_4_4_4,
        SamplingFactor::R_4_2_0,
        SamplingFactor::R_4_2_2,
        SamplingFactor::R_4_4_0,
        SamplingFactor::R_4_1_1,
        SamplingFactor::R_4_4_1,
    ] {
        all.push((
            format!("baseline {sampling:?}"),
            encode(ColorType::Rgb, |e| e.set_sampling_factor(sampling)),
        ));
    }
    all
}

fn check(pipeline: &Pipeline, what: &str) {
    for (name, jpeg) in fixtures() {
        let whole = decode(&jpeg, pipeline.decode_options()).unwrap();
        for index in 0..40 {
            let key = SampleKey { epoch: 3, index };
            let planned = pipeline.run(&jpeg, key).unwrap();
            let reference = pipeline.apply(&whole, key).unwrap();
            assert_eq!(
                planned.shape, reference.shape,
                "{what}, {name}, sample {index}"
            );
            assert!(
                planned.data == reference.data,
                "{what}, {name}, sample {index}: the region decode differs from the whole"
            );
        }
    }
}

#[test]
fn region_decode_equals_whole_decode_then_crop() {
    let rrc = Pipeline::builder()
        .random_resized_crop(48)
        .random_horizontal_flip(0.5)
        .build()
        .unwrap();
    check(&rrc, "RandomResizedCrop");
    let small_crops = Pipeline::builder()
        .then(Transform::RandomResizedCrop {
            height: 32,
            width: 32,
            scale: (0.01, 0.2),
            ratio: (0.5, 2.0),
            filter: Filter::Bilinear,
        })
        .build()
        .unwrap();
    check(&small_crops, "RandomResizedCrop of small areas");
    let center = Pipeline::builder().center_crop(61).build().unwrap();
    check(&center, "CenterCrop");
}

#[test]
fn both_jpeg_decoders_give_the_same_picture() {
    // zune-jpeg's IDCT and upsampling differ from libjpeg-turbo's by rounding only.
    let zune = DecodeOptions {
        jpeg: JpegDecoder::Zune,
        ..DecodeOptions::default()
    };
    let turbo = DecodeOptions {
        jpeg: JpegDecoder::LibjpegTurbo,
        ..DecodeOptions::default()
    };
    for (name, jpeg) in fixtures() {
        let a = decode(&jpeg, &zune).unwrap();
        let b = decode(&jpeg, &turbo).unwrap();
        assert_eq!(
            (a.width, a.height, a.channels),
            (b.width, b.height, b.channels)
        );
        let mean = a
            .data
            .iter()
            .zip(&b.data)
            .map(|(x, y)| f64::from(x.abs_diff(*y)))
            .sum::<f64>()
            / a.data.len() as f64;
        assert!(mean <= 0.5, "{name}: mean difference {mean:.3}");
    }
}

/// A smooth 1600x1200 picture (a photo's low frequencies, with some texture), as a JPEG.
fn large_photo_like() -> Vec<u8> {
    let (w, h) = (1600usize, 1200usize);
    let mut px = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
            let wave = ((fx * 40.0).sin() * (fy * 30.0).cos() * 40.0) as i32;
            px.push((60.0 + 150.0 * fx) as i32 + wave);
            px.push((200.0 - 120.0 * fy) as i32 - wave / 2);
            px.push((100.0 + 100.0 * (fx * fy)) as i32 + ((x / 9 + y / 13) % 2) as i32 * 30);
        }
    }
    let px: Vec<u8> = px.into_iter().map(|v| v.clamp(0, 255) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 90)
        .encode(&px, w as u16, h as u16, ColorType::Rgb)
        .unwrap();
    out
}

fn mean_diff(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(x.abs_diff(*y)))
        .sum::<f64>()
        / a.len() as f64
}

fn with_draft(builder: loader_decoder::PipelineBuilder, draft: bool) -> Pipeline {
    builder
        .decode_options(DecodeOptions {
            draft,
            ..DecodeOptions::default()
        })
        .build()
        .unwrap()
}

#[test]
fn draft_decode_of_a_large_image_stays_within_two_levels() {
    let jpeg = large_photo_like();
    let eval = || Pipeline::builder().resize(256).center_crop(224);
    let train = || Pipeline::builder().random_resized_crop(224);
    let pipelines: [(&str, &dyn Fn() -> loader_decoder::PipelineBuilder); 2] =
        [("eval", &eval), ("train", &train)];
    for (name, builder) in pipelines {
        let (exact, draft) = (with_draft(builder(), false), with_draft(builder(), true));
        let mut means = Vec::new();
        for index in 0..8 {
            let key = SampleKey { epoch: 0, index };
            let a = exact.run(&jpeg, key).unwrap();
            let b = draft.run(&jpeg, key).unwrap();
            assert_eq!(a.shape, b.shape, "{name}");
            let (loader_decoder::SampleData::U8(a), loader_decoder::SampleData::U8(b)) =
                (a.data, b.data)
            else {
                panic!("u8 output")
            };
            means.push(mean_diff(&a, &b));
        }
        let worst = means.iter().cloned().fold(0.0, f64::max);
        eprintln!("{name}: draft against exact, mean differences {means:.2?}");
        // A draft that changed nothing would mean no scaled decode took place.
        assert!(
            means.iter().any(|&m| m > 0.0),
            "{name}: draft made no difference"
        );
        assert!(worst <= 2.0, "{name}: mean differences {means:.2?}");
    }
}

#[test]
fn draft_changes_nothing_when_the_target_is_not_at_most_half_the_image() {
    // 203x157 to 48 (RandomResizedCrop) or 128 (Resize): no scale leaves twice the target.
    let crop = || Pipeline::builder().random_resized_crop(64);
    let resize = || Pipeline::builder().resize(128);
    let builders: [&dyn Fn() -> loader_decoder::PipelineBuilder; 2] = [&crop, &resize];
    for builder in builders {
        let (exact, draft) = (with_draft(builder(), false), with_draft(builder(), true));
        for (name, jpeg) in fixtures() {
            for index in 0..10 {
                let key = SampleKey { epoch: 0, index };
                assert!(
                    exact.run(&jpeg, key).unwrap().data == draft.run(&jpeg, key).unwrap().data,
                    "{name}"
                );
            }
        }
    }
    assert!(!DecodeOptions::default().draft);
}
