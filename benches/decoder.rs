//! Decode and transform costs per core on ImageNet-sized testkit JPEGs (500x375, ~110 KB):
//! decode alone, each transform, the evaluation pipeline, and the `image` crate's decode
//! of the same bytes, in one run.
//!
//! `cargo bench -p loader-benches --bench decoder`

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use loader_decoder::{DecodeOptions, Pipeline, SampleKey, decode};
use loader_testkit::DatasetSpec;

const IMAGES: usize = 16;

fn images() -> Vec<Vec<u8>> {
    let mut spec = DatasetSpec::imagenet(IMAGES, 4).with_seed(11);
    spec.width = (500, 500);
    spec.height = (375, 375);
    (0..IMAGES)
        .map(|i| spec.encode(i).expect("encode"))
        .collect()
}

fn decoder(c: &mut Criterion) {
    let jpegs = images();
    let mean_kb = jpegs.iter().map(Vec::len).sum::<usize>() as f64 / jpegs.len() as f64 / 1e3;
    eprintln!("{IMAGES} images of 500x375, {mean_kb:.0} KB on average");
    let options = DecodeOptions::default();
    let decoded: Vec<_> = jpegs
        .iter()
        .map(|j| decode(j, &options).expect("decode"))
        .collect();

    let mut group = c.benchmark_group("decode_500x375");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(6));
    group.throughput(Throughput::Elements(IMAGES as u64));
    group.bench_function("loader_decoder", |b| {
        b.iter(|| {
            jpegs
                .iter()
                .map(|j| decode(j, &options).expect("decode").data.len())
                .sum::<usize>()
        })
    });
    group.bench_function("image_crate", |b| {
        b.iter(|| {
            jpegs
                .iter()
                .map(|j| {
                    image::load_from_memory_with_format(j, image::ImageFormat::Jpeg)
                        .expect("decode")
                        .into_rgb8()
                        .len()
                })
                .sum::<usize>()
        })
    });
    group.finish();

    let transforms = [
        ("resize_256", Pipeline::builder().resize(256).build()),
        (
            "center_crop_224",
            Pipeline::builder().center_crop(224).build(),
        ),
        (
            "random_resized_crop_224",
            Pipeline::builder().random_resized_crop(224).build(),
        ),
        (
            "flip",
            Pipeline::builder().random_horizontal_flip(1.0).build(),
        ),
        (
            "to_tensor_normalize",
            Pipeline::builder()
                .to_tensor_normalized(
                    &loader_decoder::IMAGENET_MEAN,
                    &loader_decoder::IMAGENET_STD,
                )
                .build(),
        ),
        ("eval_transforms", Ok(Pipeline::imagenet_eval())),
        ("train_transforms", Ok(Pipeline::imagenet_train(1))),
    ];
    let mut group = c.benchmark_group("transform_500x375");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(IMAGES as u64));
    for (name, pipeline) in transforms {
        let pipeline = pipeline.expect("valid pipeline");
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut index = 0;
            b.iter(|| {
                decoded
                    .iter()
                    .map(|img| {
                        index += 1;
                        pipeline
                            .apply(img, SampleKey { epoch: 0, index })
                            .expect("transform")
                            .shape[0]
                    })
                    .sum::<usize>()
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("pipeline_500x375");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(6));
    group.throughput(Throughput::Elements(IMAGES as u64));
    let eval = Pipeline::imagenet_eval();
    let mut batch = vec![0f32; 3 * 224 * 224];
    group.bench_function("decode_plus_eval_into_batch", |b| {
        b.iter(|| {
            for (i, j) in jpegs.iter().enumerate() {
                eval.run_into_f32(
                    j,
                    SampleKey {
                        epoch: 0,
                        index: i as u64,
                    },
                    &mut batch,
                )
                .expect("run");
            }
        })
    });
    group.finish();
}

criterion_group!(benches, decoder);
criterion_main!(benches);
