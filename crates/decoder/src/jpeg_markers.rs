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
