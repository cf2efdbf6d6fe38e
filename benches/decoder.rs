//! Decode and transform costs per core on ImageNet-sized testkit JPEGs (500x375, ~110 KB):
//! decode alone, each transform, the evaluation pipeline, and the `image` crate's decode
//! of the same bytes, in one run.
//!
//! `cargo bench -p loader-benches --bench decoder`

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use loader_decoder::{DecodeOptions, JpegDecoder, Pipeline, SampleKey, decode};
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

/// Real photos by kind, from the directory `LOADER_PHOTOS` names (one folder per kind;
/// `benches/scripts/photos.sh` makes it), or only the generated ImageNet-sized set.
fn photo_sets() -> Vec<(String, Vec<Vec<u8>>)> {
    let mut sets = vec![("generated_500x375".to_string(), images())];
    let Some(root) = std::env::var_os("LOADER_PHOTOS") else {
        eprintln!("LOADER_PHOTOS is not set: the decoder comparison runs on generated images only");
        return sets;
    };
    let mut kinds: Vec<_> = std::fs::read_dir(&root)
        .expect("LOADER_PHOTOS is a directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    kinds.sort_by_key(|e| e.file_name());
    for kind in kinds {
        let mut files: Vec<_> = std::fs::read_dir(kind.path())
            .expect("readable")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort();
        let bytes = files
            .iter()
            .map(|f| std::fs::read(f).expect("readable"))
            .collect();
        sets.push((kind.file_name().to_string_lossy().into_owned(), bytes));
    }
    sets
}

/// Each JPEG decoder, and each way of running the ImageNet pipelines, on the same files:
/// `whole` decodes the whole image then transforms it; `planned` (what the loader runs)
/// lets a crop that comes first decode only its region; `-draft` also lets the decoder
/// work at 1/2, 1/4 or 1/8 scale (`DecodeOptions::draft`).
///
/// `LOADER_PHOTOS=DIR cargo bench -p loader-benches --bench decoder -- decoders_`
fn decoders(c: &mut Criterion) {
    let decoders = [
        ("libjpeg-turbo", JpegDecoder::LibjpegTurbo, false),
        ("libjpeg-turbo-draft", JpegDecoder::LibjpegTurbo, true),
        ("zune", JpegDecoder::Zune, false),
    ];
    for (set, jpegs) in photo_sets() {
        let mut group = c.benchmark_group(format!("decoders_{set}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(3))
            .warm_up_time(Duration::from_secs(1));
        group.throughput(Throughput::Elements(jpegs.len() as u64));
        for (name, jpeg, draft) in decoders {
            let options = DecodeOptions {
                jpeg,
                draft,
                ..DecodeOptions::default()
            };
            // Decoding alone has no target to draft for.
            if !draft {
                group.bench_function(format!("{name}/decode"), |b| {
                    b.iter(|| {
                        jpegs
                            .iter()
                            .map(|j| decode(j, &options).expect("decode").data.len())
                            .sum::<usize>()
                    })
                });
            }
            let train = Pipeline::builder()
                .random_resized_crop(224)
                .random_horizontal_flip(0.5);
            let eval = Pipeline::builder().resize(256).center_crop(224);
            for (pipeline_name, builder) in [("train", train), ("eval", eval)] {
                let pipeline = builder
                    .to_tensor_normalized(
                        &loader_decoder::IMAGENET_MEAN,
                        &loader_decoder::IMAGENET_STD,
                    )
                    .seed(1)
                    .decode_options(options)
                    .build()
                    .expect("valid pipeline");
                let mut out = vec![0f32; 3 * 224 * 224];
                group.bench_function(format!("{name}/{pipeline_name}_planned"), |b| {
                    let mut index = 0;
                    b.iter(|| {
                        for j in &jpegs {
                            index += 1;
                            let key = SampleKey { epoch: 0, index };
                            pipeline.run_into_f32(j, key, &mut out).expect("run");
                        }
                    })
                });
                if pipeline_name == "train" && !draft {
                    group.bench_function(format!("{name}/{pipeline_name}_whole"), |b| {
                        let mut index = 0;
                        b.iter(|| {
                            for j in &jpegs {
                                index += 1;
                                let key = SampleKey { epoch: 0, index };
                                let image = decode(j, &options).expect("decode");
                                pipeline.apply_into_f32(&image, key, &mut out).expect("run");
                            }
                        })
                    });
                }
            }
        }
        group.finish();
    }
}

criterion_group!(benches, decoder, decoders);
criterion_main!(benches);
