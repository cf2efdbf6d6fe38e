//! Async dataset reads for synchronous callers.

use super::error::{Result, SourceError};

/// Run an async dataset read to completion on a fresh current-thread runtime in a scoped
/// thread: safe to call from inside another runtime, where `block_on` would panic.
pub(crate) fn block_on_own_thread<'a, T: Send, F, Fut>(make: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send + 'a,
    Fut: Future<Output = Result<T>>,
{
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("loader-dataset".into())
            .spawn_scoped(scope, || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| SourceError::Start {
                        what: "runtime",
                        source,
                    })?;
                runtime.block_on(make())
            })
            .map_err(|source| SourceError::Start {
                what: "thread",
                source,
            })?
            .join()
            .unwrap_or_else(|_| Err(SourceError::Panicked))
    })
}
