//! Arbitrary bytes (seeds in every format decoded) through decode and the ImageNet
//! evaluation pipeline: any input must give an image or an error, never a panic, a hang
//! or an allocation past the budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_decoder::{DecodeOptions, Pipeline, SampleKey};

fuzz_target!(|data: &[u8]| {
    let pipeline = Pipeline::builder()
        .resize(64)
        .center_crop(56)
        .to_tensor_normalized(&loader_decoder::IMAGENET_MEAN, &loader_decoder::IMAGENET_STD)
        .decode_options(DecodeOptions { max_pixels: 4 << 20, ..DecodeOptions::default() })
        .build()
        .expect("valid pipeline");
    let _ = pipeline.run(data, SampleKey::default());
});
