//! A batch's labels as one tensor: what torch's default collate makes of them.

use loader_scheduler::{Label, SampleInfo};

use crate::buffer::Buffer;
use crate::error::CollateError;
use crate::export::HostTensor;

/// The labels of a batch's samples as one tensor: classes (or none, -1) as i64 `[N]`, sets
/// of classes as multi-hot f32 `[N, classes]`, numbers as f32 `[N]`, lists of numbers as
/// f32 `[N, K]`. A source gives each of its samples the same kind; a sample of another kind
/// or size is an error naming it, never a label read as another kind.
pub fn labels_tensor<'a>(
    samples: impl ExactSizeIterator<Item = &'a SampleInfo>,
) -> Result<HostTensor, CollateError> {
    let n = samples.len();
    let mut samples = samples.peekable();
    let Some(first) = samples.peek().map(|s| s.label.clone()) else {
        return shaped(HostTensor::i64(Buffer::from(Vec::new()), vec![0]));
    };
    let odd = |info: &SampleInfo, why: String| CollateError::Labels {
        sample: info.to_string(),
        why,
    };
    let other_kind = |info: &SampleInfo| {
        odd(
            info,
            format!(
                "its label is {}, but the batch's first sample's is {}",
                info.label.kind(),
                first.kind()
            ),
        )
    };
    match &first {
        Label::None | Label::Class(_) => {
            let mut out = Vec::with_capacity(n);
            for info in samples {
                out.push(match &info.label {
                    Label::None => -1,
                    Label::Class(c) => *c,
                    _ => return Err(other_kind(info)),
                });
            }
            shaped(HostTensor::i64(Buffer::from(out), vec![n]))
        }
        Label::Value(_) => {
            let mut out = Vec::with_capacity(n);
            for info in samples {
                match &info.label {
                    Label::Value(v) => out.push(*v),
                    _ => return Err(other_kind(info)),
                }
            }
            shaped(HostTensor::f32(Buffer::from(out), vec![n]))
        }
        Label::Values(head) => {
            let width = head.len();
            let mut out = Vec::with_capacity(n * width);
            for info in samples {
                match &info.label {
                    Label::Values(v) if v.len() == width => out.extend_from_slice(v),
                    Label::Values(v) => {
                        let why = format!(
                            "its label has {} numbers, but the batch's first sample's has {width}",
                            v.len()
                        );
                        return Err(odd(info, why));
                    }
                    _ => return Err(other_kind(info)),
                }
            }
            shaped(HostTensor::f32(Buffer::from(out), vec![n, width]))
        }
        Label::Classes(head) => {
            let of = head.of as usize;
            // The width comes from the source (its class list); one too large to allocate is
            // an error, not an abort.
            let mut out = Vec::new();
            let len = n
                .checked_mul(of)
                .filter(|&len| out.try_reserve_exact(len).is_ok());
            let Some(len) = len else {
                return Err(CollateError::Labels {
                    sample: samples.peek().map_or_else(String::new, |s| s.to_string()),
                    why: format!("{n} multi-hot rows of {of} classes do not fit in memory"),
                });
            };
            out.resize(len, 0f32);
            for (row, info) in samples.enumerate() {
                let set = match &info.label {
                    Label::Classes(set) if set.of == head.of => set,
                    Label::Classes(set) => {
                        let why = format!(
                            "its label is a set of {} classes, but the batch's first sample's of {of}",
                            set.of
                        );
                        return Err(odd(info, why));
                    }
                    _ => return Err(other_kind(info)),
                };
                for &c in set.indices.iter() {
                    // The source keeps indices below `of`; one that is not is an error
                    // rather than a write into the next sample's row.
                    match out[row * of..(row + 1) * of].get_mut(c as usize) {
                        Some(slot) => *slot = 1.0,
                        None => {
                            return Err(odd(
                                info,
                                format!("its label's class {c} is not below {of}"),
                            ));
                        }
                    }
                }
            }
            shaped(HostTensor::f32(Buffer::from(out), vec![n, of]))
        }
    }
}

fn shaped(
    tensor: Result<HostTensor, crate::export::ShapeError>,
) -> Result<HostTensor, CollateError> {
    tensor.map_err(|e| CollateError::Other(Box::new(e)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use loader_scheduler::ClassSet;

    use super::*;

    fn infos(labels: Vec<Label>) -> Vec<SampleInfo> {
        labels
            .into_iter()
            .enumerate()
            .map(|(i, label)| SampleInfo {
                index: i as u64,
                key: format!("k{i}").into(),
                label,
                ..SampleInfo::default()
            })
            .collect()
    }

    fn tensor(labels: Vec<Label>) -> Result<HostTensor, CollateError> {
        labels_tensor(infos(labels).iter())
    }

    #[test]
    fn each_kind_batches_as_torch_collates_it() {
        let t = tensor(vec![Label::Class(3), Label::None]).unwrap();
        assert_eq!((t.as_i64().unwrap(), t.shape()), (&[3, -1][..], &[2][..]));
        let t = tensor(vec![Label::Value(0.5), Label::Value(-1.0)]).unwrap();
        assert_eq!(
            (t.as_f32().unwrap(), t.shape()),
            (&[0.5, -1.0][..], &[2][..])
        );
        let t = tensor(vec![
            Label::Values([1.0, 2.0].as_slice().into()),
            Label::Values([3.0, 4.0].as_slice().into()),
        ])
        .unwrap();
        assert_eq!(
            (t.as_f32().unwrap(), t.shape()),
            (&[1.0, 2.0, 3.0, 4.0][..], &[2, 2][..])
        );
        let set = |i: &[u32]| {
            Label::Classes(ClassSet {
                indices: i.into(),
                of: 3,
            })
        };
        let t = tensor(vec![set(&[0, 2]), set(&[]), set(&[1])]).unwrap();
        assert_eq!(
            (t.as_f32().unwrap(), t.shape()),
            (&[1., 0., 1., 0., 0., 0., 0., 1., 0.][..], &[3, 3][..])
        );
        assert_eq!(tensor(vec![]).unwrap().shape(), [0]);
    }

    #[test]
    fn a_label_of_another_kind_or_size_is_an_error_naming_the_sample() {
        let err = |labels| tensor(labels).unwrap_err().to_string();
        assert_eq!(
            err(vec![Label::Class(1), Label::Value(0.5)]),
            "sample 1 (key \"k1\", epoch 0): its label is a number, but the batch's first sample's is a class"
        );
        assert!(
            err(vec![
                Label::Values([1.0].as_slice().into()),
                Label::Values([1.0, 2.0].as_slice().into()),
            ])
            .contains("its label has 2 numbers, but the batch's first sample's has 1")
        );
        let bad = Label::Classes(ClassSet {
            indices: [5].as_slice().into(),
            of: 3,
        });
        assert!(err(vec![bad]).contains("its label's class 5 is not below 3"));
    }
}
