//! A light walk over a JPEG's marker segments, for the two facts zune-jpeg does not give:
//! the chroma sampling factors, and whether the data reaches its end-of-image marker.

/// What the walk found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Markers {
    /// (horizontal, vertical) sampling factors of each frame component.
    pub sampling: Vec<(u8, u8)>,
    /// Whether an end-of-image marker follows the last start-of-scan: if not, the file
    /// was cut short.
    pub complete: bool,
}

const SOS: u8 = 0xDA;
const EOI: u8 = 0xD9;

pub(crate) fn inspect(bytes: &[u8]) -> Markers {
    Markers {
        sampling: frame_sampling(bytes).unwrap_or_default(),
        complete: reaches_eoi(bytes),
    }
}

/// Sampling factors from the first frame header (SOF0..SOF15 but DHT, JPG and DAC).
fn frame_sampling(bytes: &[u8]) -> Option<Vec<(u8, u8)>> {
    let mut at = 2; // after SOI
    loop {
        while *bytes.get(at)? != 0xFF {
            at += 1;
        }
        while *bytes.get(at)? == 0xFF {
            at += 1; // fill bytes
        }
        let marker = *bytes.get(at)?;
        at += 1;
        if marker == SOS || marker == EOI {
            return None;
        }
        if (0xD0..=0xD7).contains(&marker) || marker == 0x01 {
            continue; // markers without a length
        }
        let len = usize::from(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]));
        let segment = bytes.get(at + 2..at + len)?;
        if (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker) {
            let count = usize::from(*segment.get(5)?);
            return (0..count)
                .map(|i| segment.get(6 + 3 * i + 1).map(|hv| (hv >> 4, hv & 0x0F)))
                .collect();
        }
        at += len;
    }
}

/// An EOI after the last SOS. Entropy-coded data stuffs every 0xFF with 0x00, so neither
/// marker can appear inside it; a thumbnail's markers come before the main image's scans.
fn reaches_eoi(bytes: &[u8]) -> bool {
    let last_sos = bytes.windows(2).rposition(|w| w == [0xFF, SOS]);
    let last_eoi = bytes.windows(2).rposition(|w| w == [0xFF, EOI]);
    matches!((last_sos, last_eoi), (Some(s), Some(e)) if e > s)
}

/// Sampling layouts zune-jpeg 0.5 decodes correctly; others (vertical 4x, 4x2) come out
/// garbled, so they go to the jpeg-decoder crate instead.
pub(crate) fn zune_handles(sampling: &[(u8, u8)]) -> bool {
    sampling
        .iter()
        .all(|hv| matches!(hv, (1, 1) | (2, 1) | (1, 2) | (2, 2) | (4, 1)))
}

const APP14: u8 = 0xEE;
const COM: u8 = 0xFE;

/// Whether a marker opens a segment that only carries metadata (APP0..APP15, COM): one
/// that libjpeg skips over when it is damaged, and so may we.
fn is_metadata(marker: u8) -> bool {
    (0xE0..=0xEF).contains(&marker) || marker == COM
}

/// The file with the header damage that libjpeg-turbo (and so PIL and torchvision) reads
/// past removed, or `None` when there is none (the usual case: nothing is copied). What
/// libjpeg tolerates with a warning and zune-jpeg refuses: bytes between markers, a
/// metadata segment whose length is under 2, an Adobe APP14 segment too short to hold its
/// transform flag (libjpeg treats it as an unknown APP14). Only what precedes the first
/// scan is touched; damage there or elsewhere is left for the decoder to report.
pub(crate) fn repair(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut changed = false;
    let mut at = 2; // after SOI
    out.extend_from_slice(bytes.get(..2)?);
    loop {
        let start = at;
        while *bytes.get(at)? != 0xFF {
            at += 1;
        }
        changed |= at > start; // bytes between segments
        while *bytes.get(at)? == 0xFF {
            at += 1; // fill bytes, which every decoder skips
        }
        let marker = *bytes.get(at)?;
        at += 1;
        if marker == 0x00 {
            changed = true; // a stuffed zero outside any scan: garbage
            continue;
        }
        if marker == SOS || marker == EOI {
            if !changed {
                return None;
            }
            out.extend_from_slice(&[0xFF, marker]);
            out.extend_from_slice(bytes.get(at..)?);
            return Some(out);
        }
        if (0xD0..=0xD7).contains(&marker) || marker == 0x01 {
            out.extend_from_slice(&[0xFF, marker]);
            continue;
        }
        let len = usize::from(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]));
        if len < 2 {
            if !is_metadata(marker) {
                return None;
            }
            changed = true;
            at += 2; // libjpeg skips the length and looks for the next marker
            continue;
        }
        let segment = bytes.get(at..at + len)?;
        if marker == APP14 && segment[2..].starts_with(b"Adobe") && len < 14 {
            changed = true;
            at += len;
            continue;
        }
        out.extend_from_slice(&[0xFF, marker]);
        out.extend_from_slice(segment);
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sound_header_is_not_copied() {
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 1, 2, 0xFF, SOS, 0, 0, 0xFF, EOI,
        ];
        assert_eq!(repair(&jpeg), None);
    }

    #[test]
    fn garbage_and_broken_metadata_are_dropped() {
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 1, 2, b'x', b'y', 0xFF, 0xE1, 0x00, 0x00, 0xFF,
            APP14, 0x00, 0x08, b'A', b'd', b'o', b'b', b'e', 0, 0xFF, SOS, 9, 9,
        ];
        assert_eq!(
            repair(&jpeg).unwrap(),
            [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 1, 2, 0xFF, SOS, 9, 9]
        );
    }

    #[test]
    fn cut_headers_are_left_to_the_decoder() {
        assert_eq!(repair(&[0xFF, 0xD8, b'x', 0xFF, 0xE0, 0x00]), None);
    }
}
