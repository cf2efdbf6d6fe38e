#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! `loader pack`, run as a user would: an ImageFolder packed resized and read back (every
//! sample once, labels equal, pixels within the re-encode's error; the shards listed by
//! GNU tar), a pack stopped and run again giving the bytes an uninterrupted pack gives,
//! images kept as they are, LitData chunks packed with their labels, and a pack into the
//! test kit's S3 server (s3s-fs) in parts, stopped, resumed and read back over S3.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use loader_core::decoder::{DecodeOptions, Pipeline, SampleData, SampleKey, decode};
use loader_core::{Dataset, DynStorage, LoaderOptions, SourceContext, Storage, from_url};

use common::{loader, ok};

fn run(args: &[&str]) -> std::process::Output {
    let out = loader().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "loader {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `loader gen DIR`: an ImageFolder of `images` JPEGs in `classes` classes, ImageNet-sized
/// or (`tiny`) 64x48.
fn image_folder(dir: &Path, images: u32, classes: u32, tiny: bool) {
    let (images, classes) = (images.to_string(), classes.to_string());
    let mut args = vec![
        "gen",
        dir.to_str().unwrap(),
        "--images",
        &images,
        "--classes",
        &classes,
    ];
    if tiny {
        args.push("--tiny");
    }
    run(&args);
}

/// An item's bytes, read from the local directory its store is.
fn bytes_of(dir: &Path, item: &loader_core::Item) -> Vec<u8> {
    let file = std::fs::read(dir.join(&*item.key)).unwrap();
    match &item.range {
        Some(r) => file[r.start as usize..r.end as usize].to_vec(),
        None => file,
    }
}

/// `loader pack SRC DST --shard-size 8KiB EXTRA...`, whatever its exit.
fn pack_small(src: &Path, dst: &Path, extra: &[&str]) -> std::process::Output {
    loader()
        .arg("pack")
        .arg(src)
        .arg(dst)
        .args(["--shard-size", "8KiB"])
        .args(extra)
        .output()
        .unwrap()
}

fn store(dir: &Path) -> DynStorage {
    from_url(&dir.to_string_lossy(), Vec::<(String, String)>::new()).unwrap()
}

fn open(dir: &Path) -> Dataset {
    Dataset::open_blocking(&dir.to_string_lossy(), &context(store(dir))).unwrap()
}

/// `store` read as `loader run` reads it by default.
fn context(store: DynStorage) -> SourceContext {
    SourceContext::new(store, &LoaderOptions::default())
}

/// Every file of `dir` (not pack.json's own timestamps: it has none) by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// A packed dataset's samples: source index (from the member's name) → (image, label).
fn packed_samples(dir: &Path) -> BTreeMap<u64, (Vec<u8>, i64)> {
    let dataset = open(dir);
    let mut out = BTreeMap::new();
    for item in dataset.iter() {
        let name = item.name.as_deref().unwrap();
        let index: u64 = name.parse().unwrap();
        let bytes = bytes_of(dir, &item);
        let label = item.label.class().unwrap();
        assert!(
            out.insert(index, (bytes, label)).is_none(),
            "sample {index} twice"
        );
    }
    out
}

#[test]
fn an_image_folder_packed_resized_reads_back_every_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("packed"));
    image_folder(&src, 40, 4, false);
    run(&[
        "pack",
        &src.to_string_lossy(),
        &dst.to_string_lossy(),
        "--resize",
        "64",
        "--quality",
        "90",
        "--shard-size",
        "40KiB",
    ]);
    let source = open(&src);
    let packed = packed_samples(&dst);
    assert_eq!(packed.len(), source.len(), "every sample once");
    let shards: Vec<String> = files(&dst)
        .into_keys()
        .filter(|f| f.ends_with(".tar"))
        .collect();
    assert!(shards.len() > 2, "several shards: {shards:?}");
    for shard in &shards {
        // GNU tar reads what was written, a .jpg and a .cls per sample.
        let out = Command::new("tar")
            .arg("tf")
            .arg(dst.join(shard))
            .output()
            .unwrap();
        assert!(out.status.success(), "{shard}: {out:?}");
        let names = String::from_utf8(out.stdout).unwrap();
        let jpgs = names.lines().filter(|n| n.ends_with(".jpg")).count();
        assert_eq!(jpgs * 2, names.lines().count(), "{shard}: {names}");
        assert!(
            dst.join(format!("{shard}.idx.json")).exists(),
            "{shard}: sidecar"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dst.join("classes.txt")).unwrap(),
        source.classes().join("\n") + "\n"
    );
    // Read back, the shards carry the class names too.
    assert_eq!(open(&dst).classes(), source.classes());
    #[cfg(unix)]
    for name in ["pack.json", "classes.txt", "shard-000000.tar.idx.json"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dst.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o044,
            0o044,
            "{name}: readable by others, as a shard is"
        );
    }
    let resize = Pipeline::builder().resize(64).to_u8().build().unwrap();
    for (i, item) in source.iter().enumerate() {
        let (image, label) = &packed[&(i as u64)];
        assert_eq!(*label, item.label.class().unwrap(), "sample {i}: label");
        let original = bytes_of(&src, &item);
        let want = resize
            .apply(
                &decode(&original, &DecodeOptions::default()).unwrap(),
                SampleKey { epoch: 0, index: 0 },
            )
            .unwrap();
        let got = decode(image, &DecodeOptions::default()).unwrap();
        assert_eq!(
            [got.height, got.width, got.channels],
            want.shape,
            "sample {i}: the shorter side is 64"
        );
        let SampleData::U8(want) = want.data else {
            panic!("pixels")
        };
        let error = got
            .data
            .iter()
            .zip(&want)
            .map(|(&a, &b)| f64::from(a.abs_diff(b)))
            .sum::<f64>()
            / want.len() as f64;
        // JPEG at quality 90 of the resized pixels: a few levels on average at most.
        assert!(error < 3.0, "sample {i}: mean error {error:.2} levels");
    }
}

#[test]
fn a_pack_stopped_and_run_again_writes_what_an_uninterrupted_pack_writes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    image_folder(&src, 60, 3, true);
    let pack = |dst: &Path, extra: &[&str]| pack_small(&src, dst, extra);
    let whole = dir.path().join("whole");
    assert!(pack(&whole, &[]).status.success());
    let want = files(&whole);
    assert!(want.len() > 8, "several shards: {:?}", want.keys());

    let resumed = dir.path().join("resumed");
    let out = pack(&resumed, &["--stop-after-shards", "2"]);
    assert!(!out.status.success(), "a stopped pack fails");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(resumed.join("pack.json")).unwrap()).unwrap();
    assert_eq!(record["shards"].as_array().unwrap().len(), 2);
    assert_eq!(record["complete"], false);
    // What a kill leaves: a shard half written, and a whole shard renamed but not yet
    // recorded.
    std::fs::write(resumed.join("shard-000002.tar.partial"), b"half a shard").unwrap();
    std::fs::copy(
        whole.join("shard-000002.tar"),
        resumed.join("shard-000002.tar"),
    )
    .unwrap();
    let out = pack(&resumed, &["--stop-after-shards", "1"]);
    assert!(!out.status.success());
    // The source written another way is the same source.
    let respelled = format!("{}/./", src.display());
    let out = ok(loader().args([
        "pack",
        &respelled,
        &resumed.to_string_lossy(),
        "--shard-size",
        "8KiB",
    ]));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("going on with the pack"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = files(&resumed);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &want {
        if name.ends_with(".idx.json") {
            // A sidecar records its shard's version, the file's mtime: all else is equal.
            let fields = |b: &[u8]| {
                let mut v: serde_json::Value = serde_json::from_slice(b).unwrap();
                v.as_object_mut().unwrap().remove("version");
                v
            };
            assert_eq!(fields(&got[name]), fields(bytes), "{name}");
        } else {
            assert!(
                got[name] == *bytes,
                "{name} differs from the uninterrupted pack's"
            );
        }
    }
    assert_eq!(packed_samples(&resumed).len(), 60, "each sample once");

    // Done is done; other settings into the same directory are refused, not mixed in.
    let out = pack(&resumed, &[]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to do"));
    let out = pack(&resumed, &["--resize", "32"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("other settings") && err.contains("resize: None → Some(32)"),
        "{err}"
    );
    // Into the dataset it packs, or a quality with nothing to re-encode: refused.
    for into in [src.join("packed"), src.clone()] {
        let out = loader().arg("pack").arg(&src).arg(&into).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("inside the dataset"), "{err}");
    }
    let out = loader()
        .arg("pack")
        .arg(&src)
        .arg(dir.path().join("q"))
        .args(["--quality", "50"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resize"));
}

#[test]
fn images_are_kept_as_they_are_without_resize_and_litdata_labels_go_along() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    image_folder(&src, 12, 3, true);
    let dst = dir.path().join("kept");
    run(&["pack", &src.to_string_lossy(), &dst.to_string_lossy()]);
    let source = open(&src);
    let packed = packed_samples(&dst);
    for (i, item) in source.iter().enumerate() {
        let original = bytes_of(&src, &item);
        assert!(
            packed[&(i as u64)].0 == original,
            "sample {i}: the same bytes"
        );
    }

    // LitData chunks written by litdata.optimize: labels live in the samples.
    let lit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/litdata");
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lit.join("expected.json")).unwrap()).unwrap();
    let dst = dir.path().join("from-litdata");
    run(&[
        "pack",
        &lit.join("raw/index.json").to_string_lossy(),
        &dst.to_string_lossy(),
    ]);
    let packed = packed_samples(&dst);
    assert_eq!(packed.len(), 30);
    for (i, row) in expected["raw"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            packed[&(i as u64)].1,
            row["label"].as_i64().unwrap(),
            "sample {i}"
        );
    }
}

#[test]
fn a_pack_into_s3_is_uploaded_whole_resumed_and_read_back_with_its_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    // ImageNet-sized images, about 110 KB each: shards larger than an upload's 16 MiB part.
    image_folder(&src, 240, 4, false);
    let root = dir.path().join("s3");
    std::fs::create_dir_all(root.join("bucket")).unwrap();
    let server = loader_testkit::S3Server::start(&root).unwrap();
    let mut args: Vec<String> = vec![
        "pack".into(),
        src.to_string_lossy().into_owned(),
        "s3://bucket/packed".into(),
        "--shard-size".into(),
        "20MiB".into(),
    ];
    for (k, v) in server.options() {
        args.extend(["--option".into(), format!("{k}={v}")]);
    }
    let mut stopped = args.clone();
    stopped.extend(["--stop-after-shards".into(), "1".into()]);
    let out = loader().args(&stopped).output().unwrap();
    assert!(!out.status.success(), "a stopped pack fails");
    let out = loader().args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("going on with the pack"));

    let packed = root.join("bucket/packed");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(packed.join("pack.json")).unwrap()).unwrap();
    assert_eq!(record["complete"], true);
    let shards = record["shards"].as_array().unwrap();
    assert!(shards.len() >= 2, "{record}");
    assert!(
        shards[0]["bytes"].as_u64().unwrap() > 16 << 20,
        "the first shard went up in parts"
    );

    // Read back over S3: every sample once, the bytes as they were, each sidecar of the
    // version the store gives its shard (so readers take it rather than scan the shard).
    let store = from_url("s3://bucket/packed", server.options()).unwrap();
    let dataset = Dataset::open_blocking("s3://bucket/packed", &context(store.clone())).unwrap();
    let source = open(&src);
    assert_eq!(dataset.len(), source.len());
    let mut seen = std::collections::BTreeSet::new();
    for item in dataset.iter() {
        let index: usize = item.name.as_deref().unwrap().parse().unwrap();
        assert!(seen.insert(index), "sample {index} twice");
        assert!(
            bytes_of(&packed, &item) == bytes_of(&src, &source.get(index).unwrap()),
            "sample {index}"
        );
        assert_eq!(item.label, source.get(index).unwrap().label);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for shard in shards {
        let name = shard["name"].as_str().unwrap();
        let sidecar: serde_json::Value = serde_json::from_slice(
            &std::fs::read(packed.join(format!("{name}.idx.json"))).unwrap(),
        )
        .unwrap();
        let meta = runtime.block_on(store.head(name)).unwrap();
        assert_eq!(
            sidecar["version"].as_str(),
            meta.version.as_deref(),
            "{name}"
        );
        assert_eq!(sidecar["size"].as_u64(), Some(meta.size), "{name}");
    }
}

#[test]
fn samples_left_out_count_against_one_budget_across_runs_and_are_listed_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    image_folder(&src, 60, 3, true);
    let source = open(&src);
    // Three images of the source that no decoder reads, spread over the pack.
    for i in [5usize, 25, 50] {
        std::fs::write(src.join(&*source.get(i).unwrap().key), b"not an image").unwrap();
    }
    let pack = |dst: &Path, extra: &[&str]| pack_small(&src, dst, extra);
    let out = pack(&dir.path().join("strict"), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&*source.get(5).unwrap().key),
        "the sample is named: {err}"
    );

    // Two allowed, three bad: refused whether the pack runs once or is stopped and resumed.
    let out = pack(&dir.path().join("two"), &["--skip-errors", "2"]);
    assert!(!out.status.success());
    let resumed = dir.path().join("two-resumed");
    let stop = ["--skip-errors", "2", "--stop-after-shards", "3"];
    assert!(!pack(&resumed, &stop).status.success());
    let out = pack(&resumed, &["--skip-errors", "2"]);
    assert!(!out.status.success(), "the budget is the whole pack's");

    let three = dir.path().join("three");
    assert!(
        !pack(&three, &["--skip-errors", "3", "--stop-after-shards", "3"])
            .status
            .success()
    );
    let out = pack(&three, &["--skip-errors", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(three.join("pack.json")).unwrap()).unwrap();
    let left_out: Vec<u64> = record["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["index"].as_u64().unwrap())
        .collect();
    assert_eq!(left_out, [5, 25, 50]);
    assert_eq!(packed_samples(&three).len(), 57);
}

/// Every sample of the dataset in `dir` as the loader reads it: index → (bytes, class).
fn loaded(dir: &Path) -> BTreeMap<u64, (Vec<u8>, i64)> {
    use loader_core::{DataLoader, RawBatch, SampleInfo};
    type Seen = (u64, Vec<u8>, i64);
    let dataset = open(dir);
    let mut loader = DataLoader::builder(store(dir), dataset)
        .map(
            |bytes: bytes::Bytes, info: &SampleInfo| {
                Ok((info.index, bytes.to_vec(), info.label.class().unwrap_or(-1)))
            },
            |raw: RawBatch<Seen>| Ok(raw.samples.into_iter().map(|(_, s)| s).collect::<Vec<_>>()),
        )
        .batch_size(16)
        .build()
        .unwrap();
    let mut out = BTreeMap::new();
    for (index, bytes, label) in loader.by_ref().flat_map(|b| b.unwrap()) {
        assert!(
            out.insert(index, (bytes, label)).is_none(),
            "sample {index} twice"
        );
    }
    out
}

#[test]
fn a_pack_as_parquet_reads_back_as_the_source_and_resumes_to_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    image_folder(&src, 60, 3, true);
    let whole = dir.path().join("whole");
    let out = pack_small(&src, &whole, &["--format", "parquet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = files(&whole);
    let parquet: Vec<&String> = want.keys().filter(|n| n.ends_with(".parquet")).collect();
    assert!(parquet.len() > 2, "several files: {:?}", want.keys());
    assert!(
        !want.keys().any(|n| n.ends_with(".idx.json")),
        "no sidecars for Parquet"
    );
    // Opened by its folder as Parquet: the classes from datasets' ClassLabel metadata, each
    // sample once in source order, its bytes and class those of the source.
    let source = open(&src);
    let packed = open(&whole);
    assert!(!packed.shards().is_empty());
    assert_eq!(packed.classes(), source.classes());
    let got = loaded(&whole);
    assert_eq!(got.len(), 60);
    for (i, item) in source.iter().enumerate() {
        let (bytes, label) = &got[&(i as u64)];
        assert!(
            *bytes == bytes_of(&src, &item),
            "sample {i}: the same bytes"
        );
        assert_eq!(*label, item.label.class().unwrap(), "sample {i}: its class");
    }
    // Stopped with a file half written and run again: the files of an uninterrupted pack.
    let resumed = dir.path().join("resumed");
    let out = pack_small(
        &src,
        &resumed,
        &["--format", "parquet", "--stop-after-shards", "2"],
    );
    assert!(!out.status.success());
    // Read as it is, the unfinished pack would be a dataset of the samples packed so far.
    let err = Dataset::open_blocking(&resumed.to_string_lossy(), &context(store(&resumed)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("an unfinished pack") && err.contains("loader pack again"),
        "{err}"
    );
    std::fs::write(resumed.join("shard-000002.parquet.partial"), b"half a file").unwrap();
    let out = pack_small(&src, &resumed, &["--format", "parquet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(files(&resumed) == want, "the resumed pack's files differ");
    // The other format into the same place: refused, naming it.
    let out = pack_small(&src, &resumed, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("format: parquet → webdataset"), "{err}");
}
