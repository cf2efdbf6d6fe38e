//! Run a transform spec on image files and write each output's raw values (u8, or f32
//! little-endian) to `OUT_DIR/<n>.bin`: for comparing the native pipeline with another
//! implementation outside Rust.
//!
//! `cargo run -p loader-decoder --example apply -- SPEC_JSON OUT_DIR EPOCH INDICES IMAGE...`
//! (INDICES is `first..last`: every image is run once per index).

use std::error::Error;

use loader_decoder::{DecodeOptions, SampleData, SampleKey, TransformSpec, decode};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [spec, out, epoch, indices, images @ ..] = &args[..] else {
        return Err("usage: apply SPEC_JSON OUT_DIR EPOCH FIRST..LAST IMAGE...".into());
    };
    let steps: Vec<TransformSpec> = serde_json::from_str(spec)?;
    let pipeline = TransformSpec::pipeline(&steps, 0)?;
    let (first, last) = indices.split_once("..").ok_or("indices: FIRST..LAST")?;
    let (first, last): (u64, u64) = (first.parse()?, last.parse()?);
    let epoch: u64 = epoch.parse()?;
    let mut n = 0;
    for path in images {
        let image = decode(&std::fs::read(path)?, &DecodeOptions::default())?;
        for index in first..last {
            let sample = pipeline.apply(&image, SampleKey { epoch, index })?;
            let bytes: Vec<u8> = match sample.data {
                SampleData::U8(v) => v,
                SampleData::F32(v) => v.iter().flat_map(|f| f.to_le_bytes()).collect(),
            };
            let [a, b, c] = sample.shape;
            std::fs::write(format!("{out}/{n}.bin"), bytes)?;
            std::fs::write(format!("{out}/{n}.shape"), format!("{a} {b} {c}"))?;
            n += 1;
        }
    }
    Ok(())
}
