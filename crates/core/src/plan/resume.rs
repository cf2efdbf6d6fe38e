//! A planner's part in a saved state: the stamp that says which order a state belongs to,
//! and adopting a state (the same order, or a new segment of another).

#[allow(clippy::wildcard_imports)]
use super::*;

/// Lanes and windows a resumed run takes from its state rather than choosing them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Kept {
    pub(super) lanes: Option<u32>,
    /// Each source's window, where the state says it.
    pub(super) windows: Vec<Option<usize>>,
}

impl Planner {
    /// The stamp of the order at `state`: what a checkpoint carries.
    pub(crate) fn stamp(&self, state: SamplerState) -> OrderStamp {
        let mut stamp = self.stamp.clone();
        if let (ReadOrder::Global { order, .. }, Some(m)) = (&self.order, stamp.mixture.as_mut()) {
            m.segment = order.segment().clone();
            if let Ok(Some(e)) = self.epoch_order(state.epoch) {
                m.cursors = e.cursors(state.position);
                m.stream = e.stream_position(state.position);
            }
        }
        stamp
    }

    /// Take `state` on: check it against this order, and go on in its segment, or start a
    /// new one when it was saved under another mixture and that is allowed. Nothing changes
    /// when the state is refused.
    pub(crate) fn adopt(&mut self, state: &LoaderState) -> Result<()> {
        check_position(state, None)?;
        let mut next = self.clone();
        if let Some(saved) = &state.order {
            // Lanes and windows the options leave to the loader are the run's: as its state
            // says, whatever this world size would choose.
            let kept = self.kept(saved);
            if kept != Kept::default() {
                next = Self::global(
                    &self.inputs,
                    self.dataset.clone(),
                    &self.offsets,
                    &self.options,
                    &kept,
                )?;
                next.cache = self.cache.clone();
                next.node = self.node.clone();
            }
            let fit = next.stamp.fit(saved)?;
            if let (
                ReadOrder::Global {
                    order,
                    stripe,
                    batching,
                    built,
                },
                Some(fit),
            ) = (&mut next.order, fit)
            {
                let unit = unit(*batching, stripe);
                let current = next.stamp.clone();
                let segment = match fit {
                    // The same mixture, cut into other global batches under per-stream
                    // batching: the interleave counts in the new ones from here on.
                    Fit::Same(segment) if segment.unit == unit => segment,
                    Fit::Same(_) => next_segment(saved, state, &current, unit),
                    Fit::Changed { .. } if self.new_segment => {
                        next_segment(saved, state, &current, unit)
                    }
                    Fit::Changed {
                        what,
                        saved,
                        current,
                    } => {
                        return Err(StateError::MixtureChanged {
                            what,
                            saved,
                            current,
                        }
                        .into());
                    }
                };
                *order = order.clone().with_segment(segment)?;
                *built = Arc::default();
            }
        }
        check_position(state, next.epoch_positions(state.epoch)?)?;
        *self = next;
        Ok(())
    }

    /// The lanes and windows of `saved` this loader takes on: those the options leave to the
    /// loader, of each source in both arranged in lanes over the same chunks (all of them,
    /// since a window left to the loader is chosen from the lanes); nothing when they are
    /// what this loader already reads by.
    pub(super) fn kept(&self, saved: &OrderStamp) -> Kept {
        let (Some(old), Some(own)) = (&saved.mixture, &self.stamp.mixture) else {
            return Kept::default();
        };
        let mut kept = Kept {
            lanes: None,
            windows: vec![None; own.sources.len()],
        };
        let mut same = true;
        for (i, current) in own.sources.iter().enumerate() {
            let Some(found) = old.sources.iter().find(|o| o.same_source(current)) else {
                continue;
            };
            if let (
                Arrangement::ShardLocal {
                    lanes,
                    window,
                    chunks,
                },
                Arrangement::ShardLocal {
                    lanes: own_lanes,
                    window: own_window,
                    chunks: own_chunks,
                },
            ) = (&found.arrangement, &current.arrangement)
                && chunks == own_chunks
            {
                if self.options.lanes.is_none() {
                    kept.lanes = Some(*lanes);
                    same &= lanes == own_lanes;
                }
                if self.options.shuffle_buffer.is_none() {
                    kept.windows[i] = usize::try_from(*window).ok();
                    same &= window == own_window;
                }
            }
        }
        if same {
            return Kept::default();
        }
        kept
    }
}
