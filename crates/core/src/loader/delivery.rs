//! What a batch from the engine makes of the pass: delivered (counted in the state), its
//! skipped samples carried when nothing else came, or a failed pass.

use loader_scheduler::{EngineError, Order, RawBatch};

use super::{DataLoader, start_of};
use crate::Result;

impl<T: Send + 'static, B> DataLoader<T, B> {
    /// A batch failed: this pass ends here and the next one starts the next epoch, while
    /// `state()` still points at the failed batch.
    fn fail_pass(&mut self) {
        self.engine = None;
        self.end_of_pass = true;
        self.skip_to_next_epoch = true;
    }

    pub(super) fn handle(
        &mut self,
        raw: Option<std::result::Result<RawBatch<T>, EngineError>>,
    ) -> Handled<B> {
        match raw {
            Some(Ok(mut raw)) => {
                // Handed over: what the caller keeps in its batches is its own memory, and
                // a caller that collects a whole epoch must not stall the engine.
                raw.release_window();
                let delivered = match self.config.order {
                    Order::Sampler => raw.position + raw.covers,
                    Order::AsCompleted => self.state.position + raw.planned as u64,
                };
                let (epoch, last) = (raw.epoch, raw.last_in_epoch);
                if raw.samples.is_empty() {
                    // Every sample was skipped: an empty batch would crash a model far from
                    // the cause, so none is delivered; its reports ride with the next batch.
                    self.carried_skips.append(&mut raw.skipped);
                    self.state.position = delivered;
                    if last {
                        self.state = start_of(epoch + 1);
                        return Handled::Out(None);
                    }
                    return Handled::Again;
                }
                if !self.carried_skips.is_empty() {
                    let mut skipped = std::mem::take(&mut self.carried_skips);
                    skipped.append(&mut raw.skipped);
                    raw.skipped = skipped;
                }
                match (self.stages.collate)(raw) {
                    Ok(batch) => {
                        self.state.position = delivered;
                        if last {
                            self.state = start_of(epoch + 1);
                            self.end_of_pass = true;
                        }
                        Handled::Out(Some(Ok(batch)))
                    }
                    // Not delivered, so not counted: as a failed batch, the pass ends and
                    // `state()` points at this batch, which a resume reads again.
                    Err(e) => {
                        self.fail_pass();
                        Handled::Out(Some(Err(e)))
                    }
                }
            }
            Some(Err(e)) => {
                self.fail_pass();
                Handled::Out(Some(Err(e.into())))
            }
            None => {
                self.engine = None;
                Handled::Out(None)
            }
        }
    }
}

/// What one batch from the engine makes of the pass.
pub(super) enum Handled<B> {
    /// The pass's next item: a batch, an error, or its end.
    Out(Option<Result<B>>),
    /// Nothing to deliver (every sample skipped): take the next batch.
    Again,
}
