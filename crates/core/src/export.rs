//! Hand a batch's memory to a foreign owner (Python, torch, a tensor library) without a copy.
//!
//! A [`HostTensor`] is what such an owner needs to describe memory it does not own (DLPack
//! and Python's buffer protocol ask the same): an element type, a shape, C-contiguous strides
//! and the bytes, at an address that stays put for as long as the tensor lives. Dropping it
//! hands a batch buffer back to its loader for a later batch, as dropping the
//! [`Batch`](crate::Batch)
//! would, so a consumer that lets go of its tensors keeps the loader's buffer reuse.

use crate::buffer::Buffer;

/// The element type of a [`HostTensor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// `u8`: decoded images.
    U8,
    /// `f32`: normalised tensors.
    F32,
    /// `i64`: labels and token ids (torch's `long`).
    I64,
    /// `i32`: flash-attention's `cu_seqlens`.
    I32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F32 => 4,
            DType::I64 => 8,
            DType::I32 => 4,
        }
    }

    /// The element's format character in Python's `struct` notation (the buffer protocol's).
    pub fn format(self) -> &'static str {
        match self {
            DType::U8 => "B",
            DType::F32 => "f",
            DType::I64 => "q",
            DType::I32 => "i",
        }
    }

    /// The name numpy and torch give it.
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::F32 => "float32",
            DType::I64 => "int64",
            DType::I32 => "int32",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug)]
pub(crate) enum Values {
    U8(Buffer<u8>),
    F32(Buffer<f32>),
    I64(Buffer<i64>),
    I32(Buffer<i32>),
}

/// A shape whose element count is not the buffer's length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shape {shape:?} holds {} values, the buffer {len}", shape.iter().product::<usize>())]
pub struct ShapeError {
    /// The shape asked for.
    pub shape: Vec<usize>,
    /// The values there are.
    pub len: usize,
}

/// A C-contiguous array in host memory with its element type and shape, owned by whoever
/// holds it; see the [module](self) for why.
#[derive(Debug)]
pub struct HostTensor {
    values: Values,
    shape: Vec<usize>,
}

impl HostTensor {
    fn checked(values: Values, len: usize, shape: Vec<usize>) -> Result<Self, ShapeError> {
        if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(len) {
            return Err(ShapeError { shape, len });
        }
        Ok(Self { values, shape })
    }

    /// `u8` values in `shape`.
    pub fn u8(values: Buffer<u8>, shape: Vec<usize>) -> Result<Self, ShapeError> {
        let len = values.len();
        Self::checked(Values::U8(values), len, shape)
    }

    /// `f32` values in `shape`.
    pub fn f32(values: Buffer<f32>, shape: Vec<usize>) -> Result<Self, ShapeError> {
        let len = values.len();
        Self::checked(Values::F32(values), len, shape)
    }

    /// `f32` or `u8` values in `shape`, or flat when `shape` does not hold them: a batch
    /// made by hand may disagree with its buffer, and keeps its values rather than a shape
    /// that overstates them.
    pub(crate) fn shaped_or_flat(values: Values, shape: Vec<usize>) -> Self {
        let len = match &values {
            Values::U8(v) => v.len(),
            Values::F32(v) => v.len(),
            Values::I64(v) => v.len(),
            Values::I32(v) => v.len(),
        };
        let holds = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) == Some(len);
        let shape = if holds { shape } else { vec![len] };
        Self { values, shape }
    }

    /// `i64` values in `shape`.
    pub fn i64(values: Buffer<i64>, shape: Vec<usize>) -> Result<Self, ShapeError> {
        let len = values.len();
        Self::checked(Values::I64(values), len, shape)
    }

    /// `i32` values in `shape`.
    pub fn i32(values: Buffer<i32>, shape: Vec<usize>) -> Result<Self, ShapeError> {
        let len = values.len();
        Self::checked(Values::I32(values), len, shape)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self.values {
            Values::U8(_) => DType::U8,
            Values::F32(_) => DType::F32,
            Values::I64(_) => DType::I64,
            Values::I32(_) => DType::I32,
        }
    }

    /// The shape, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Bytes from one index to the next along each dimension (C order).
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.shape.len()];
        let mut step = self.dtype().size();
        for (stride, &dim) in strides.iter_mut().zip(&self.shape).rev() {
            *stride = step;
            step *= dim;
        }
        strides
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.as_bytes().len() / self.dtype().size()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values' bytes, in native byte order.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.values {
            Values::U8(v) => v,
            Values::F32(v) => bytemuck::cast_slice(v),
            Values::I64(v) => bytemuck::cast_slice(v),
            Values::I32(v) => bytemuck::cast_slice(v),
        }
    }

    /// The values' bytes, writable: a foreign owner takes its pointer from here, once, and
    /// the address holds until the tensor is dropped.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.values {
            Values::U8(v) => v,
            Values::F32(v) => bytemuck::cast_slice_mut(v),
            Values::I64(v) => bytemuck::cast_slice_mut(v),
            Values::I32(v) => bytemuck::cast_slice_mut(v),
        }
    }

    /// The `f32` values, if that is the element type.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.values {
            Values::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The `u8` values, if that is the element type.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.values {
            Values::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The `i64` values, if that is the element type.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.values {
            Values::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The `i32` values, if that is the element type.
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.values {
            Values::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The block another owner lent for the values ([`BatchMemory`](crate::BatchMemory)),
    /// if one did: its lender finds its own object there.
    pub fn lent(&self) -> Option<&dyn crate::LentBlock> {
        match &self.values {
            Values::U8(v) => v.lent(),
            Values::F32(v) => v.lent(),
            Values::I64(v) => v.lent(),
            Values::I32(v) => v.lent(),
        }
    }

    /// The values as a `Vec` of their own, without a copy, for an owner that takes only a
    /// `Vec` (candle): the memory then leaves the loader's pool, which allocates afresh for
    /// a later batch. Values in a lent block are copied out.
    pub fn into_vec(self) -> HostVec {
        match self.values {
            Values::U8(v) => HostVec::U8(v.into_vec()),
            Values::F32(v) => HostVec::F32(v.into_vec()),
            Values::I64(v) => HostVec::I64(v.into_vec()),
            Values::I32(v) => HostVec::I32(v.into_vec()),
        }
    }
}

/// A [`HostTensor`]'s values taken out as a `Vec` of their element type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HostVec {
    /// `u8` values.
    U8(Vec<u8>),
    /// `f32` values.
    F32(Vec<f32>),
    /// `i64` values.
    I64(Vec<i64>),
    /// `i32` values.
    I32(Vec<i32>),
}

/// The values' bytes: with `bytes::Bytes::from_owner` a tensor becomes shared bytes that
/// give the buffer back to the loader when the last clone is dropped.
impl AsRef<[u8]> for HostTensor {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn strides_and_bytes_describe_the_values() {
        let t = HostTensor::f32(Buffer::from(vec![1.0f32; 24]), vec![2, 3, 4]).unwrap();
        assert_eq!(t.strides(), [48, 16, 4]);
        assert_eq!(
            (t.len(), t.as_bytes().len(), t.dtype()),
            (24, 96, DType::F32)
        );
        assert_eq!(&t.as_bytes()[..4], &1.0f32.to_ne_bytes());
        let err = HostTensor::u8(Buffer::from(vec![0u8; 5]), vec![2, 3]).unwrap_err();
        assert_eq!(err.to_string(), "shape [2, 3] holds 6 values, the buffer 5");
        assert!(
            HostTensor::i64(Buffer::from(vec![]), vec![0, 7])
                .unwrap()
                .is_empty()
        );
        assert!(HostTensor::u8(Buffer::from(vec![0u8]), vec![usize::MAX, 2]).is_err());
    }
}
