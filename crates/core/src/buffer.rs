//! Buffers that go back to their loader when dropped: batches', and samples' once collated.
//!
//! A batch of 64 ImageNet tensors is 38.5 MB, more than glibc serves from its heap, so a
//! fresh buffer per batch is a fresh mapping: ~9,400 page faults to fill it and an unmap
//! to free it, 10-15% of the loader's CPU in a profile of `loader run`. A buffer handed
//! back by a dropped batch is already mapped. A sample's 602 KB tensor, made on a decode
//! thread and freed on the consumer's, was faulted in afresh each time as well.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};

use bytemuck::Pod;

use crate::memory::{self, BatchMemory, LentBlock, MemoryError};

/// Buffers kept for reuse, of one element type, up to a count and a size.
#[derive(Debug)]
pub(crate) struct Shelf<T> {
    kept: Mutex<Vec<Vec<T>>>,
    max_count: usize,
    max_bytes: usize,
}

impl<T> Shelf<T> {
    fn new(max_count: usize, max_bytes: usize) -> Self {
        Self {
            kept: Mutex::new(Vec::new()),
            max_count,
            max_bytes,
        }
    }

    /// Keep `vec`'s memory if there is room; its values are dropped.
    pub(crate) fn put(&self, mut vec: Vec<T>) {
        if vec.capacity() == 0 {
            return;
        }
        vec.clear();
        // A poisoned lock only means a thread panicked while pushing; the list of
        // buffers is still whole.
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = |v: &Vec<T>| v.capacity() * size_of::<T>();
        if kept.len() < self.max_count
            && kept.iter().map(bytes).sum::<usize>() + bytes(&vec) <= self.max_bytes
        {
            kept.push(vec);
        }
    }

    /// An empty buffer with room for `len` values, reused if one is kept.
    pub(crate) fn take(&self, len: usize) -> Vec<T> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut vec = kept.unwrap_or_default();
        vec.reserve_exact(len);
        vec
    }
}

/// Batch buffers kept per element type: enough for a consumer that holds a few batches at
/// once (e.g. one being copied to a GPU while the next is filled); more are freed.
const KEEP_BATCHES: usize = 4;

/// Sample buffers kept per element type: a batch's worth comes back at each collate, and
/// the decode threads take them while the next batch is made. Bounded in bytes too, for
/// large images.
const KEEP_SAMPLES: usize = 256;
const KEEP_SAMPLE_BYTES: usize = 64 << 20;

/// The values of a batch: a `Vec` that, when dropped, goes back to the loader that filled
/// it, to hold a later batch; or a block another owner lent ([`BatchMemory`]), which goes
/// back to that owner. Reads and writes as a slice; [`into_vec`](Self::into_vec) takes the
/// values out for good.
pub struct Buffer<T> {
    store: Store<T>,
}

enum Store<T> {
    Own {
        vec: Vec<T>,
        home: Weak<Shelf<T>>,
    },
    /// `len` values at the start of `block`, which [`memory::check`] found aligned for `T`
    /// and large enough.
    Lent {
        block: Box<dyn LentBlock>,
        len: usize,
    },
}

impl<T: Pod> Buffer<T> {
    /// The values as a `Vec`: without a copy when the loader owns them (their memory is then
    /// not reused), copied out of a lent block.
    pub fn into_vec(mut self) -> Vec<T> {
        match &mut self.store {
            Store::Own { vec, .. } => std::mem::take(vec),
            Store::Lent { .. } => self.to_vec(),
        }
    }

    /// The lent block holding the values, when another owner lent it.
    pub fn lent(&self) -> Option<&dyn LentBlock> {
        match &self.store {
            Store::Own { .. } => None,
            Store::Lent { block, .. } => Some(&**block),
        }
    }
}

impl<T> Buffer<T> {
    fn len(&self) -> usize {
        match &self.store {
            Store::Own { vec, .. } => vec.len(),
            Store::Lent { len, .. } => *len,
        }
    }
}

impl<T> Drop for Buffer<T> {
    fn drop(&mut self) {
        if let Store::Own { vec, home } = &mut self.store
            && let Some(shelf) = home.upgrade()
        {
            shelf.put(std::mem::take(vec));
        }
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    /// A buffer that belongs to no loader: dropping it frees it.
    fn from(vec: Vec<T>) -> Self {
        Self {
            store: Store::Own {
                vec,
                home: Weak::new(),
            },
        }
    }
}

impl<T: Pod> Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.store {
            Store::Own { vec, .. } => vec,
            // Checked aligned and large enough when lent: the cast cannot fail.
            Store::Lent { block, len } => {
                bytemuck::try_cast_slice(&block.bytes()[..len * size_of::<T>()]).unwrap_or(&[])
            }
        }
    }
}

impl<T: Pod> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.store {
            Store::Own { vec, .. } => vec,
            Store::Lent { block, len } => {
                bytemuck::try_cast_slice_mut(&mut block.bytes_mut()[..*len * size_of::<T>()])
                    .unwrap_or(&mut [])
            }
        }
    }
}

impl<T: Pod> Clone for Buffer<T> {
    /// A copy that belongs to no loader.
    fn clone(&self) -> Self {
        Self::from(self.to_vec())
    }
}

impl<T: Pod + PartialEq> PartialEq for Buffer<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T> std::fmt::Debug for Buffer<T> {
    /// The length only: a batch holds millions of values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lent = match self.store {
            Store::Lent { .. } => ", lent",
            Store::Own { .. } => "",
        };
        write!(f, "Buffer({} values{lent})", self.len())
    }
}

/// A batch buffer being filled by the collate, sample after sample.
pub(crate) struct Filling<T> {
    store: Store<T>,
    /// Values written to a lent block so far.
    filled: usize,
}

impl<T: Pod> Filling<T> {
    /// Append `values`; a lent block with no room left is an error, never a write past its
    /// end.
    pub(crate) fn push(&mut self, values: &[T]) -> Result<(), MemoryError> {
        match &mut self.store {
            Store::Own { vec, .. } => vec.extend_from_slice(values),
            Store::Lent { block, len } => {
                let size = size_of::<T>();
                let end = self.filled + values.len();
                if end > *len {
                    return Err(MemoryError::TooSmall {
                        bytes: end * size,
                        got: *len * size,
                    });
                }
                block.bytes_mut()[self.filled * size..end * size]
                    .copy_from_slice(bytemuck::cast_slice(values));
                self.filled = end;
            }
        }
        Ok(())
    }

    /// The filled buffer: a lent block holds what was written to it.
    pub(crate) fn finish(self) -> Buffer<T> {
        let store = match self.store {
            Store::Lent { block, .. } => Store::Lent {
                block,
                len: self.filled,
            },
            own => own,
        };
        Buffer { store }
    }
}

/// Where a loader's dropped batch buffers and collated sample buffers wait for reuse, and
/// the lender of batch memory when one was given.
pub(crate) struct BufferPool {
    f32s: Arc<Shelf<f32>>,
    u8s: Arc<Shelf<u8>>,
    /// Sample tensors, handed back by the collate to the decode threads.
    pub(crate) f32_samples: Shelf<f32>,
    /// Sample images, likewise.
    pub(crate) u8_samples: Shelf<u8>,
    lender: Lender,
}

/// The batch memory a builder was given, shared with the collates it made before it was
/// given (so the order of the builder's calls does not matter).
pub(crate) type Lender = Arc<Mutex<Option<Arc<dyn BatchMemory>>>>;

impl Default for BufferPool {
    fn default() -> Self {
        Self::lent_by(Lender::default())
    }
}

impl BufferPool {
    /// A pool whose batches come from `lender` once it holds a lender.
    pub(crate) fn lent_by(lender: Lender) -> Self {
        Self {
            f32s: Arc::new(Shelf::new(KEEP_BATCHES, usize::MAX)),
            u8s: Arc::new(Shelf::new(KEEP_BATCHES, usize::MAX)),
            f32_samples: Shelf::new(KEEP_SAMPLES, KEEP_SAMPLE_BYTES),
            u8_samples: Shelf::new(KEEP_SAMPLES, KEEP_SAMPLE_BYTES),
            lender,
        }
    }

    fn lender(&self) -> Option<Arc<dyn BatchMemory>> {
        self.lender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// An empty f32 batch buffer with room for `len` values.
    pub(crate) fn f32s(&self, len: usize) -> Result<Filling<f32>, MemoryError> {
        self.filling(&self.f32s, len)
    }

    /// An empty u8 batch buffer with room for `len` values.
    pub(crate) fn u8s(&self, len: usize) -> Result<Filling<u8>, MemoryError> {
        self.filling(&self.u8s, len)
    }

    /// From the lender when there is one, else reused from `shelf` if one is kept.
    fn filling<T: Pod>(
        &self,
        shelf: &Arc<Shelf<T>>,
        len: usize,
    ) -> Result<Filling<T>, MemoryError> {
        let store = match self.lender() {
            Some(lender) => {
                let block = lender.block(len.saturating_mul(size_of::<T>()))?;
                memory::check::<T>(&*block, len)?;
                Store::Lent { block, len }
            }
            None => Store::Own {
                vec: shelf.take(len),
                home: Arc::downgrade(shelf),
            },
        };
        Ok(Filling { store, filled: 0 })
    }
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("lent", &self.lender().is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn kept(pool: &BufferPool) -> (usize, usize) {
        (
            pool.f32s.kept.lock().unwrap().len(),
            pool.u8s.kept.lock().unwrap().len(),
        )
    }

    fn filled<T: Pod>(mut filling: Filling<T>, values: &[T]) -> Buffer<T> {
        filling.push(values).unwrap();
        filling.finish()
    }

    #[test]
    fn a_dropped_buffer_is_the_next_one_taken() {
        let pool = BufferPool::default();
        let buffer = filled(pool.f32s(1000).unwrap(), &[1.5; 1000]);
        let at = buffer.as_ptr();
        drop(buffer);
        assert_eq!(kept(&pool), (1, 0));
        let next = pool.f32s(1000).unwrap().finish();
        assert_eq!(next.as_ptr(), at);
        assert!(next.is_empty(), "a reused buffer starts empty");
        assert_eq!(kept(&pool), (0, 0));
    }

    #[test]
    fn a_kept_buffer_grows_for_a_bigger_batch() {
        let pool = BufferPool::default();
        drop(filled(pool.u8s(10).unwrap(), &[7; 10]));
        assert_eq!(kept(&pool), (0, 1));
        let Store::Own { vec, .. } = &pool.u8s(4000).unwrap().store else {
            panic!("no lender: the loader's own buffer")
        };
        assert!(vec.capacity() >= 4000);
        assert_eq!(kept(&pool), (0, 0), "the kept buffer was the one grown");
    }

    #[test]
    fn taken_vecs_clones_and_orphans_are_not_kept() {
        let pool = BufferPool::default();
        let buffer = filled(pool.f32s(8).unwrap(), &[0.5; 8]);
        drop(buffer.clone());
        assert_eq!(buffer.clone(), buffer);
        assert_eq!(buffer.into_vec(), vec![0.5; 8]);
        assert_eq!(kept(&pool), (0, 0));

        let orphan = pool.u8s(8).unwrap().finish();
        drop(pool);
        drop(orphan); // its loader is gone: freed, not kept
    }

    #[test]
    fn only_a_few_buffers_are_kept() {
        let pool = BufferPool::default();
        let buffers: Vec<_> = (0..KEEP_BATCHES + 3)
            .map(|_| pool.u8s(16).unwrap().finish())
            .collect();
        drop(buffers);
        assert_eq!(kept(&pool), (0, KEEP_BATCHES));
    }

    /// Blocks carved from a `Vec<u64>` (aligned to 8), `skew` bytes in; counts those
    /// given back.
    struct Blocks {
        skew: usize,
        short: usize,
        back: Arc<std::sync::atomic::AtomicUsize>,
    }

    struct Block {
        words: Vec<u64>,
        skew: usize,
        len: usize,
        back: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl LentBlock for Block {
        fn bytes(&self) -> &[u8] {
            &bytemuck::cast_slice(&self.words)[self.skew..self.skew + self.len]
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            &mut bytemuck::cast_slice_mut(&mut self.words)[self.skew..self.skew + self.len]
        }
    }

    impl Drop for Block {
        fn drop(&mut self) {
            self.back.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl BatchMemory for Blocks {
        fn block(&self, bytes: usize) -> Result<Box<dyn LentBlock>, MemoryError> {
            let len = bytes - self.short;
            Ok(Box::new(Block {
                words: vec![0; (self.skew + len).div_ceil(8)],
                skew: self.skew,
                len,
                back: Arc::clone(&self.back),
            }))
        }
    }

    fn lent_pool(skew: usize, short: usize) -> (BufferPool, Arc<std::sync::atomic::AtomicUsize>) {
        let back = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let blocks = Blocks {
            skew,
            short,
            back: Arc::clone(&back),
        };
        let lender: Lender = Arc::new(Mutex::new(Some(Arc::new(blocks) as Arc<dyn BatchMemory>)));
        (BufferPool::lent_by(lender), back)
    }

    #[test]
    fn a_lent_block_holds_the_batch_and_goes_back_to_its_lender() {
        let (pool, back) = lent_pool(0, 0);
        let mut filling = pool.f32s(6).unwrap();
        filling.push(&[1.0, 2.0, 3.0]).unwrap();
        filling.push(&[4.0, 5.0, 6.0]).unwrap();
        let buffer = filling.finish();
        assert_eq!(&*buffer, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(buffer.lent().is_some_and(|b| b.bytes().len() == 24));
        assert_eq!(
            buffer.clone().into_vec(),
            buffer.to_vec(),
            "copied out of the block"
        );
        assert!(
            buffer.clone().lent().is_none(),
            "a clone is the loader's own"
        );
        drop(buffer);
        assert_eq!(back.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            kept(&pool),
            (0, 0),
            "a lent block is not kept by the loader"
        );
        let err = pool.f32s(2).unwrap().push(&[0.0; 3]).unwrap_err();
        assert!(
            matches!(err, MemoryError::TooSmall { bytes: 12, got: 8 }),
            "{err}"
        );
    }

    #[test]
    fn an_empty_batch_needs_no_alignment() {
        let (pool, _) = lent_pool(1, 0);
        assert!(pool.f32s(0).unwrap().finish().is_empty());
    }

    #[test]
    fn a_short_or_misaligned_block_is_refused() {
        let (pool, _) = lent_pool(0, 4);
        let err = pool.f32s(4).err().unwrap();
        assert!(
            matches!(err, MemoryError::TooSmall { bytes: 16, got: 12 }),
            "{err}"
        );
        let (pool, _) = lent_pool(2, 0);
        let err = pool.f32s(4).err().unwrap();
        assert!(
            matches!(err, MemoryError::Misaligned { align: 4, .. }),
            "{err}"
        );
        assert!(pool.u8s(4).is_ok(), "bytes need no alignment");
    }

    #[test]
    fn sample_shelves_are_bounded_in_count_and_bytes() {
        let shelf = Shelf::<f32>::new(3, 1000);
        for _ in 0..5 {
            shelf.put(vec![1.0; 100]); // 400 bytes each: two fit in 1000
        }
        assert_eq!(shelf.kept.lock().unwrap().len(), 2);
        let reused = shelf.take(50);
        assert!(reused.is_empty() && reused.capacity() >= 100);
        let small = Shelf::<u8>::new(3, usize::MAX);
        for _ in 0..5 {
            small.put(vec![0; 8]);
        }
        assert_eq!(small.kept.lock().unwrap().len(), 3);
    }
}
