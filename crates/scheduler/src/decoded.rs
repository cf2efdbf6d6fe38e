//! The decoded-bytes bound: what decoded samples and finished batches hold, counted
//! from a sample's arrival until its batch is dropped.

use std::sync::Arc;

/// The bytes a decoded sample holds (its buffers), for the decoded-bytes bound.
pub type Weigh<T> = Arc<dyn Fn(&T) -> usize + Send + Sync>;

/// Decoded samples and finished batches not yet handed over, in bytes, against a bound.
pub(crate) struct Decoded<T> {
    pub(crate) weigh: Weigh<T>,
    limit: u64,
    held: Arc<std::sync::atomic::AtomicU64>,
    pub(crate) released: Arc<tokio::sync::Notify>,
    /// Items admitted whose results have not arrived: they will hold about the mean each.
    coming: u64,
    /// Samples weighed so far and their total weight, for the mean.
    weighed: (u64, u64),
}

impl<T> Decoded<T> {
    pub(crate) fn new(weigh: Weigh<T>, limit: u64) -> Self {
        Self {
            weigh,
            limit,
            held: Arc::default(),
            released: Arc::default(),
            coming: 0,
            weighed: (0, 0),
        }
    }

    /// Whether what is held, with what the admitted items will add, reaches the bound:
    /// counting only what has arrived would let the item window admit batches whose samples
    /// then land far over it.
    pub(crate) fn over(&self) -> bool {
        if self.weighed.0 == 0 {
            // Nothing weighed yet, so nothing is known of what a sample holds (a Python
            // transform's may be 64 MiB): one batch at a time until the first arrive.
            return self.coming > 0;
        }
        let mean = self.weighed.1 / self.weighed.0;
        self.held.load(std::sync::atomic::Ordering::Relaxed) + self.coming * mean >= self.limit
    }

    pub(crate) fn admitted(&mut self, items: usize) {
        self.coming += items as u64;
    }

    pub(crate) fn arrived(&mut self, weight: Option<u64>) {
        self.coming = self.coming.saturating_sub(1);
        if let Some(bytes) = weight {
            self.weighed = (self.weighed.0 + 1, self.weighed.1 + bytes);
            self.held
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(crate) fn share(&self, bytes: u64) -> DecodedShare {
        DecodedShare {
            bytes,
            held: Arc::clone(&self.held),
            released: Arc::clone(&self.released),
        }
    }
}

/// A batch's decoded bytes, counted against the bound until it is dropped.
#[derive(Debug)]
pub(crate) struct DecodedShare {
    bytes: u64,
    held: Arc<std::sync::atomic::AtomicU64>,
    released: Arc<tokio::sync::Notify>,
}

impl Drop for DecodedShare {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::Relaxed);
        self.released.notify_one();
    }
}
