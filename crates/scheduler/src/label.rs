//! What a sample is labelled with: a class, several classes, numbers, or nothing.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A sample's label, as its source gives it; the collate makes a batch's labels tensor of
/// them (class indices as i64 `[N]`, class sets as multi-hot f32 `[N, classes]`, values as
/// f32 `[N]` or `[N, K]`).
#[derive(Debug, Clone, Default)]
pub enum Label {
    /// Its source gives no label (batched as -1).
    #[default]
    None,
    /// A class index (or any integer label).
    Class(i64),
    /// Several classes at once (multi-label).
    Classes(ClassSet),
    /// One number: a regression target.
    Value(f32),
    /// A fixed-length list of numbers: a soft label, a box, an embedding.
    Values(Arc<[f32]>),
}

/// The classes of a multi-label sample, among `of` classes in all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClassSet {
    /// Class indices, each below `of`, ascending, without repeats.
    pub indices: Arc<[u32]>,
    /// How many classes the dataset has: the multi-hot vector's length.
    pub of: u32,
}

impl Label {
    /// The class index, if this is a single class.
    pub fn class(&self) -> Option<i64> {
        match self {
            Label::Class(c) => Some(*c),
            _ => None,
        }
    }

    /// What kind of label this is, in words, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Label::None => "no label",
            Label::Class(_) => "a class",
            Label::Classes(_) => "a set of classes",
            Label::Value(_) => "a number",
            Label::Values(_) => "a list of numbers",
        }
    }
}

impl From<i64> for Label {
    fn from(class: i64) -> Self {
        Label::Class(class)
    }
}

/// Values compare by their bits, so a label equals itself (NaN included) and `Eq` holds.
impl PartialEq for Label {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Label::None, Label::None) => true,
            (Label::Class(a), Label::Class(b)) => a == b,
            (Label::Classes(a), Label::Classes(b)) => a == b,
            (Label::Value(a), Label::Value(b)) => a.to_bits() == b.to_bits(),
            (Label::Values(a), Label::Values(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b.iter())
                        .all(|(x, y)| x.to_bits() == y.to_bits())
            }
            _ => false,
        }
    }
}

impl Eq for Label {}

/// A label equals an integer as a batch's labels tensor holds it: a class as its index, no
/// label as -1; other kinds equal no integer.
impl PartialEq<i64> for Label {
    fn eq(&self, other: &i64) -> bool {
        match self {
            Label::None => *other == -1,
            Label::Class(c) => c == other,
            _ => false,
        }
    }
}

impl Hash for Label {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Label::None => {}
            Label::Class(c) => c.hash(state),
            Label::Classes(s) => s.hash(state),
            Label::Value(v) => v.to_bits().hash(state),
            Label::Values(v) => {
                v.len().hash(state);
                v.iter().for_each(|x| x.to_bits().hash(state));
            }
        }
    }
}
