#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Pillow's own test images (`Tests/images` of its source release: damaged, truncated,
//! odd-layout and hostile files gathered from Pillow's bug reports), through every JPEG
//! decoder and mode: each decodes or is refused with an error, never a panic or a hang,
//! and libjpeg-turbo refuses no JPEG that zune-jpeg (the decoder before it) decodes.
//!
//! The images are not in this repository: `.ci/pillow-images` fetches them (once, into
//! `~/.cache/loader`) and CI sets `LOADER_PILLOW_IMAGES`; without it the test says so and
//! checks nothing.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use loader_decoder::{DecodeOptions, Format, JpegDecoder, Pipeline, SampleKey, decode};

/// The longest one file may take through every decoder and mode (a debug build; the
/// largest image there is ~20 MP).
const PER_FILE: Duration = Duration::from_secs(60);

fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// What each decoder and mode made of one file: `Ok` or the error's text.
#[derive(Debug)]
struct Outcome {
    path: PathBuf,
    jpeg: bool,
    turbo: Result<(), String>,
    zune: Result<(), String>,
}

fn run(path: &Path, bytes: &[u8]) -> Outcome {
    let options = |jpeg, draft| DecodeOptions {
        jpeg,
        draft,
        max_pixels: 32 << 20,
        ..DecodeOptions::default()
    };
    let mut results = Vec::new();
    for jpeg in [JpegDecoder::LibjpegTurbo, JpegDecoder::Zune] {
        let whole = decode(bytes, &options(jpeg, false)).map(|_| ());
        // The planned paths: a region (RandomResizedCrop first), and a drafted resize.
        for draft in [false, true] {
            let pipelines = [
                Pipeline::builder().random_resized_crop(32),
                Pipeline::builder().resize(24).center_crop(16),
            ];
            for builder in pipelines {
                let pipeline = builder
                    .decode_options(options(jpeg, draft))
                    .build()
                    .unwrap();
                let planned = pipeline.run(bytes, SampleKey { epoch: 0, index: 1 });
                // A file decodes whole exactly when it decodes planned.
                assert_eq!(
                    whole.is_ok(),
                    planned.is_ok(),
                    "{}: {jpeg:?} draft {draft}: whole {whole:?}, planned {:?}",
                    path.display(),
                    planned.err()
                );
            }
        }
        results.push(whole.map_err(|e| e.to_string()));
    }
    let zune = results.pop().unwrap();
    let turbo = results.pop().unwrap();
    Outcome {
        path: path.to_path_buf(),
        jpeg: Format::sniff(bytes) == Some(Format::Jpeg),
        turbo,
        zune,
    }
}

#[test]
fn pillows_test_images_decode_or_are_refused_by_every_decoder() {
    let Some(root) = std::env::var_os("LOADER_PILLOW_IMAGES") else {
        eprintln!(
            "LOADER_PILLOW_IMAGES is not set (.ci/pillow-images fetches them): nothing checked"
        );
        return;
    };
    let files = files(Path::new(&root));
    assert!(
        files.len() > 500,
        "{} files: not Pillow's Tests/images",
        files.len()
    );
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            if Format::sniff(&bytes).is_none() {
                continue;
            }
            tx.send(Err(path.clone())).unwrap(); // started
            let outcome = std::panic::catch_unwind(|| run(&path, &bytes))
                .unwrap_or_else(|_| panic!("{}: a decoder panicked", path.display()));
            tx.send(Ok(outcome)).unwrap();
        }
    });
    let mut outcomes = Vec::new();
    let mut current = None;
    loop {
        match rx.recv_timeout(PER_FILE) {
            Ok(Err(started)) => current = Some(started),
            Ok(Ok(outcome)) => outcomes.push(outcome),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{current:?} took over {PER_FILE:?}: a hang")
            }
        }
    }
    worker.join().unwrap();

    let jpegs: Vec<_> = outcomes.iter().filter(|o| o.jpeg).collect();
    let count = |f: &dyn Fn(&&Outcome) -> bool| outcomes.iter().filter(f).count();
    eprintln!(
        "{} images ({} JPEG): libjpeg-turbo path refuses {}, zune path {}",
        outcomes.len(),
        jpegs.len(),
        count(&|o| o.turbo.is_err()),
        count(&|o| o.zune.is_err()),
    );
    for o in &jpegs {
        if o.turbo.is_err() || o.zune.is_err() {
            eprintln!(
                "  {}: turbo {:?}; zune {:?}",
                o.path.display(),
                o.turbo,
                o.zune
            );
        }
    }
    let newly_refused: Vec<_> = jpegs
        .iter()
        .filter(|o| o.turbo.is_err() && o.zune.is_ok())
        .map(|o| (o.path.display().to_string(), o.turbo.clone()))
        .collect();
    assert!(
        newly_refused.is_empty(),
        "refused by libjpeg-turbo, decoded by zune-jpeg: {newly_refused:#?}"
    );
}
