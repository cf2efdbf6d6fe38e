//! zune-jpeg, libjpeg-turbo-rs and C libjpeg-turbo on the same files: ms per image for a
//! whole decode, a centred 70% crop and a 1/2-scale decode, and pixel differences against C.
//! Each argument is a directory of JPEGs (`benches/scripts/photos.sh` makes them).
#![allow(unsafe_code, clippy::unwrap_used)] // a measuring tool over raw TurboJPEG calls

use std::time::Instant;
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

fn zune(b: &[u8]) -> Vec<u8> {
    let mut d = zune_jpeg::JpegDecoder::new_with_options(
        ZCursor::new(b),
        DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB),
    );
    d.decode().unwrap()
}
fn ljt(
    b: &[u8],
    scale: Option<(u32, u32)>,
    crop: Option<(usize, usize, usize, usize)>,
) -> (usize, usize, Vec<u8>) {
    let mut d = libjpeg_turbo_rs::Decoder::new(b).unwrap();
    d.set_output_format(libjpeg_turbo_rs::PixelFormat::Rgb);
    if let Some((n, m)) = scale {
        d.set_scale(libjpeg_turbo_rs::ScalingFactor::try_new(n, m).unwrap());
    }
    if let Some((x, y, w, h)) = crop {
        d.set_crop_region(x, y, w, h);
    }
    let img = d.decode_image().unwrap();
    (img.width, img.height, img.data)
}
struct Tj(turbojpeg_sys::tjhandle);
fn tj(
    dec: &mut Tj,
    b: &[u8],
    scale: Option<(usize, usize)>,
    crop: Option<(usize, usize, usize, usize)>,
) -> (usize, usize, Vec<u8>) {
    use turbojpeg_sys::*;
    unsafe {
        assert_eq!(tj3DecompressHeader(dec.0, b.as_ptr(), b.len() as u64), 0);
        let mut w = tj3Get(dec.0, TJPARAM_TJPARAM_JPEGWIDTH as i32) as usize;
        let mut h = tj3Get(dec.0, TJPARAM_TJPARAM_JPEGHEIGHT as i32) as usize;
        let (n, m) = scale.unwrap_or((1, 1));
        assert_eq!(
            tj3SetScalingFactor(
                dec.0,
                tjscalingfactor {
                    num: n as i32,
                    denom: m as i32
                }
            ),
            0
        );
        w = (w * n).div_ceil(m);
        h = (h * n).div_ceil(m);
        let r = match crop {
            Some((x, y, cw, ch)) => {
                w = cw;
                h = ch;
                tjregion {
                    x: x as i32,
                    y: y as i32,
                    w: cw as i32,
                    h: ch as i32,
                }
            }
            None => tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            },
        };
        assert_eq!(tj3SetCroppingRegion(dec.0, r), 0);
        let mut out = vec![0u8; w * h * 3];
        assert_eq!(
            tj3Decompress8(
                dec.0,
                b.as_ptr(),
                b.len() as u64,
                out.as_mut_ptr(),
                (w * 3) as i32,
                TJPF_TJPF_RGB as i32
            ),
            0
        );
        (w, h, out)
    }
}
fn header(dec: &mut Tj, b: &[u8]) -> (usize, usize) {
    use turbojpeg_sys::*;
    unsafe {
        tj3DecompressHeader(dec.0, b.as_ptr(), b.len() as u64);
        (
            tj3Get(dec.0, TJPARAM_TJPARAM_JPEGWIDTH as i32) as usize,
            tj3Get(dec.0, TJPARAM_TJPARAM_JPEGHEIGHT as i32) as usize,
        )
    }
}
fn time<F: FnMut(&[u8]) -> usize>(files: &[Vec<u8>], mut f: F) -> f64 {
    for b in files {
        f(b);
    }
    let mut n = 0;
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < 1.5 {
        for b in files {
            std::hint::black_box(f(b));
            n += 1;
        }
    }
    t.elapsed().as_secs_f64() * 1e3 / n as f64
}
fn main() {
    let mut dec =
        Tj(unsafe { turbojpeg_sys::tj3Init(turbojpeg_sys::TJINIT_TJINIT_DECOMPRESS as i32) });
    for dir in std::env::args().skip(1) {
        let mut files: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        files.sort();
        let z = time(&files, |b| zune(b).len());
        let l = time(&files, |b| ljt(b, None, None).2.len());
        let t = time(&files, |b| tj(&mut dec, b, None, None).2.len());
        // half-area crop at the middle, MCU-aligned x (16)
        let crop = |b: &[u8], dec: &mut Tj| {
            let (w, hh) = header(dec, b);
            let cw = w * 7 / 10;
            let ch = hh * 7 / 10;
            ((w - cw) / 2 / 16 * 16, (hh - ch) / 2, cw, ch)
        };
        let crops: Vec<_> = files.iter().map(|b| crop(b, &mut dec)).collect();
        let mut i = 0;
        let lc = time(&files, |b| {
            let c = crops[i % crops.len()];
            i += 1;
            ljt(b, None, Some(c)).2.len()
        });
        let mut i = 0;
        let tc = time(&files, |b| {
            let c = crops[i % crops.len()];
            i += 1;
            tj(&mut dec, b, None, Some(c)).2.len()
        });
        let l2 = time(&files, |b| ljt(b, Some((1, 2)), None).2.len());
        let t2 = time(&files, |b| tj(&mut dec, b, Some((1, 2)), None).2.len());
        let l4 = time(&files, |b| ljt(b, Some((1, 4)), None).2.len());
        // pixel diffs vs C
        let (mut sum, mut max, mut cnt, mut zs, mut zmax) = (0u64, 0u8, 0u64, 0u64, 0u8);
        let mut cropdiff = 0u64;
        for (k, b) in files.iter().enumerate() {
            let c = tj(&mut dec, b, None, None).2;
            let r = ljt(b, None, None).2;
            let zz = zune(b);
            if c.len() == r.len() {
                for (a, bb) in c.iter().zip(&r) {
                    let d = a.abs_diff(*bb);
                    sum += d as u64;
                    max = max.max(d);
                    cnt += 1;
                }
            }
            if c.len() == zz.len() {
                for (a, bb) in c.iter().zip(&zz) {
                    let d = a.abs_diff(*bb);
                    zs += d as u64;
                    zmax = zmax.max(d);
                }
            }
            // crop equals full crop?
            let (w, _, full) = ljt(b, None, None);
            let (x, y, cw, ch) = crops[k];
            let (rw, rh, part) = ljt(b, None, Some((x, y, cw, ch)));
            for row in 0..ch.min(rh) {
                for col in 0..cw.min(rw) {
                    for ch3 in 0..3 {
                        let a = full[((y + row) * w + x + col) * 3 + ch3];
                        let p = part[(row * rw + col) * 3 + ch3];
                        cropdiff += a.abs_diff(p) as u64;
                    }
                }
            }
            if k == 0 {
                eprintln!("  crop asked {cw}x{ch} got {rw}x{rh}");
            }
        }
        println!(
            "{dir}: zune {z:.2} ms | ljt-rs {l:.2} | C tj {t:.2} || crop70%: ljt {lc:.2} C {tc:.2} || 1/2: ljt {l2:.2} C {t2:.2} | 1/4 ljt {l4:.2} || ljt-vs-C mean {:.3} max {max} ; zune-vs-C mean {:.3} max {zmax}; ljt crop-vs-full sum {cropdiff}",
            sum as f64 / cnt.max(1) as f64,
            zs as f64 / cnt.max(1) as f64
        );
    }
}
