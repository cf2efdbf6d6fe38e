//! Buffers that go back to their loader when dropped: batches', and samples' once collated.
//!
//! A batch of 64 ImageNet tensors is 38.5 MB, more than glibc serves from its heap, so a
//! fresh buffer per batch is a fresh mapping: ~9,400 page faults to fill it and an unmap
//! to free it, 10-15% of the loader's CPU in a profile of `loader run`. A buffer handed
//! back by a dropped batch is already mapped. A sample's 602 KB tensor, made on a decode
//! thread and freed on the consumer's, was faulted in afresh each time as well.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};

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
/// it, to hold a later batch. Reads and writes as a slice; [`into_vec`](Self::into_vec)
/// takes the `Vec` out for good.
pub struct Buffer<T> {
    vec: Vec<T>,
    home: Weak<Shelf<T>>,
}

impl<T> Buffer<T> {
    /// The values as a `Vec`; its memory is then not reused.
    pub fn into_vec(mut self) -> Vec<T> {
        std::mem::take(&mut self.vec)
    }
}

impl<T> Drop for Buffer<T> {
    fn drop(&mut self) {
        if let Some(shelf) = self.home.upgrade() {
            shelf.put(std::mem::take(&mut self.vec));
        }
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    /// A buffer that belongs to no loader: dropping it frees it.
    fn from(vec: Vec<T>) -> Self {
        Self {
            vec,
            home: Weak::new(),
        }
    }
}

impl<T> Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.vec
    }
}

impl<T> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.vec
    }
}

impl<T: Clone> Clone for Buffer<T> {
    /// A copy that belongs to no loader.
    fn clone(&self) -> Self {
        Self::from(self.vec.clone())
    }
}

impl<T: PartialEq> PartialEq for Buffer<T> {
    fn eq(&self, other: &Self) -> bool {
        self.vec == other.vec
    }
}

impl<T> std::fmt::Debug for Buffer<T> {
    /// The length only: a batch holds millions of values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} values)", self.vec.len())
    }
}

/// Where a loader's dropped batch buffers and collated sample buffers wait for reuse.
#[derive(Debug)]
pub(crate) struct BufferPool {
    f32s: Arc<Shelf<f32>>,
    u8s: Arc<Shelf<u8>>,
    /// Sample tensors, handed back by the collate to the decode threads.
    pub(crate) f32_samples: Shelf<f32>,
    /// Sample images, likewise.
    pub(crate) u8_samples: Shelf<u8>,
}

impl Default for BufferPool {
    fn default() -> Self {
        Self {
            f32s: Arc::new(Shelf::new(KEEP_BATCHES, usize::MAX)),
            u8s: Arc::new(Shelf::new(KEEP_BATCHES, usize::MAX)),
            f32_samples: Shelf::new(KEEP_SAMPLES, KEEP_SAMPLE_BYTES),
            u8_samples: Shelf::new(KEEP_SAMPLES, KEEP_SAMPLE_BYTES),
        }
    }
}

impl BufferPool {
    /// An empty f32 batch buffer with room for `len` values, reused if one is kept.
    pub(crate) fn f32s(&self, len: usize) -> (Vec<f32>, Weak<Shelf<f32>>) {
        (self.f32s.take(len), Arc::downgrade(&self.f32s))
    }

    /// An empty u8 batch buffer with room for `len` values, reused if one is kept.
    pub(crate) fn u8s(&self, len: usize) -> (Vec<u8>, Weak<Shelf<u8>>) {
        (self.u8s.take(len), Arc::downgrade(&self.u8s))
    }
}

/// A filled buffer that goes back to `home` when dropped.
pub(crate) fn homed<T>(vec: Vec<T>, home: Weak<Shelf<T>>) -> Buffer<T> {
    Buffer { vec, home }
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

    #[test]
    fn a_dropped_buffer_is_the_next_one_taken() {
        let pool = BufferPool::default();
        let (mut vec, home) = pool.f32s(1000);
        vec.resize(1000, 1.5);
        let at = vec.as_ptr();
        drop(homed(vec, home));
        assert_eq!(kept(&pool), (1, 0));
        let (next, _) = pool.f32s(1000);
        assert_eq!(next.as_ptr(), at);
        assert!(next.is_empty(), "a reused buffer starts empty");
        assert_eq!(kept(&pool), (0, 0));
    }

    #[test]
    fn a_kept_buffer_grows_for_a_bigger_batch() {
        let pool = BufferPool::default();
        let (mut vec, home) = pool.u8s(10);
        vec.resize(10, 7);
        drop(homed(vec, home));
        assert_eq!(kept(&pool), (0, 1));
        assert!(pool.u8s(4000).0.capacity() >= 4000);
        assert_eq!(kept(&pool), (0, 0), "the kept buffer was the one grown");
    }

    #[test]
    fn taken_vecs_clones_and_orphans_are_not_kept() {
        let pool = BufferPool::default();
        let (mut vec, home) = pool.f32s(8);
        vec.resize(8, 0.5);
        let buffer = homed(vec, home);
        drop(buffer.clone());
        assert_eq!(buffer.clone(), buffer);
        assert_eq!(buffer.into_vec(), vec![0.5; 8]);
        assert_eq!(kept(&pool), (0, 0));

        let (vec, home) = pool.u8s(8);
        let orphan = homed(vec, home);
        drop(pool);
        drop(orphan); // its loader is gone: freed, not kept
    }

    #[test]
    fn only_a_few_buffers_are_kept() {
        let pool = BufferPool::default();
        let buffers: Vec<_> = (0..KEEP_BATCHES + 3)
            .map(|_| {
                let (vec, home) = pool.u8s(16);
                homed(vec, home)
            })
            .collect();
        drop(buffers);
        assert_eq!(kept(&pool), (0, KEEP_BATCHES));
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
