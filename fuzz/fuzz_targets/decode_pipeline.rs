//! Arbitrary bytes (seeds in every format decoded) through decode and the ImageNet
//! pipelines, with each JPEG decoder: the evaluation transform (whole decode), and a
//! RandomResizedCrop first (libjpeg-turbo decodes only the crop's region). Any input must
//! give an image or an error, never a panic, a hang or an allocation past the budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_decoder::{DecodeOptions, JpegDecoder, Pipeline, SampleKey};

fuzz_target!(|data: &[u8]| {
    for jpeg in [JpegDecoder::LibjpegTurbo, JpegDecoder::Zune] {
        let options = DecodeOptions { max_pixels: 4 << 20, jpeg, ..DecodeOptions::default() };
        let eval = Pipeline::builder()
            .resize(64)
            .center_crop(56)
            .to_tensor_normalized(&loader_decoder::IMAGENET_MEAN, &loader_decoder::IMAGENET_STD)
            .decode_options(options)
            .build()
            .expect("valid pipeline");
        let _ = eval.run(data, SampleKey::default());
        let train = Pipeline::builder()
            .random_resized_crop(32)
            .decode_options(options)
            .build()
            .expect("valid pipeline");
        let _ = train.run(data, SampleKey { epoch: 0, index: u64::from(data.len() as u32) });
    }
});
