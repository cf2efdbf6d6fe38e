#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Transforms against references computed here, independently of the crate.

use std::collections::HashSet;

use loader_decoder::{
    IMAGENET_MEAN, IMAGENET_STD, Image, Pipeline, SampleData, SampleKey, Transform,
};

/// An image whose pixels say where they are: R = x, G = y, B = (x * 7 + y * 3) mod 256.
fn coordinates(width: usize, height: usize) -> Image {
    let mut data = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            data.extend_from_slice(&[x as u8, y as u8, ((x * 7 + y * 3) % 256) as u8]);
        }
    }
    Image {
        width,
        height,
        channels: 3,
        data,
    }
}

fn u8_out(pipeline: &Pipeline, image: &Image, key: SampleKey) -> (Vec<u8>, [usize; 3]) {
    let sample = pipeline.apply(image, key).unwrap();
    match sample.data {
        SampleData::U8(v) => (v, sample.shape),
        SampleData::F32(_) => panic!("expected u8"),
    }
}

fn f32_out(pipeline: &Pipeline, image: &Image, key: SampleKey) -> (Vec<f32>, [usize; 3]) {
    let sample = pipeline.apply(image, key).unwrap();
    match sample.data {
        SampleData::F32(v) => (v, sample.shape),
        SampleData::U8(_) => panic!("expected f32"),
    }
}

const KEY: SampleKey = SampleKey { epoch: 0, index: 0 };

#[test]
fn center_crop_takes_torchvisions_offsets() {
    // (H, W, crop) -> (top, left): round((H - h) / 2) with Python's ties-to-even.
    for (h, w, crop, top, left) in [
        (100, 120, 50, 25, 35),
        (101, 121, 50, 26, 36),
        (103, 105, 100, 2, 2),
        (99, 99, 96, 2, 2),
    ] {
        let pipeline = Pipeline::builder().center_crop(crop).build().unwrap();
        let (out, shape) = u8_out(&pipeline, &coordinates(w, h), KEY);
        assert_eq!(shape, [crop, crop, 3]);
        assert_eq!(
            (out[1] as usize, out[0] as usize),
            (top, left),
            "{h}x{w} crop {crop}"
        );
    }
}

#[test]
fn center_crop_larger_than_the_image_pads_with_zeros() {
    let pipeline = Pipeline::builder().center_crop(6).build().unwrap();
    let (out, shape) = u8_out(&pipeline, &coordinates(4, 3), KEY);
    assert_eq!(shape, [6, 6, 3]);
    // torchvision pads (left 1, top 1, right 1, bottom 2), then crops at offset 0.
    let at = |x: usize, y: usize| &out[(y * 6 + x) * 3..][..3];
    assert_eq!(at(0, 0), [0, 0, 0]);
    assert_eq!(at(1, 1), [0, 0, 0]); // pixel (0, 0) of the image is black too: check another
    assert_eq!(at(2, 1), [1, 0, 7]);
    assert_eq!(at(4, 3), [3, 2, 27]);
    assert_eq!(at(5, 5), [0, 0, 0]);
}

/// PIL's antialiased bilinear resample of one axis, written from its definition: each
/// output sample is the triangle-weighted mean of the inputs within `scale` of its centre.
fn reference_axis(src: &[f64], out_len: usize) -> Vec<f64> {
    let scale = src.len() as f64 / out_len as f64;
    let support = scale.max(1.0);
    (0..out_len)
        .map(|i| {
            let centre = (i as f64 + 0.5) * scale;
            let (mut acc, mut norm) = (0.0, 0.0);
            for (j, v) in src.iter().enumerate() {
                let w = (1.0 - ((j as f64 + 0.5 - centre) / support).abs()).max(0.0);
                acc += w * v;
                norm += w;
            }
            acc / norm
        })
        .collect()
}

#[test]
fn resize_matches_an_independent_antialiased_bilinear() {
    let (w, h) = (64, 48);
    let image = coordinates(w, h);
    let pipeline = Pipeline::builder().resize(16).build().unwrap(); // 48 -> 16: factor 3
    let (out, shape) = u8_out(&pipeline, &image, KEY);
    let (ow, oh) = (w * 16 / h, 16); // int(16 * 64 / 48) = 21
    assert_eq!(shape, [oh, ow, 3]);
    for c in 0..3 {
        let rows: Vec<Vec<f64>> = (0..h)
            .map(|y| {
                reference_axis(
                    &(0..w)
                        .map(|x| f64::from(image.pixel(x, y)[c]))
                        .collect::<Vec<_>>(),
                    ow,
                )
            })
            .collect();
        for x in 0..ow {
            let column: Vec<f64> = rows.iter().map(|r| r[x]).collect();
            let want = reference_axis(&column, oh);
            for y in 0..oh {
                let got = f64::from(out[(y * ow + x) * 3 + c]);
                assert!(
                    (got - want[y]).abs() <= 1.5,
                    "channel {c} at ({x},{y}): {got} vs {:.2}",
                    want[y]
                );
            }
        }
    }
}

#[test]
fn integer_downscale_of_a_constant_block_image_is_exact() {
    // Area averages of 4x4 blocks of a constant colour are that colour, edges included.
    let image = Image {
        width: 32,
        height: 32,
        channels: 3,
        data: [10u8, 200, 77].repeat(32 * 32),
    };
    let pipeline = Pipeline::builder().resize(8).build().unwrap();
    let (out, shape) = u8_out(&pipeline, &image, KEY);
    assert_eq!(shape, [8, 8, 3]);
    assert!(
        out.chunks(3).all(|p| p == [10, 200, 77]),
        "{:?}",
        &out[..12]
    );
}

#[test]
fn normalize_is_exact() {
    let image = coordinates(7, 5);
    let pipeline = Pipeline::builder()
        .to_tensor_normalized(&IMAGENET_MEAN, &IMAGENET_STD)
        .build()
        .unwrap();
    let (out, shape) = f32_out(&pipeline, &image, KEY);
    assert_eq!(shape, [3, 5, 7]);
    for c in 0..3 {
        for y in 0..5 {
            for x in 0..7 {
                let v = f32::from(image.pixel(x, y)[c]);
                let want = (v / 255.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
                assert_eq!(out[c * 35 + y * 7 + x], want);
            }
        }
    }
}

#[test]
fn eval_pipeline_gives_the_reference_shape_and_crop() {
    // 500x375 -> Resize(256) -> 341x256 -> CenterCrop(224) at (top 16, left 58).
    let pipeline = Pipeline::imagenet_eval();
    assert_eq!(pipeline.output_shape(), Some([3, 224, 224]));
    let (out, shape) = f32_out(&pipeline, &coordinates(500, 375), KEY);
    assert_eq!(shape, [3, 224, 224]);
    let mut buf = vec![0f32; 3 * 224 * 224];
    let written = pipeline
        .apply_into_f32(&coordinates(500, 375), KEY, &mut buf)
        .unwrap();
    assert_eq!((written, &buf), (shape, &out));
    let mut wrong = vec![0f32; 10];
    assert!(
        pipeline
            .apply_into_f32(&coordinates(500, 375), KEY, &mut wrong)
            .is_err()
    );
}

#[test]
fn flip_mirrors_rows() {
    let image = coordinates(9, 4);
    let never = Pipeline::builder()
        .random_horizontal_flip(0.0)
        .build()
        .unwrap();
    let always = Pipeline::builder()
        .random_horizontal_flip(1.0)
        .build()
        .unwrap();
    let (plain, _) = u8_out(&never, &image, KEY);
    let (flipped, _) = u8_out(&always, &image, KEY);
    assert_eq!(plain, image.data);
    for y in 0..4 {
        for x in 0..9 {
            assert_eq!(
                &flipped[(y * 9 + x) * 3..][..3],
                &plain[(y * 9 + 8 - x) * 3..][..3]
            );
        }
    }
    // A crop after a flip crops the flipped picture.
    let crop_after = Pipeline::builder()
        .random_horizontal_flip(1.0)
        .center_crop(3)
        .build()
        .unwrap();
    let (out, _) = u8_out(&crop_after, &coordinates(9, 3), KEY);
    assert_eq!(out[0], 5, "leftmost column of the flipped crop is x = 5"); // 9 - 1 - 3
}

#[test]
fn same_key_same_augmentation_other_index_other_crop() {
    let image = coordinates(200, 150);
    let train = Pipeline::imagenet_train(123);
    let first = train
        .apply(&image, SampleKey { epoch: 2, index: 5 })
        .unwrap();
    // Another thread, another pipeline object with the same seed: the same output.
    let again = std::thread::spawn({
        let image = image.clone();
        move || {
            Pipeline::imagenet_train(123)
                .apply(&image, SampleKey { epoch: 2, index: 5 })
                .unwrap()
        }
    })
    .join()
    .unwrap();
    assert_eq!(first, again);
    let distinct: HashSet<Vec<u32>> = (0..40)
        .map(|index| {
            match train
                .apply(&image, SampleKey { epoch: 2, index })
                .unwrap()
                .data
            {
                SampleData::F32(v) => v.iter().step_by(997).map(|f| f.to_bits()).collect(),
                SampleData::U8(_) => unreachable!(),
            }
        })
        .collect();
    assert!(
        distinct.len() >= 36,
        "only {} distinct crops of 40",
        distinct.len()
    );
    let other_epoch = train
        .apply(&image, SampleKey { epoch: 3, index: 5 })
        .unwrap();
    assert_ne!(first, other_epoch);
}

#[test]
fn pipelines_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Pipeline>();
}

#[test]
fn bad_parameters_are_refused() {
    assert!(Pipeline::builder().resize(0).build().is_err());
    assert!(Pipeline::builder().center_crop(0).build().is_err());
    assert!(
        Pipeline::builder()
            .random_horizontal_flip(1.5)
            .build()
            .is_err()
    );
    assert!(
        Pipeline::builder()
            .to_tensor_normalized(&[0.5], &[0.0])
            .build()
            .is_err()
    );
    assert!(
        Pipeline::builder()
            .then(Transform::RandomResizedCrop {
                height: 8,
                width: 8,
                scale: (0.9, 0.1),
                ratio: (1.0, 1.0),
                filter: Default::default()
            })
            .build()
            .is_err()
    );
    // Normalize with 3 channels on a gray image is an error, not a panic.
    let gray = Image {
        width: 2,
        height: 2,
        channels: 1,
        data: vec![1, 2, 3, 4],
    };
    assert!(Pipeline::imagenet_eval().apply(&gray, KEY).is_err());
}

#[test]
fn resize_then_center_crop_equals_cropping_the_full_resize() {
    // The fused path (Resize directly followed by CenterCrop) against the plain one (a
    // no-op flip in between keeps the steps apart): the same pixels, up to the last bit of
    // float rounding of the crop box (a few values off by one).
    let image = coordinates(500, 375);
    let fused = Pipeline::builder()
        .resize(256)
        .center_crop(224)
        .build()
        .unwrap();
    let plain = Pipeline::builder()
        .resize(256)
        .random_horizontal_flip(0.0)
        .center_crop(224)
        .build()
        .unwrap();
    for (w, h) in [(500, 375), (375, 500), (333, 250), (256, 256), (1000, 257)] {
        let image = if (w, h) == (500, 375) {
            image.clone()
        } else {
            coordinates(w, h)
        };
        let (a, sa) = u8_out(&fused, &image, KEY);
        let (b, sb) = u8_out(&plain, &image, KEY);
        assert_eq!(sa, sb);
        let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| x.abs_diff(*y))
            .max()
            .unwrap_or(0);
        assert!(
            worst <= 1 && differing * 1000 < a.len(),
            "{w}x{h}: {differing} values differ, by up to {worst}"
        );
    }
}

#[test]
fn f32_output_is_the_same_into_a_slot_as_into_a_new_buffer() {
    // The training pipeline flips about half of the keys: both row orders are covered.
    let pipeline = Pipeline::imagenet_train(3);
    let image = coordinates(300, 200);
    let mut slot = vec![0f32; 3 * 224 * 224];
    for index in 0..8 {
        let key = SampleKey { epoch: 0, index };
        let (fresh, shape) = f32_out(&pipeline, &image, key);
        let written = pipeline.apply_into_f32(&image, key, &mut slot).unwrap();
        assert_eq!((written, &slot), (shape, &fresh), "key {index}");
    }
}
