//! A synthetic ImageNet-like dataset: class folders of natural-looking JPEGs.

use std::io;
use std::path::Path;

use jpeg_encoder::{ColorType, Encoder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What to generate. Everything follows from `seed`: the same spec writes the same bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetSpec {
    /// Number of images.
    pub images: usize,
    /// Number of classes (folders `class_000`, `class_001`, ...); images go round-robin.
    pub classes: usize,
    /// Seed of all content.
    pub seed: u64,
    /// Width range, inclusive.
    pub width: (u32, u32),
    /// Height range, inclusive.
    pub height: (u32, u32),
    /// JPEG quality, 1-100.
    pub quality: u8,
    /// Texture strength: the amplitude of per-pixel noise, which decides the file size.
    pub noise: f32,
    /// File size band in bytes to steer each image into by re-encoding with scaled noise
    /// (at most a few tries), or `None` to take what `noise` gives.
    pub target_bytes: Option<(usize, usize)>,
    /// Whether each class has a colour of its own that tints its images, so a model can
    /// learn the labels (training examples); otherwise content is independent of class.
    pub learnable: bool,
}

/// One written image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetItem {
    /// Its key under the dataset root, `class_007/img_000123.jpg`.
    pub key: String,
    /// Its class index.
    pub label: usize,
    /// Its size in bytes.
    pub size: u64,
}

impl DatasetSpec {
    /// ImageNet-like: 400-640 × 300-480 px, about 90-140 KB per image.
    pub fn imagenet(images: usize, classes: usize) -> Self {
        Self {
            images,
            classes,
            seed: 0,
            width: (400, 640),
            height: (300, 480),
            quality: 90,
            noise: 13.0,
            target_bytes: Some((90_000, 140_000)),
            learnable: false,
        }
    }

    /// Tiny 64×48 images for fast tests.
    pub fn tiny(images: usize, classes: usize) -> Self {
        Self {
            images,
            classes,
            seed: 0,
            width: (64, 64),
            height: (48, 48),
            quality: 85,
            noise: 10.0,
            target_bytes: None,
            learnable: false,
        }
    }

    /// The same spec with another seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same spec with a colour per class (see [`learnable`](Self::learnable)).
    pub fn learnable(mut self) -> Self {
        self.learnable = true;
        self
    }

    /// The key and label of image `index`.
    pub fn item(&self, index: usize) -> (String, usize) {
        let label = index % self.classes.max(1);
        (format!("class_{label:03}/img_{index:06}.jpg"), label)
    }

    /// The JPEG bytes of image `index`.
    pub fn encode(&self, index: usize) -> io::Result<Vec<u8>> {
        let mut noise = self.noise;
        let mut best = self.encode_with_noise(index, noise)?;
        let Some((low, high)) = self.target_bytes else {
            return Ok(best);
        };
        let middle = (low + high) as f32 / 2.0;
        for _ in 0..3 {
            if (low..=high).contains(&best.len()) {
                break;
            }
            // Size grows a little slower than linearly with noise; overshoot the correction.
            noise *= (middle / best.len() as f32).powf(1.3);
            best = self.encode_with_noise(index, noise)?;
        }
        Ok(best)
    }

    fn encode_with_noise(&self, index: usize, noise: f32) -> io::Result<Vec<u8>> {
        let mut rng =
            StdRng::seed_from_u64(self.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let w = rng.random_range(self.width.0..=self.width.1.max(self.width.0));
        let h = rng.random_range(self.height.0..=self.height.1.max(self.height.0));
        let mut pixels = paint(&mut rng, w as usize, h as usize, noise);
        if self.learnable {
            let (_, label) = self.item(index);
            tint(&mut pixels, class_colour(label, self.classes));
        }
        let mut out = Vec::new();
        let (w16, h16) = (
            u16::try_from(w).map_err(io::Error::other)?,
            u16::try_from(h).map_err(io::Error::other)?,
        );
        Encoder::new(&mut out, self.quality)
            .encode(&pixels, w16, h16, ColorType::Rgb)
            .map_err(io::Error::other)?;
        Ok(out)
    }

    /// Write the dataset as `shards` WebDataset tar shards `shard-000000.tar`, ... under
    /// `root` (written with the `tar` crate, ustar headers): image `i` is the members
    /// `{i:06}.jpg` and `{i:06}.cls` (its label as text), consecutive images in one shard.
    /// Returns each image with its shard's key, in dataset order.
    pub fn write_shards(&self, root: &Path, shards: usize) -> io::Result<Vec<DatasetItem>> {
        let mut out = Vec::with_capacity(self.images);
        for s in 0..self.shard_count(shards) {
            out.extend(self.write_shard(root, s, shards)?);
        }
        Ok(out)
    }

    /// How many shards [`DatasetSpec::write_shards`] writes when asked for `shards`.
    pub fn shard_count(&self, shards: usize) -> usize {
        let per = self.images.div_ceil(shards.clamp(1, self.images.max(1)));
        self.images.div_ceil(per.max(1))
    }

    /// Shard `shard` of the `shards` that [`DatasetSpec::write_shards`] writes, alone (to
    /// write shards in parallel).
    pub fn write_shard(
        &self,
        root: &Path,
        shard: usize,
        shards: usize,
    ) -> io::Result<Vec<DatasetItem>> {
        std::fs::create_dir_all(root)?;
        let per = self.images.div_ceil(shards.clamp(1, self.images.max(1)));
        let key = format!("shard-{shard:06}.tar");
        let mut out = Vec::with_capacity(per);
        let mut tar =
            tar::Builder::new(io::BufWriter::new(std::fs::File::create(root.join(&key))?));
        for index in shard * per..((shard + 1) * per).min(self.images) {
            let (_, label) = self.item(index);
            let bytes = self.encode(index)?;
            for (suffix, data) in [
                ("jpg", bytes.as_slice()),
                ("cls", label.to_string().as_bytes()),
            ] {
                let mut header = tar::Header::new_ustar();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_mtime(1_700_000_000);
                header.set_entry_type(tar::EntryType::Regular);
                tar.append_data(&mut header, format!("{index:06}.{suffix}"), data)?;
            }
            out.push(DatasetItem {
                key: key.clone(),
                label,
                size: bytes.len() as u64,
            });
        }
        tar.into_inner()?
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()?;
        Ok(out)
    }

    /// Write the dataset under `root` in ImageFolder layout.
    pub fn write(&self, root: &Path) -> io::Result<Vec<DatasetItem>> {
        (0..self.images)
            .map(|index| self.write_image(root, index))
            .collect()
    }

    /// Image `index` of [`DatasetSpec::write`], alone (to write images in parallel).
    pub fn write_image(&self, root: &Path, index: usize) -> io::Result<DatasetItem> {
        let (key, label) = self.item(index);
        let path = root.join(&key);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let bytes = self.encode(index)?;
        std::fs::write(&path, &bytes)?;
        Ok(DatasetItem {
            key,
            label,
            size: bytes.len() as u64,
        })
    }
}

/// A picture with some structure to it: a two-colour gradient, overlapping ellipses and
/// rectangles, a smooth ripple and per-pixel noise, so decoders see realistic entropy.
/// Hues spread round the colour wheel, one per class, at full saturation.
fn class_colour(label: usize, classes: usize) -> [f32; 3] {
    let h = 6.0 * label as f32 / classes.max(1) as f32;
    let x = 1.0 - (h % 2.0 - 1.0).abs();
    let (r, g, b) = match h as u32 {
        0 => (1.0, x, 0.0),
        1 => (x, 1.0, 0.0),
        2 => (0.0, 1.0, x),
        3 => (0.0, x, 1.0),
        4 => (x, 0.0, 1.0),
        _ => (1.0, 0.0, x),
    };
    [r * 255.0, g * 255.0, b * 255.0]
}

/// A third of the way towards `colour`: the image keeps its texture and random shapes, the
/// class shows in its mean colour.
fn tint(pixels: &mut [u8], colour: [f32; 3]) {
    for (i, p) in pixels.iter_mut().enumerate() {
        *p = (*p as f32 * (2.0 / 3.0) + colour[i % 3] / 3.0) as u8;
    }
}

fn paint(rng: &mut StdRng, w: usize, h: usize, noise: f32) -> Vec<u8> {
    let colour = |rng: &mut StdRng| {
        [
            rng.random::<f32>() * 255.0,
            rng.random::<f32>() * 255.0,
            rng.random::<f32>() * 255.0,
        ]
    };
    let (c0, c1) = (colour(rng), colour(rng));
    let angle: f32 = rng.random::<f32>() * std::f32::consts::TAU;
    let (dx, dy) = (angle.cos(), angle.sin());
    let mut img = vec![0f32; w * h * 3];
    let diag = ((w * w + h * h) as f32).sqrt().max(1.0);
    for y in 0..h {
        for x in 0..w {
            let t = ((x as f32 * dx + y as f32 * dy) / diag + 1.0) / 2.0;
            let p = (y * w + x) * 3;
            for c in 0..3 {
                img[p + c] = c0[c] * (1.0 - t) + c1[c] * t;
            }
        }
    }
    let shapes = rng.random_range(4..12);
    for _ in 0..shapes {
        let col = colour(rng);
        let (cx, cy) = (
            rng.random_range(0..w.max(1)) as f32,
            rng.random_range(0..h.max(1)) as f32,
        );
        let (rx, ry) = (
            rng.random_range(4.0..(w as f32 / 3.0).max(5.0)),
            rng.random_range(4.0..(h as f32 / 3.0).max(5.0)),
        );
        let ellipse = rng.random_bool(0.5);
        let alpha = rng.random_range(0.4f32..0.9);
        for y in 0..h {
            for x in 0..w {
                let (nx, ny) = ((x as f32 - cx) / rx, (y as f32 - cy) / ry);
                let inside = if ellipse {
                    nx * nx + ny * ny <= 1.0
                } else {
                    nx.abs() <= 1.0 && ny.abs() <= 1.0
                };
                if inside {
                    let p = (y * w + x) * 3;
                    for c in 0..3 {
                        img[p + c] = img[p + c] * (1.0 - alpha) + col[c] * alpha;
                    }
                }
            }
        }
    }
    let (fx, fy) = (
        rng.random_range(0.02f32..0.2),
        rng.random_range(0.02f32..0.2),
    );
    let mut out = Vec::with_capacity(w * h * 3);
    for (i, v) in img.iter().enumerate() {
        let pixel = i / 3;
        let (x, y) = ((pixel % w) as f32, (pixel / w) as f32);
        let ripple = 12.0 * (x * fx).sin() * (y * fy).cos();
        let grain = (rng.random::<f32>() - 0.5) * 2.0 * noise;
        out.push((v + ripple + grain).clamp(0.0, 255.0) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let spec = DatasetSpec::tiny(3, 2);
        assert_eq!(spec.encode(1).unwrap(), spec.encode(1).unwrap());
        assert_ne!(
            spec.encode(1).unwrap(),
            spec.clone().with_seed(9).encode(1).unwrap()
        );
        assert_ne!(spec.encode(1).unwrap(), spec.encode(2).unwrap());
    }

    #[test]
    fn writes_image_folder_layout() {
        let dir = tempfile::tempdir().unwrap();
        let items = DatasetSpec::tiny(5, 2).write(dir.path()).unwrap();
        let keys: Vec<_> = items.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys[0], "class_000/img_000000.jpg");
        assert_eq!(keys[1], "class_001/img_000001.jpg");
        assert_eq!(items[4].label, 0);
        for item in &items {
            let bytes = std::fs::read(dir.path().join(&item.key)).unwrap();
            assert_eq!(bytes.len() as u64, item.size);
            assert_eq!(&bytes[..3], &[0xFF, 0xD8, 0xFF], "not a JPEG");
        }
    }

    #[test]
    fn imagenet_preset_lands_in_its_size_band() {
        let spec = DatasetSpec::imagenet(8, 2).with_seed(3);
        for i in 0..8 {
            let len = spec.encode(i).unwrap().len();
            assert!((90_000..=140_000).contains(&len), "image {i}: {len} bytes");
        }
    }
}
