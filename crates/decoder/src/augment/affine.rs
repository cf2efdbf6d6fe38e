//! Affine warps as Pillow's `Image.transform(AFFINE)` computes them (nearest: its scale,
//! 16.16 fixed-point and float loops; bilinear: its generic loop), Pillow's `rotate`, and
//! torchvision's inverse matrix for `affine`: the geometry of `RandomRotation`,
//! `RandomAffine` and the shears, translations and rotations of RandAugment.

use rand::Rng;

use crate::Image;

/// How a warp samples the source, by torchvision's `InterpolationMode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// `NEAREST`.
    Nearest,
    /// `BILINEAR` (Pillow's transform does not antialias).
    Bilinear,
}

/// The fill of pixels a warp brings in from outside the image, per channel (torchvision's
/// `fill`; `None` there is 0).
pub type Fill = [u8; 3];

/// Pillow's `COORD`: -1 below zero, else truncation.
fn coord(v: f64) -> i64 {
    if v < 0.0 { -1 } else { v as i64 }
}

/// Pillow's `FLOOR`.
fn floor(v: f64) -> i64 {
    if v < 0.0 { v.floor() as i64 } else { v as i64 }
}

fn filled(width: usize, height: usize, channels: usize, fill: Fill) -> Image {
    let px: Vec<u8> = (0..channels).map(|c| fill[c.min(2)]).collect();
    Image {
        width,
        height,
        channels,
        data: px.repeat(width * height),
    }
}

/// `image.transform((width, height), AFFINE, a, resample, fillcolor=fill)`: output pixel
/// (x, y) samples the source at `(a0 x + a1 y + a2, a3 x + a4 y + a5)`.
pub(crate) fn transform(
    image: &Image,
    width: usize,
    height: usize,
    a: [f64; 6],
    interpolation: Interpolation,
    fill: Fill,
) -> Image {
    let mut out = filled(width, height, image.channels, fill);
    match interpolation {
        Interpolation::Bilinear => bilinear(image, &mut out, a),
        Interpolation::Nearest if a[1] == 0.0 && a[3] == 0.0 => scale_nearest(image, &mut out, a),
        Interpolation::Nearest => {
            let (w, h) = (width as f64, height as f64);
            let fits = |x: f64, y: f64| {
                (x * a[0] + y * a[1] + a[2]).abs() < 32768.0
                    && (x * a[3] + y * a[4] + a[5]).abs() < 32768.0
            };
            if fits(0.0, 0.0) && fits(w, h) && fits(0.0, h) && fits(w, 0.0) {
                fixed_nearest(image, &mut out, a);
            } else {
                float_nearest(image, &mut out, a);
            }
        }
    }
    out
}

fn copy_px(image: &Image, out: &mut Image, x: usize, y: usize, xin: i64, yin: i64) {
    let c = image.channels;
    let src = (yin as usize * image.width + xin as usize) * c;
    let dst = (y * out.width + x) * c;
    out.data[dst..dst + c].copy_from_slice(&image.data[src..src + c]);
}

fn inside(image: &Image, xin: i64, yin: i64) -> bool {
    xin >= 0 && (xin as usize) < image.width && yin >= 0 && (yin as usize) < image.height
}

fn scale_nearest(image: &Image, out: &mut Image, a: [f64; 6]) {
    let mut xo = a[2] + a[0] * 0.5;
    let mut yo = a[5] + a[4] * 0.5;
    let xin: Vec<i64> = (0..out.width)
        .map(|_| {
            let v = coord(xo);
            xo += a[0];
            v
        })
        .collect();
    for y in 0..out.height {
        let yi = coord(yo);
        for (x, &xi) in xin.iter().enumerate() {
            if inside(image, xi, yi) {
                copy_px(image, out, x, y, xi, yi);
            }
        }
        yo += a[4];
    }
}

fn fixed_nearest(image: &Image, out: &mut Image, a: [f64; 6]) {
    let fix = |v: f64| floor(v * 65536.0 + 0.5) as i32;
    let (a0, a1, a3, a4) = (fix(a[0]), fix(a[1]), fix(a[3]), fix(a[4]));
    let mut a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
    let mut a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
    for y in 0..out.height {
        let (mut xx, mut yy) = (a2, a5);
        for x in 0..out.width {
            let (xin, yin) = (i64::from(xx >> 16), i64::from(yy >> 16));
            if inside(image, xin, yin) {
                copy_px(image, out, x, y, xin, yin);
            }
            xx = xx.wrapping_add(a0);
            yy = yy.wrapping_add(a3);
        }
        a2 = a2.wrapping_add(a1);
        a5 = a5.wrapping_add(a4);
    }
}

fn float_nearest(image: &Image, out: &mut Image, a: [f64; 6]) {
    let mut xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
    let mut yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for y in 0..out.height {
        let (mut xx, mut yy) = (xo, yo);
        for x in 0..out.width {
            let (xin, yin) = (coord(xx), coord(yy));
            if inside(image, xin, yin) {
                copy_px(image, out, x, y, xin, yin);
            }
            xx += a[0];
            yy += a[3];
        }
        xo += a[1];
        yo += a[4];
    }
}

fn bilinear(image: &Image, out: &mut Image, a: [f64; 6]) {
    let (iw, ih, c) = (image.width as i64, image.height as i64, image.channels);
    let clip = |v: i64, n: i64| v.clamp(0, n - 1) as usize;
    let at = |x: usize, y: usize, ch: usize| f64::from(image.data[(y * image.width + x) * c + ch]);
    for y in 0..out.height {
        for x in 0..out.width {
            let (xf, yf) = (x as f64 + 0.5, y as f64 + 0.5);
            let mut xin = a[0] * xf + a[1] * yf + a[2];
            let mut yin = a[3] * xf + a[4] * yf + a[5];
            if xin < 0.0 || xin >= iw as f64 || yin < 0.0 || yin >= ih as f64 {
                continue;
            }
            xin -= 0.5;
            yin -= 0.5;
            let (xi, yi) = (floor(xin), floor(yin));
            let (dx, dy) = (xin - xi as f64, yin - yi as f64);
            let (x0, x1, y0) = (clip(xi, iw), clip(xi + 1, iw), clip(yi, ih));
            let below = (0..ih).contains(&(yi + 1)).then_some((yi + 1) as usize);
            for ch in 0..c {
                let v1 = at(x0, y0, ch) + (at(x1, y0, ch) - at(x0, y0, ch)) * dx;
                let v2 = match below {
                    Some(y1) => at(x0, y1, ch) + (at(x1, y1, ch) - at(x0, y1, ch)) * dx,
                    None => v1,
                };
                out.data[(y * out.width + x) * c + ch] = (v1 + (v2 - v1) * dy) as u8;
            }
        }
    }
}

/// Pillow's `ROTATE_90` (counter-clockwise), `ROTATE_180` and `ROTATE_270` transposes.
fn transpose(image: &Image, quarter_turns: u8) -> Image {
    let (w, h, c) = (image.width, image.height, image.channels);
    let (ow, oh) = if quarter_turns == 2 { (w, h) } else { (h, w) };
    let mut data = Vec::with_capacity(image.data.len());
    for y in 0..oh {
        for x in 0..ow {
            let (sx, sy) = match quarter_turns {
                1 => (w - 1 - y, x),
                2 => (w - 1 - x, h - 1 - y),
                _ => (y, h - 1 - x),
            };
            data.extend_from_slice(image.pixel(sx, sy));
        }
    }
    Image {
        width: ow,
        height: oh,
        channels: c,
        data,
    }
}

/// Python's `round(v, 15)`.
fn round15(v: f64) -> f64 {
    format!("{v:.15}").parse().unwrap_or(v)
}

/// `image.rotate(angle, resample, expand, center, fillcolor=fill)`: counter-clockwise
/// degrees about `center` (default the middle), as torchvision's `rotate` calls it.
pub(crate) fn rotate(
    image: &Image,
    angle: f64,
    interpolation: Interpolation,
    expand: bool,
    center: Option<(f64, f64)>,
    fill: Fill,
) -> Image {
    let angle = angle.rem_euclid(360.0);
    let (w, h) = (image.width, image.height);
    if center.is_none() {
        if angle == 0.0 {
            return image.clone();
        }
        if angle == 180.0 {
            return transpose(image, 2);
        }
        if (angle == 90.0 || angle == 270.0) && (expand || w == h) {
            return transpose(image, if angle == 90.0 { 1 } else { 3 });
        }
    }
    let (cx, cy) = center.unwrap_or((w as f64 / 2.0, h as f64 / 2.0));
    let r = -angle.to_radians();
    let mut m = [
        round15(r.cos()),
        round15(r.sin()),
        0.0,
        round15(-r.sin()),
        round15(r.cos()),
        0.0,
    ];
    let apply =
        |m: &[f64; 6], x: f64, y: f64| (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]);
    (m[2], m[5]) = apply(&m, -cx, -cy);
    m[2] += cx;
    m[5] += cy;
    let (mut ow, mut oh) = (w, h);
    if expand {
        let corners = [
            (0.0, 0.0),
            (w as f64, 0.0),
            (w as f64, h as f64),
            (0.0, h as f64),
        ];
        let pts: Vec<(f64, f64)> = corners.iter().map(|&(x, y)| apply(&m, x, y)).collect();
        let span = |v: &dyn Fn(&(f64, f64)) -> f64| {
            let max = pts.iter().map(v).fold(f64::MIN, f64::max);
            let min = pts.iter().map(v).fold(f64::MAX, f64::min);
            (max.ceil() - min.floor()) as usize
        };
        ow = span(&|p| p.0);
        oh = span(&|p| p.1);
        (m[2], m[5]) = apply(
            &m,
            -(ow as f64 - w as f64) / 2.0,
            -(oh as f64 - h as f64) / 2.0,
        );
    }
    transform(image, ow, oh, m, interpolation, fill)
}

/// torchvision's `_get_inverse_affine_matrix`: the Pillow matrix of a rotation by `angle`
/// degrees, a translation, a scale and shears (degrees) about `center`.
pub(crate) fn inverse_matrix(
    center: (f64, f64),
    angle: f64,
    translate: (f64, f64),
    scale: f64,
    shear: (f64, f64),
) -> [f64; 6] {
    let rot = angle.to_radians();
    let (sx, sy) = (shear.0.to_radians(), shear.1.to_radians());
    let (cx, cy) = center;
    let (tx, ty) = translate;
    let a = (rot - sy).cos() / sy.cos();
    let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
    let c = (rot - sy).sin() / sy.cos();
    let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
    let mut m = [d, -b, 0.0, -c, a, 0.0].map(|v| v / scale);
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
    m
}

/// torchvision's `affine` on a PIL image (the centre defaults to `[w * 0.5, h * 0.5]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn affine(
    image: &Image,
    angle: f64,
    translate: (f64, f64),
    scale: f64,
    shear: (f64, f64),
    interpolation: Interpolation,
    fill: Fill,
    center: Option<(f64, f64)>,
) -> Image {
    let center = center.unwrap_or((image.width as f64 * 0.5, image.height as f64 * 0.5));
    let m = inverse_matrix(center, angle, translate, scale, shear);
    transform(image, image.width, image.height, m, interpolation, fill)
}

fn uniform(rng: &mut impl Rng, (lo, hi): (f64, f64)) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

/// `RandomRotation(degrees, interpolation, expand, center, fill)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomRotation {
    /// The angle's range, counter-clockwise degrees.
    pub degrees: (f64, f64),
    /// Nearest or bilinear.
    pub interpolation: Interpolation,
    /// Grow the output to hold the whole rotated image.
    pub expand: bool,
    /// The centre (x, y) in pixels; the middle when `None`.
    pub center: Option<(f64, f64)>,
    /// The fill of uncovered pixels.
    pub fill: Fill,
}

impl RandomRotation {
    pub(crate) fn apply(&self, image: &Image, rng: &mut impl Rng) -> Image {
        let angle = uniform(rng, self.degrees);
        rotate(
            image,
            angle,
            self.interpolation,
            self.expand,
            self.center,
            self.fill,
        )
    }
}

/// `RandomAffine(degrees, translate, scale, shear, interpolation, fill, center)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomAffine {
    /// The rotation's range, degrees.
    pub degrees: (f64, f64),
    /// The largest shift as a share of (width, height).
    pub translate: Option<(f64, f64)>,
    /// The scale's range.
    pub scale: Option<(f64, f64)>,
    /// The shear ranges along x and along y, degrees.
    pub shear: Option<[f64; 4]>,
    /// Nearest or bilinear.
    pub interpolation: Interpolation,
    /// The fill of uncovered pixels.
    pub fill: Fill,
    /// The centre (x, y) in pixels; the middle when `None`.
    pub center: Option<(f64, f64)>,
}

impl RandomAffine {
    pub(crate) fn apply(&self, image: &Image, rng: &mut impl Rng) -> Image {
        let angle = uniform(rng, self.degrees);
        let translate = match self.translate {
            Some((fx, fy)) => {
                let (dx, dy) = (fx * image.width as f64, fy * image.height as f64);
                (
                    uniform(rng, (-dx, dx)).round_ties_even(),
                    uniform(rng, (-dy, dy)).round_ties_even(),
                )
            }
            None => (0.0, 0.0),
        };
        let scale = self.scale.map_or(1.0, |s| uniform(rng, s));
        let shear = match self.shear {
            Some([x0, x1, y0, y1]) => (uniform(rng, (x0, x1)), {
                if (y0, y1) == (0.0, 0.0) {
                    0.0
                } else {
                    uniform(rng, (y0, y1))
                }
            }),
            None => (0.0, 0.0),
        };
        affine(
            image,
            angle,
            translate,
            scale,
            shear,
            self.interpolation,
            self.fill,
            self.center,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: usize, h: usize) -> Image {
        Image {
            width: w,
            height: h,
            channels: 1,
            data: (0..w * h).map(|i| i as u8).collect(),
        }
    }

    #[test]
    fn quarter_turns_are_transposes() {
        let im = ramp(3, 2); // rows [0 1 2] [3 4 5]
        assert_eq!(
            rotate(&im, 90.0, Interpolation::Nearest, true, None, [0; 3]).data,
            [2, 5, 1, 4, 0, 3]
        );
        assert_eq!(
            rotate(&im, 270.0, Interpolation::Nearest, true, None, [0; 3]).data,
            [3, 0, 4, 1, 5, 2]
        );
        assert_eq!(
            rotate(&im, 180.0, Interpolation::Nearest, false, None, [0; 3]).data,
            [5, 4, 3, 2, 1, 0]
        );
    }

    #[test]
    fn identity_matrix_copies_and_translation_fills() {
        let im = ramp(4, 4);
        let same = affine(
            &im,
            0.0,
            (0.0, 0.0),
            1.0,
            (0.0, 0.0),
            Interpolation::Nearest,
            [9; 3],
            None,
        );
        assert_eq!(same.data, im.data);
        let moved = affine(
            &im,
            0.0,
            (1.0, 0.0),
            1.0,
            (0.0, 0.0),
            Interpolation::Bilinear,
            [9; 3],
            None,
        );
        assert_eq!(&moved.data[..4], &[9, 0, 1, 2]);
    }
}
