#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! The wrapper's refusals: each is an error of the right kind, before libjpeg-turbo writes
//! anything, never a panic or a write past the buffer.

use loader_turbojpeg::{Decompressor, ErrorKind, Limits, Output, Region, Scale};

const JPEG: &[u8] = include_bytes!("grey_24x16.jpg");

#[test]
fn regions_that_do_not_fit_or_align_are_refused() {
    let mut d = Decompressor::new().unwrap();
    assert_eq!(d.header(JPEG).unwrap().mcu_width, Some(8));
    let mut out = Vec::new();
    for (region, why) in [
        (
            Region {
                x: 4,
                y: 0,
                width: 8,
                height: 8,
            },
            "left edge",
        ),
        (
            Region {
                x: 8,
                y: 0,
                width: 24,
                height: 8,
            },
            "not inside",
        ),
        (
            Region {
                x: 0,
                y: 10,
                width: 8,
                height: 8,
            },
            "not inside",
        ),
        (
            Region {
                x: 0,
                y: 0,
                width: 0,
                height: 8,
            },
            "not inside",
        ),
    ] {
        let err = d
            .decode(JPEG, Some(region), Scale::ONE, Output::Rgb, &mut out)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unsupported, "{region:?}");
        assert!(err.message.contains(why), "{region:?}: {err}");
    }
    // At 1/2 scale the image is 12x8, and the iMCU 4 pixels wide.
    let half = Scale::new(2).unwrap();
    let region = Region {
        x: 4,
        y: 2,
        width: 8,
        height: 6,
    };
    let shape = d
        .decode(JPEG, Some(region), half, Output::Grey, &mut out)
        .unwrap();
    assert_eq!(
        (shape.width, shape.height, shape.channels, out.len()),
        (8, 6, 1, 48)
    );
}

#[test]
fn an_image_over_the_pixel_limit_is_refused_before_decoding() {
    let mut d = Decompressor::new().unwrap();
    d.set_limits(Limits {
        max_pixels: 100,
        ..Limits::default()
    })
    .unwrap();
    let mut out = Vec::new();
    let err = d
        .decode(JPEG, None, Scale::ONE, Output::Rgb, &mut out)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Limit);
    assert!(out.is_empty());
}

#[test]
fn bytes_that_are_not_a_jpeg_are_corrupt() {
    let mut d = Decompressor::new().unwrap();
    for bytes in [
        &b""[..],
        b"GIF89a",
        &JPEG[..40],
        &[0xFF, 0xD8, 0xFF, 0xDB, 0xFF, 0xFF],
    ] {
        let err = d.header(bytes).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Corrupt, "{bytes:?}");
    }
    // The same instance still decodes a good file afterwards.
    assert_eq!(d.header(JPEG).unwrap().width, 24);
    let mut out = Vec::new();
    d.decode(JPEG, None, Scale::ONE, Output::Grey, &mut out)
        .unwrap();
    assert_eq!(out.len(), 24 * 16);
}

#[test]
fn a_stream_without_a_frame_does_not_take_the_last_images_size() {
    // Tables only (cut before the frame header): libjpeg-turbo's header call succeeds on
    // such data and leaves the size of whatever the handle read before.
    let mut d = Decompressor::new().unwrap();
    let mut out = Vec::new();
    d.decode(JPEG, None, Scale::ONE, Output::Grey, &mut out)
        .unwrap();
    let sof = JPEG.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    let tables_only = [&JPEG[..sof], &[0xFF, 0xD9]].concat();
    let err = d.header(&tables_only).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
    let err = d
        .decode(&tables_only, None, Scale::ONE, Output::Grey, &mut out)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Corrupt, "{err}");
}
