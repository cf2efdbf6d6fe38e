//! How an option's value is read from the text a front end passes, and written back: one
//! [`OptionValue`] impl per type an option holds.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use loader_sampler::{Batching, StopRule};
use loader_scheduler::{Fetch, Hedge, Order};
use loader_storage::layer::CachePolicy;

use super::{ShardOrder, WeighBy};
use crate::source::LabelKind;

/// A value an option holds: read from the text a front end passes, and written back.
pub trait OptionValue: Sized {
    /// The value of `text`, or why it is not one.
    fn parse(text: &str) -> Result<Self, String>;
    /// The value as [`parse`](Self::parse) reads it.
    fn show(&self) -> String;
}

impl OptionValue for bool {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(format!("{text:?} is not true or false")),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

macro_rules! integer_value {
    ($($ty:ty),*) => {$(
        impl OptionValue for $ty {
            fn parse(text: &str) -> Result<Self, String> {
                text.replace('_', "")
                    .parse()
                    .map_err(|e| format!("{text:?} is not a whole number of at most {}: {e}", <$ty>::MAX))
            }
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
integer_value!(usize, u64, u32, i64);

impl<T: OptionValue> OptionValue for Option<T> {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "" | "none" | "off" => Ok(None),
            _ => T::parse(text).map(Some),
        }
    }
    fn show(&self) -> String {
        self.as_ref().map_or_else(|| "none".into(), T::show)
    }
}

impl OptionValue for PathBuf {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text))
    }
    fn show(&self) -> String {
        self.display().to_string()
    }
}

/// Seconds, as a decimal number.
impl OptionValue for Duration {
    fn parse(text: &str) -> Result<Self, String> {
        text.parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| format!("{text:?} is not a number of seconds"))
    }
    fn show(&self) -> String {
        format!("{}", self.as_secs_f64())
    }
}

/// `start..end`.
impl OptionValue for Range<usize> {
    fn parse(text: &str) -> Result<Self, String> {
        let (start, end) = text
            .split_once("..")
            .ok_or_else(|| format!("{text:?} is not a range start..end"))?;
        Ok(usize::parse(start.trim())?..usize::parse(end.trim())?)
    }
    fn show(&self) -> String {
        format!("{}..{}", self.start, self.end)
    }
}

impl OptionValue for ShardOrder {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "local" => Ok(ShardOrder::Local),
            "global" => Ok(ShardOrder::Global),
            _ => Err(format!("{text:?}: local or global")),
        }
    }
    fn show(&self) -> String {
        match self {
            ShardOrder::Local => "local",
            ShardOrder::Global => "global",
        }
        .into()
    }
}

/// `first_exhausted`, `all_exhausted`, `all_exhausted_without_replacement`,
/// `samples_per_epoch:N`, `cycle_forever`.
impl OptionValue for StopRule {
    fn parse(text: &str) -> Result<Self, String> {
        let lower = text.trim().to_ascii_lowercase().replace('-', "_");
        if let Some(n) = lower.strip_prefix("samples_per_epoch") {
            let n = n.trim_start_matches([':', '=']).trim();
            return match u64::parse(n)? {
                0 => Err("samples_per_epoch must be at least 1".into()),
                n => Ok(StopRule::SamplesPerEpoch(n)),
            };
        }
        match lower.as_str() {
            "first_exhausted" => Ok(StopRule::FirstExhausted),
            "all_exhausted" => Ok(StopRule::AllExhausted),
            "all_exhausted_without_replacement" => Ok(StopRule::AllExhaustedWithoutReplacement),
            "cycle_forever" => Ok(StopRule::CycleForever),
            _ => Err(format!(
                "{text:?}: first_exhausted, all_exhausted, all_exhausted_without_replacement, \
                 samples_per_epoch:N or cycle_forever"
            )),
        }
    }
    fn show(&self) -> String {
        match self {
            StopRule::FirstExhausted => "first_exhausted".into(),
            StopRule::AllExhausted => "all_exhausted".into(),
            StopRule::AllExhaustedWithoutReplacement => "all_exhausted_without_replacement".into(),
            StopRule::SamplesPerEpoch(n) => format!("samples_per_epoch:{n}"),
            StopRule::CycleForever => "cycle_forever".into(),
        }
    }
}

/// `mixed` or `per_stream`.
impl OptionValue for Batching {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "mixed" => Ok(Batching::Mixed),
            "per_stream" => Ok(Batching::PerStream),
            _ => Err(format!("{text:?}: mixed or per_stream")),
        }
    }
    fn show(&self) -> String {
        match self {
            Batching::Mixed => "mixed",
            Batching::PerStream => "per_stream",
        }
        .into()
    }
}

/// `samples` or `documents`.
impl OptionValue for WeighBy {
    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "samples" => Ok(WeighBy::Samples),
            "documents" => Ok(WeighBy::Documents),
            _ => Err(format!("{text:?}: samples or documents")),
        }
    }
    fn show(&self) -> String {
        match self {
            WeighBy::Samples => "samples",
            WeighBy::Documents => "documents",
        }
        .into()
    }
}

impl OptionValue for Order {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().replace('-', "_").as_str() {
            "sampler" => Ok(Order::Sampler),
            "as_completed" => Ok(Order::AsCompleted),
            _ => Err(format!("{text:?}: sampler or as_completed")),
        }
    }
    fn show(&self) -> String {
        match self {
            Order::AsCompleted => "as_completed",
            _ => "sampler",
        }
        .into()
    }
}

impl OptionValue for CachePolicy {
    fn parse(text: &str) -> Result<Self, String> {
        text.parse()
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// `adaptive`, `adaptive:CAP`, `async:N`, `threads:N`, `sequential:N`.
impl OptionValue for Fetch {
    fn parse(text: &str) -> Result<Self, String> {
        let lower = text.to_ascii_lowercase();
        let (kind, n) = match lower.split_once(':') {
            Some((kind, n)) => (kind.trim().to_owned(), Some(usize::parse(n.trim())?)),
            None => (lower.trim().to_owned(), None),
        };
        let need =
            |n: Option<usize>| n.ok_or_else(|| format!("{text:?}: give the count, e.g. {kind}:16"));
        match kind.as_str() {
            "adaptive" => Ok(Fetch::Adaptive {
                max_in_flight: n.unwrap_or(loader_scheduler::DEFAULT_IN_FLIGHT_CAP),
            }),
            "async" => Ok(Fetch::Async {
                max_in_flight: need(n)?,
            }),
            "threads" => Ok(Fetch::Threads { threads: need(n)? }),
            "sequential" => Ok(Fetch::Sequential { workers: need(n)? }),
            _ => Err(format!(
                "{text:?}: adaptive[:CAP], async:N, threads:N or sequential:N"
            )),
        }
    }
    fn show(&self) -> String {
        match *self {
            Fetch::Adaptive { max_in_flight }
                if max_in_flight == loader_scheduler::DEFAULT_IN_FLIGHT_CAP =>
            {
                "adaptive".into()
            }
            Fetch::Adaptive { max_in_flight } => format!("adaptive:{max_in_flight}"),
            Fetch::Async { max_in_flight } => format!("async:{max_in_flight}"),
            Fetch::Threads { threads } => format!("threads:{threads}"),
            Fetch::Sequential { workers } => format!("sequential:{workers}"),
        }
    }
}

/// `stalls` ([`Hedge::stalls_only`]), `tail` ([`Hedge::default`]); `off` is `none`.
impl OptionValue for Hedge {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "stalls" => Ok(Hedge::stalls_only()),
            "tail" => Ok(Hedge::default()),
            _ => Err(format!("{text:?}: stalls, tail or off")),
        }
    }
    fn show(&self) -> String {
        if *self == Hedge::stalls_only() {
            "stalls".into()
        } else if *self == Hedge::default() {
            "tail".into()
        } else {
            "custom".into()
        }
    }
}

impl OptionValue for String {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(text.trim().to_owned())
    }
    fn show(&self) -> String {
        self.clone()
    }
}

/// Names separated by commas (`a,b`), or a JSON list (`["a, b", "c"]`) when a name holds a
/// comma; empty for none.
impl OptionValue for Vec<String> {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.starts_with('[') {
            return serde_json::from_str(text)
                .map_err(|e| format!("{text:?} is not a JSON list of strings: {e}"));
        }
        Ok(text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect())
    }
    fn show(&self) -> String {
        if self.iter().any(|s| s.contains(',') || s.trim() != s) {
            serde_json::to_string(self).unwrap_or_default()
        } else {
            self.join(",")
        }
    }
}

/// `class`, `multi` or `values`.
impl OptionValue for LabelKind {
    fn parse(text: &str) -> Result<Self, String> {
        LabelKind::from_name(text.trim()).ok_or_else(|| {
            format!(
                "{text:?}: give \"class\" (an index or a name), \"multi\" (several classes) \
                 or \"values\" (numbers)"
            )
        })
    }
    fn show(&self) -> String {
        match self {
            LabelKind::Class => "class",
            LabelKind::MultiLabel => "multi",
            LabelKind::Values => "values",
        }
        .into()
    }
}
