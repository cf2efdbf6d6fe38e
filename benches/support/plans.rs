//! The plans of the engine benches: endless epochs over numbered keys, straight to the
//! engine without a sampler.

use std::sync::Arc;

use loader_core::scheduler::{BatchPlan, WorkItem};

/// The key of item `i`.
pub fn key(i: usize) -> String {
    format!("k/{i:06}")
}

/// Endless epochs of batches of `batch` over `items` keys. The keys are made once, as a
/// sampler over a dataset shares them: the engine's cost is measured, not `format!`'s.
pub fn endless(items: usize, batch: usize) -> impl Iterator<Item = BatchPlan> + Send + 'static {
    let keys: Arc<[Arc<str>]> = (0..items).map(|i| key(i).into()).collect();
    let batches = (items / batch) as u64;
    let batch = batch as u64;
    (0u64..).flat_map(move |epoch| {
        let keys = Arc::clone(&keys);
        (0..batches).map(move |b| {
            let items = (b * batch..(b + 1) * batch)
                .map(|i| WorkItem::object(i, Arc::clone(&keys[i as usize])))
                .collect();
            BatchPlan::new(epoch, b * batch, items, b + 1 == batches)
        })
    })
}
