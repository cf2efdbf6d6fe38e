//! torchvision's `adjust_hue` on a PIL image: to Pillow's HSV, a wrapping shift of the hue
//! byte, and back, with Pillow's roundings on both ways.

use super::enhance::clip8;
use crate::Image;

/// Shift the hue by `factor` of a turn (-0.5 to 0.5); a grey image is returned unchanged,
/// as torchvision does.
pub(crate) fn adjust_hue(image: &mut Image, factor: f64) {
    if image.channels < 3 {
        return;
    }
    // `np.array(factor * 255).astype(np.uint8)`: truncation toward zero, then wrapping.
    let shift = ((factor * 255.0) as i32) as u8;
    for px in image.data.chunks_exact_mut(image.channels) {
        let (h, s, v) = rgb_to_hsv(px[0], px[1], px[2]);
        let (r, g, b) = hsv_to_rgb(h.wrapping_add(shift), s, v);
        px[0] = r;
        px[1] = g;
        px[2] = b;
    }
}

/// Pillow's `rgb2hsv`.
fn rgb_to_hsv(r: u8, g: u8, b: u8) -> (u8, u8, u8) {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    if maxc == minc {
        return (0, 0, maxc);
    }
    let cr = f32::from(maxc - minc);
    let s = cr / f32::from(maxc);
    let rc = f32::from(maxc - r) / cr;
    let gc = f32::from(maxc - g) / cr;
    let bc = f32::from(maxc - b) / cr;
    // Pillow's float variables with double constants: `2.0 + rc - bc` is computed in
    // double and stored as float.
    let h: f32 = if r == maxc {
        bc - gc
    } else if g == maxc {
        (2.0 + f64::from(rc) - f64::from(bc)) as f32
    } else {
        (4.0 + f64::from(gc) - f64::from(rc)) as f32
    };
    let h = ((f64::from(h) / 6.0 + 1.0) % 1.0) as f32;
    let uh = clip8((f64::from(h) * 255.0) as i32 as f32);
    let us = clip8((f64::from(s) * 255.0) as i32 as f32);
    (uh, us, maxc)
}

/// Pillow's `hsv2rgb`.
fn hsv_to_rgb(h: u8, s: u8, v: u8) -> (u8, u8, u8) {
    if s == 0 {
        return (v, v, v);
    }
    let hh = f64::from(h) * 6.0 / 255.0;
    let i = hh.floor();
    let f = (hh - i) as f32;
    let fs = (f64::from(s) / 255.0) as f32;
    let vf = f64::from(v);
    let round = |x: f64| clip8(x.round() as f32);
    let p = round(vf * (1.0 - f64::from(fs)));
    let q = round(vf * (1.0 - f64::from(fs * f)));
    let t = round(vf * (1.0 - f64::from(fs) * (1.0 - f64::from(f))));
    match (i as i64).rem_euclid(6) {
        0 => (v, t, p),
        1 => (q, v, p),
        2 => (p, v, t),
        3 => (p, q, v),
        4 => (t, p, v),
        _ => (v, p, q),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_round_trip_and_shift() {
        assert_eq!(rgb_to_hsv(255, 0, 0), (0, 255, 255));
        assert_eq!(hsv_to_rgb(0, 255, 255), (255, 0, 0));
        let mut im = Image {
            width: 1,
            height: 1,
            channels: 3,
            data: vec![255, 0, 0],
        };
        // A third of a turn: red becomes (nearly) green, as Pillow's bytes make it.
        adjust_hue(&mut im, 1.0 / 3.0);
        assert_eq!(im.data[0], 0);
        assert!(im.data[1] == 255 && im.data[2] < 8, "{:?}", im.data);
    }
}
