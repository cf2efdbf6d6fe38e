#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! Decoding, checked against independent references: an encoder's known pixels, a second
//! decoder, known colours; and hostile input that must give errors, never panics.

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use loader_decoder::{
    ColorMode, DecodeErrorKind, DecodeOptions, Format, Image, JpegDecoder, decode,
};

const W: u16 = 64;
const H: u16 = 48;

/// Smooth known content (a colour gradient with a soft blob), easy for JPEG to keep.
fn rgb_pixels() -> Vec<u8> {
    let mut px = Vec::new();
    for y in 0..H as usize {
        for x in 0..W as usize {
            let d = ((x as f32 - 30.0).powi(2) + (y as f32 - 20.0).powi(2)).sqrt();
            px.push((x * 255 / W as usize) as u8);
            px.push((y * 255 / H as usize) as u8);
            px.push((200.0 - d * 3.0).clamp(0.0, 255.0) as u8);
        }
    }
    px
}

fn gray_pixels() -> Vec<u8> {
    rgb_pixels()
        .chunks(3)
        .map(|p| ((u16::from(p[0]) + u16::from(p[1])) / 2) as u8)
        .collect()
}

fn encode(
    pixels: &[u8],
    color: ColorType,
    setup: impl FnOnce(&mut Encoder<&mut Vec<u8>>),
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = Encoder::new(&mut out, 95);
    setup(&mut encoder);
    encoder.encode(pixels, W, H, color).unwrap();
    out
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (255.0f64.powi(2) / mse.max(1e-9)).log10()
}

fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).abs())
        .sum::<f64>()
        / a.len() as f64
}

fn rgb(bytes: &[u8]) -> Image {
    decode(bytes, &DecodeOptions::default()).unwrap()
}

#[test]
fn decoded_pixels_match_what_was_encoded() {
    let known = rgb_pixels();
    let image = rgb(&encode(&known, ColorType::Rgb, |_| {}));
    assert_eq!((image.width, image.height, image.channels), (64, 48, 3));
    let p = psnr(&image.data, &known);
    assert!(p > 35.0, "PSNR {p:.1} dB");
}

#[test]
fn every_jpeg_variant_decodes() {
    let known = rgb_pixels();
    let mut variants: Vec<(String, Vec<u8>)> = vec![
        ("baseline".into(), encode(&known, ColorType::Rgb, |_| {})),
        (
            "progressive".into(),
            encode(&known, ColorType::Rgb, |e| e.set_progressive(true)),
        ),
        (
            "restart markers".into(),
            encode(&known, ColorType::Rgb, |e| e.set_restart_interval(2)),
        ),
        (
            "progressive + restarts".into(),
            encode(&known, ColorType::Rgb, |e| {
                e.set_progressive(true);
                e.set_restart_interval(3)
            }),
        ),
    ];
    for sampling in [
        SamplingFactor::R_4_4_4,
        SamplingFactor::R_4_4_0,
        SamplingFactor::R_4_4_1,
        SamplingFactor::R_4_2_2,
        SamplingFactor::R_4_2_0,
        SamplingFactor::R_4_2_1,
        SamplingFactor::R_4_1_1,
        SamplingFactor::F_4_2,
        SamplingFactor::F_2_4,
    ] {
        variants.push((
            format!("{sampling:?}"),
            encode(&known, ColorType::Rgb, |e| e.set_sampling_factor(sampling)),
        ));
    }
    for (name, bytes) in variants {
        let image =
            decode(&bytes, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (image.width, image.height, image.channels),
            (64, 48, 3),
            "{name}"
        );
        let p = psnr(&image.data, &known);
        // Chroma subsampling loses colour detail, never the picture.
        assert!(p > 25.0, "{name}: PSNR {p:.1} dB");
    }
}

#[test]
fn zune_agrees_with_a_second_decoder() {
    let cases = [
        (
            "ycbcr 4:2:0",
            encode(&rgb_pixels(), ColorType::Rgb, |e| {
                e.set_sampling_factor(SamplingFactor::R_4_2_0)
            }),
            3,
        ),
        (
            "ycbcr 4:4:4",
            encode(&rgb_pixels(), ColorType::Rgb, |_| {}),
            3,
        ),
        (
            "progressive",
            encode(&rgb_pixels(), ColorType::Rgb, |e| e.set_progressive(true)),
            3,
        ),
        (
            "grayscale",
            encode(&gray_pixels(), ColorType::Luma, |_| {}),
            1,
        ),
    ];
    for (name, bytes, channels) in cases {
        let options = DecodeOptions {
            color: ColorMode::Native,
            ..DecodeOptions::default()
        };
        let ours = decode(&bytes, &options).unwrap();
        assert_eq!(ours.channels, channels, "{name}");
        let theirs = jpeg_decoder::Decoder::new(bytes.as_slice())
            .decode()
            .unwrap();
        let mad = mean_abs_diff(&ours.data, &theirs);
        assert!(mad < 1.0, "{name}: mean absolute difference {mad:.3}");
    }
}

#[test]
fn grayscale_is_expanded_to_rgb_by_default() {
    let bytes = encode(&gray_pixels(), ColorType::Luma, |_| {});
    let image = rgb(&bytes);
    assert_eq!(image.channels, 3);
    assert!(image.data.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    let gray = decode(
        &bytes,
        &DecodeOptions {
            color: ColorMode::Native,
            ..DecodeOptions::default()
        },
    )
    .unwrap();
    assert_eq!(gray.channels, 1);
    assert_eq!(
        gray.data,
        image.data.chunks(3).map(|p| p[0]).collect::<Vec<_>>()
    );
}

#[test]
fn cmyk_and_ycck_come_out_as_the_known_colours() {
    // Four quadrants of known ink: none (white), full cyan, full magenta + yellow (red),
    // full black.
    let inks: [([u8; 4], [u8; 3]); 4] = [
        ([0, 0, 0, 0], [255, 255, 255]),
        ([255, 0, 0, 0], [0, 255, 255]),
        ([0, 255, 255, 0], [255, 0, 0]),
        ([0, 0, 0, 255], [0, 0, 0]),
    ];
    let quadrant = |x: usize, y: usize| (x * 2 / W as usize) + 2 * (y * 2 / H as usize);
    let mut cmyk = Vec::new();
    for y in 0..H as usize {
        for x in 0..W as usize {
            cmyk.extend_from_slice(&inks[quadrant(x, y)].0);
        }
    }
    for color in [ColorType::Cmyk, ColorType::CmykAsYcck] {
        let image = rgb(&encode(&cmyk, color, |_| {}));
        assert_eq!(image.channels, 3, "{color:?}");
        // Sample the middle of each quadrant, away from edge ringing.
        for (qx, qy) in [(16usize, 12usize), (48, 12), (16, 36), (48, 36)] {
            let want = inks[quadrant(qx, qy)].1;
            let got = image.pixel(qx, qy);
            for c in 0..3 {
                let diff = (i16::from(got[c]) - i16::from(want[c])).abs();
                assert!(
                    diff <= 12,
                    "{color:?} at ({qx},{qy}): got {got:?}, want {want:?}"
                );
            }
        }
    }
}

fn png_bytes(
    width: u32,
    height: u32,
    color: png::ColorType,
    depth: png::BitDepth,
    data: &[u8],
    palette: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(color);
        encoder.set_depth(depth);
        if let Some(palette) = palette {
            encoder.set_palette(palette.to_vec());
        }
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(data).unwrap();
    }
    out
}

#[test]
fn every_png_variant_decodes_to_the_right_pixels() {
    let (w, h) = (5u32, 3u32);
    let n = (w * h) as usize;
    let rgb_data: Vec<u8> = (0..n * 3).map(|i| (i * 17 % 256) as u8).collect();
    let want_rgb = rgb_data.clone();

    // RGB and RGBA (alpha dropped).
    let png = png_bytes(
        w,
        h,
        png::ColorType::Rgb,
        png::BitDepth::Eight,
        &rgb_data,
        None,
    );
    assert_eq!(rgb(&png).data, want_rgb);
    let rgba: Vec<u8> = rgb_data
        .chunks(3)
        .flat_map(|p| [p[0], p[1], p[2], 99])
        .collect();
    let png = png_bytes(
        w,
        h,
        png::ColorType::Rgba,
        png::BitDepth::Eight,
        &rgba,
        None,
    );
    assert_eq!(rgb(&png).data, want_rgb);
    let native = decode(
        &png,
        &DecodeOptions {
            color: ColorMode::Native,
            ..DecodeOptions::default()
        },
    )
    .unwrap();
    assert_eq!((native.channels, native.data.clone()), (4, rgba));

    // Gray and gray + alpha, expanded.
    let gray: Vec<u8> = (0..n).map(|i| (i * 13) as u8).collect();
    let want_gray: Vec<u8> = gray.iter().flat_map(|&g| [g, g, g]).collect();
    let png = png_bytes(
        w,
        h,
        png::ColorType::Grayscale,
        png::BitDepth::Eight,
        &gray,
        None,
    );
    assert_eq!(rgb(&png).data, want_gray);
    let gray_alpha: Vec<u8> = gray.iter().flat_map(|&g| [g, 7]).collect();
    let png = png_bytes(
        w,
        h,
        png::ColorType::GrayscaleAlpha,
        png::BitDepth::Eight,
        &gray_alpha,
        None,
    );
    assert_eq!(rgb(&png).data, want_gray);

    // Palette: indices into a 4-colour table.
    let palette = [255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30];
    let indices: Vec<u8> = (0..n).map(|i| (i % 4) as u8).collect();
    let png = png_bytes(
        w,
        h,
        png::ColorType::Indexed,
        png::BitDepth::Eight,
        &indices,
        Some(&palette),
    );
    let want: Vec<u8> = indices
        .iter()
        .flat_map(|&i| palette[i as usize * 3..][..3].to_vec())
        .collect();
    assert_eq!(rgb(&png).data, want);

    // 16-bit RGB: the high byte of each sample.
    let wide: Vec<u8> = rgb_data.iter().flat_map(|&v| [v, 0x80]).collect();
    let png = png_bytes(
        w,
        h,
        png::ColorType::Rgb,
        png::BitDepth::Sixteen,
        &wide,
        None,
    );
    let got = rgb(&png).data;
    assert!(
        got.iter()
            .zip(&want_rgb)
            .all(|(g, w)| (i16::from(*g) - i16::from(*w)).abs() <= 1),
        "{got:?}"
    );
}

#[test]
fn format_is_sniffed_from_magic_bytes() {
    assert_eq!(
        Format::sniff(&encode(&gray_pixels(), ColorType::Luma, |_| {})),
        Some(Format::Jpeg)
    );
    assert_eq!(Format::sniff(b"\x89PNG\r\n\x1a\n...."), Some(Format::Png));
    assert_eq!(Format::sniff(b"GIF89a"), None);
    let err = decode(b"GIF89a....", &DecodeOptions::default()).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::UnknownFormat);
    assert!(err.to_string().contains("not a JPEG, PNG"), "{err}");
    assert_eq!(
        decode(b"", &DecodeOptions::default()).unwrap_err().kind(),
        DecodeErrorKind::Empty
    );
}

#[test]
fn every_truncation_of_a_jpeg_is_an_error() {
    for bytes in [
        encode(&rgb_pixels(), ColorType::Rgb, |_| {}),
        encode(&rgb_pixels(), ColorType::Rgb, |e| e.set_progressive(true)),
    ] {
        for len in 0..bytes.len() {
            let result = decode(&bytes[..len], &DecodeOptions::default());
            assert!(
                result.is_err(),
                "a {len}-byte prefix of {} decoded",
                bytes.len()
            );
        }
    }
}

#[test]
fn every_truncation_of_a_png_is_an_error() {
    let data: Vec<u8> = (0..5 * 3 * 3).map(|i| i as u8).collect();
    let bytes = png_bytes(5, 3, png::ColorType::Rgb, png::BitDepth::Eight, &data, None);
    for len in 0..bytes.len() - 12 {
        // The last 12 bytes are the IEND chunk, which carries no pixels.
        assert!(
            decode(&bytes[..len], &DecodeOptions::default()).is_err(),
            "{len}-byte prefix decoded"
        );
    }
}

#[test]
fn random_and_mangled_bytes_never_panic() {
    let seed_jpeg = encode(&rgb_pixels(), ColorType::Rgb, |e| e.set_progressive(true));
    let seed_png = png_bytes(
        4,
        4,
        png::ColorType::Rgb,
        png::BitDepth::Eight,
        &[9; 48],
        None,
    );
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let options = DecodeOptions {
        max_pixels: 1 << 20,
        ..DecodeOptions::default()
    };
    for round in 0..3000 {
        let mut bytes = match round % 3 {
            0 => seed_jpeg.clone(),
            1 => seed_png.clone(),
            _ => (0..(next() % 512) as usize).map(|_| next() as u8).collect(),
        };
        if round % 3 != 2 {
            for _ in 0..1 + next() % 8 {
                if bytes.is_empty() {
                    break;
                }
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
        }
        // Whatever comes back, it must come back.
        let _ = decode(&bytes, &options);
    }
}

#[test]
fn huge_declared_sizes_are_refused_before_allocating() {
    // A PNG that declares 100000 x 100000 pixels (the header alone).
    let mut png_header = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png_header, 100_000, 100_000);
        encoder.set_color(png::ColorType::Rgb);
        let _writer = encoder.write_header().unwrap();
    }
    let err = decode(&png_header, &DecodeOptions::default()).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::TooLarge, "{err}");
    assert!(err.to_string().contains("100000x100000"), "{err}");

    // A JPEG whose frame header is edited to 60000 x 60000.
    let mut jpeg = encode(&gray_pixels(), ColorType::Luma, |_| {});
    let sof = jpeg.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    jpeg[sof + 5..sof + 9].copy_from_slice(&[0xEA, 0x60, 0xEA, 0x60]);
    let err = decode(&jpeg, &DecodeOptions::default()).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::TooLarge, "{err}");

    // The budget is the caller's.
    let small = DecodeOptions {
        max_pixels: 100,
        ..DecodeOptions::default()
    };
    assert_eq!(
        decode(&encode(&gray_pixels(), ColorType::Luma, |_| {}), &small)
            .unwrap_err()
            .kind(),
        DecodeErrorKind::TooLarge
    );
}

#[test]
fn a_pipeline_reusing_its_pixel_buffer_decodes_each_image_afresh() {
    let big = encode(&rgb_pixels(), ColorType::Rgb, |_| {});
    let mut small = Vec::new();
    Encoder::new(&mut small, 90)
        .encode(&[250, 10, 10].repeat(16 * 8), 16, 8, ColorType::Rgb)
        .unwrap();
    let gray = encode(&gray_pixels(), ColorType::Luma, |_| {});
    let pipeline = loader_decoder::Pipeline::builder().build().unwrap();
    // Big, smaller, big again, gray: each on the buffer the one before left behind.
    for (i, bytes) in [&big, &small, &big, &gray, &small].into_iter().enumerate() {
        let fresh = rgb(bytes);
        let sample = pipeline
            .run(bytes, loader_decoder::SampleKey::default())
            .unwrap();
        assert_eq!(sample.shape, [fresh.height, fresh.width, 3], "image {i}");
        assert_eq!(
            sample.data,
            loader_decoder::SampleData::U8(fresh.data),
            "image {i}"
        );
    }
}

#[test]
fn a_reused_output_buffer_holds_exactly_the_new_sample() {
    use loader_decoder::{Pipeline, SampleData, SampleKey};
    let jpeg = encode(&rgb_pixels(), ColorType::Rgb, |_| {});
    let key = SampleKey { epoch: 1, index: 2 };
    let f32s = Pipeline::builder()
        .center_crop(32)
        .to_tensor_normalized(&[0.5; 3], &[0.25; 3])
        .build()
        .unwrap();
    let u8s = Pipeline::builder().center_crop(32).build().unwrap();
    for pipeline in [&f32s, &u8s] {
        let fresh = pipeline.run(&jpeg, key).unwrap();
        // Stale values, longer or shorter than the output, or of the other type.
        for reuse in [
            SampleData::F32(vec![9.0; 10_000]),
            SampleData::F32(vec![9.0; 3]),
            SampleData::U8(vec![7; 10_000]),
            SampleData::U8(Vec::new()),
        ] {
            let again = pipeline.run_reusing(&jpeg, key, reuse).unwrap();
            assert_eq!(again, fresh);
        }
    }
}

/// `bytes` with `insert` placed right after the segment that starts at byte 2 (APP0 for
/// jpeg-encoder's files): where cameras and editors put their metadata.
fn after_app0(bytes: &[u8], insert: &[u8]) -> Vec<u8> {
    assert_eq!(&bytes[2..4], [0xFF, 0xE0], "jpeg-encoder starts with APP0");
    let len = usize::from(u16::from_be_bytes([bytes[4], bytes[5]]));
    let at = 4 + len;
    [&bytes[..at], insert, &bytes[at..]].concat()
}

// Defect 9: real-world files that libjpeg-turbo (PIL, torchvision) decode were refused by
// the strict decoder. Each damage here is outside the image data, so the pixels must be
// exactly those of the undamaged file.
#[test]
fn files_with_damaged_metadata_decode_as_libjpeg_decodes_them() {
    let clean_files = [
        encode(&rgb_pixels(), ColorType::Rgb, |_| {}),
        encode(&rgb_pixels(), ColorType::Rgb, |e| e.set_progressive(true)),
        encode(&gray_pixels(), ColorType::Luma, |_| {}),
    ];
    let damages: [(&str, Vec<u8>); 6] = [
        ("bytes between markers", b"\x00\x00garbage\x0a\x0d".to_vec()),
        ("a stray 0x00 after a segment", vec![0x00]),
        (
            "a truncated Adobe APP14 segment",
            // Version and flags0 but no flags1 or transform: PIL reads it, zune refused it.
            [&[0xFF, 0xEE, 0x00, 0x0B][..], b"Adobe\x00\x64\x80\x00"].concat(),
        ),
        (
            "an EXIF segment with a corrupt TIFF header",
            [
                &[0xFF, 0xE1, 0x00, 0x10][..],
                b"Exif\0\0",
                b"\xde\xad\xbe\xef\x00\x01\x02\x03",
            ]
            .concat(),
        ),
        (
            "an APP1 segment with a length of 0",
            vec![0xFF, 0xE1, 0x00, 0x00],
        ),
        (
            "a comment and garbage",
            [&[0xFF, 0xFE, 0x00, 0x05][..], b"hi!", b"junk"].concat(),
        ),
    ];
    for clean in &clean_files {
        let want = rgb(clean);
        for (what, damage) in &damages {
            let damaged = after_app0(clean, damage);
            let got = decode(&damaged, &DecodeOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                (got.width, got.height, got.channels),
                (want.width, want.height, want.channels),
                "{what}"
            );
            assert!(got.data == want.data, "{what}: the pixels differ");
            // And a file with that damage cut inside its scan is still refused.
            let cut = &damaged[..damaged.len() - 40];
            assert!(
                decode(cut, &DecodeOptions::default()).is_err(),
                "{what}: cut"
            );
        }
    }
}

// The same damage in files PIL wrote itself, against PIL's own decode of each damaged file
// (`fixtures/pil_damaged/make.py`): within the tolerance we keep against libjpeg-turbo.
#[test]
fn damaged_files_written_by_pil_decode_to_pils_pixels() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pil_damaged");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jpg") {
            continue;
        }
        let reference = path.with_extension("pil.png");
        let want = rgb(&std::fs::read(&reference).unwrap());
        for jpeg in [JpegDecoder::LibjpegTurbo, JpegDecoder::Zune] {
            let options = DecodeOptions {
                jpeg,
                ..DecodeOptions::default()
            };
            let got = decode(&std::fs::read(&path).unwrap(), &options)
                .unwrap_or_else(|e| panic!("{}: {jpeg:?}: {e}", path.display()));
            assert_eq!((got.width, got.height), (want.width, want.height));
            let mean = mean_abs_diff(&got.data, &want.data);
            let worst = got
                .data
                .iter()
                .zip(&want.data)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .unwrap();
            // Printed so the figure in docs/reliability.md comes from this command:
            // cargo test -p loader-decoder --test decode damaged_files_written_by_pil -- --nocapture
            println!("{} {jpeg:?}: mean {mean:.3}, worst {worst}", path.display());
            // libjpeg-turbo is PIL's own decoder: its pixels exactly; zune-jpeg's IDCT
            // rounds otherwise.
            let (mean_bound, worst_bound) = match jpeg {
                JpegDecoder::LibjpegTurbo => (0.0, 0),
                JpegDecoder::Zune => (0.5, 9),
            };
            assert!(
                mean <= mean_bound && worst <= worst_bound,
                "{} {jpeg:?}: mean {mean:.3}, worst {worst}",
                path.display()
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 12);
}

#[test]
fn files_that_broke_a_decoder_are_an_error_or_an_image() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pillow");
    let tiff = std::fs::read(dir.join("tiff_tiled_planar_16bit_RGB.tiff")).unwrap();
    let err = decode(&tiff, &DecodeOptions::default()).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::Corrupt);
    assert!(
        err.to_string().contains("TIFF: the decoder failed"),
        "{err}"
    );
    let jpeg = std::fs::read(dir.join("icc-after-SOF.jpg")).unwrap();
    for decoder in [JpegDecoder::LibjpegTurbo, JpegDecoder::Zune] {
        let options = DecodeOptions {
            jpeg: decoder,
            ..DecodeOptions::default()
        };
        let image = decode(&jpeg, &options).unwrap_or_else(|e| panic!("{decoder:?}: {e}"));
        assert_eq!((image.width, image.height), (10, 10));
    }
}

/// A BMP header declaring `width` x `height` 24-bit pixels, followed by `data`.
fn bmp(width: i32, height: i32, data: &[u8]) -> Vec<u8> {
    let mut out = b"BM".to_vec();
    out.extend(((54 + data.len()) as u32).to_le_bytes());
    out.extend([0u8; 4]);
    out.extend(54u32.to_le_bytes());
    out.extend(40u32.to_le_bytes());
    out.extend(width.to_le_bytes());
    out.extend(height.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(24u16.to_le_bytes());
    out.extend([0u8; 24]);
    out.extend(data);
    out
}

#[test]
fn the_other_listed_formats_are_sniffed_and_decoded() {
    assert_eq!(Format::sniff(b"RIFF\0\0\0\0WEBPVP8L"), Some(Format::WebP));
    assert_eq!(Format::sniff(b"II*\0\x08\0\0\0"), Some(Format::Tiff));
    assert_eq!(Format::sniff(b"MM\0*\0\0\0\x08"), Some(Format::Tiff));
    assert_eq!(Format::sniff(b"P6\n2 1\n255\n"), Some(Format::Pnm));
    assert_eq!(Format::sniff(b"P9\n"), None);
    // A 2x1 BMP (rows bottom-up, BGR, padded to 4 bytes): known pixels.
    let image = decode(
        &bmp(2, 1, &[1, 2, 3, 4, 5, 6, 0, 0]),
        &DecodeOptions::default(),
    )
    .unwrap();
    assert_eq!((image.width, image.height, image.channels), (2, 1, 3));
    assert_eq!(image.data, [3, 2, 1, 6, 5, 4]);
    let ppm = decode(b"P5\n2 1\n255\n\x10\x20", &DecodeOptions::default()).unwrap();
    assert_eq!(
        ppm.data,
        [16, 16, 16, 32, 32, 32],
        "gray as RGB, as PIL's convert"
    );
}

#[test]
fn the_other_formats_refuse_oversized_and_damaged_input_with_errors() {
    let options = DecodeOptions {
        max_pixels: 1 << 20,
        ..DecodeOptions::default()
    };
    // The header's size is checked before any pixel buffer exists.
    let err = decode(&bmp(40_000, 40_000, &[]), &options).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::TooLarge, "{err}");
    assert!(err.to_string().contains("BMP"), "{err}");
    let err = decode(b"P6\n100000 100000\n255\n", &options).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::TooLarge, "{err}");
    // Cut short, or garbage after the magic: an error naming the format, never a panic.
    let whole = bmp(2, 2, &[7; 16]);
    for cut in [20, 54, 60] {
        let err = decode(&whole[..cut], &options).unwrap_err();
        assert!(err.to_string().starts_with("BMP"), "{err}");
    }
    for bad in [
        &b"RIFF\0\0\0\0WEBPVP8 garbage"[..],
        b"II*\0\xff\xff\xff\xff",
        b"P6\n2 2\n255\n\x01",
    ] {
        assert!(decode(bad, &options).is_err());
    }
}

#[test]
fn a_damaged_jpeg_does_not_spoil_the_next_decode_on_its_thread() {
    // libjpeg-turbo's instance is reused per thread; one left half-way through a bad
    // stream failed the next good file ("Bogus DQT index"). A grey 24x16 file PIL wrote
    // shows it (not every file's tables do).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let good = std::fs::read(dir.join("pil_grey_24x16.jpg")).unwrap();
    let want = rgb(&good);
    let damaged: Vec<Vec<u8>> = vec![
        good[..40].to_vec(),
        vec![0xFF, 0xD8, 0xFF, 0xDB, 0xFF, 0xFF],
        good[..good.len() / 2].to_vec(),
        {
            let mut scan = good.clone();
            let mid = scan.len() / 2;
            scan[mid..mid + 64].fill(0xFF);
            scan
        },
    ];
    for bad in damaged {
        // Each on a thread of its own: its own decoder instance, as a decode thread has.
        let (good, want) = (good.clone(), want.clone());
        std::thread::spawn(move || {
            let _ = decode(&bad, &DecodeOptions::default());
            let again = decode(&good, &DecodeOptions::default());
            let shown = &bad[..bad.len().min(8)];
            assert!(
                again.as_ref().is_ok_and(|i| *i == want),
                "after {shown:02x?}: {again:?}"
            );
        })
        .join()
        .unwrap();
    }
}

// Issue 46: an error carries the decoding library's own as its source, and "truncated" is
// told by the file's structure (a PNG without its closing IEND chunk), not by the words of
// the library's message.
#[test]
fn a_png_cut_short_is_truncated_a_damaged_one_corrupt_and_both_keep_their_cause() {
    let (w, h) = (64u32, 64u32);
    let data: Vec<u8> = (0..(w * h * 3) as usize)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let png = png_bytes(w, h, png::ColorType::Rgb, png::BitDepth::Eight, &data, None);
    let options = DecodeOptions::default();
    let cut = decode(&png[..png.len() / 2], &options).unwrap_err();
    assert_eq!(cut.kind(), DecodeErrorKind::Truncated, "{cut}");
    assert!(std::error::Error::source(&cut).is_some(), "{cut}");
    // The compressed pixels damaged, the file whole to its IEND: corrupt, not truncated.
    let idat = png.windows(4).position(|w| w == b"IDAT").unwrap() + 4;
    let mut damaged = png.clone();
    for b in &mut damaged[idat + 2..idat + 40] {
        *b ^= 0x5a;
    }
    let e = decode(&damaged, &options).unwrap_err();
    assert_eq!(e.kind(), DecodeErrorKind::Corrupt, "{e}");
    assert!(std::error::Error::source(&e).is_some(), "{e}");
}
