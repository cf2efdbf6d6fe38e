//! Why the in-flight limit is where it is: a fact of the metrics the adaptive limit sets.

use std::fmt;

/// Why the in-flight limit last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LimitReason {
    /// The limit set by the user (`Fetch::Async`), or the adaptive start.
    #[default]
    Start,
    /// Requests waited for a slot while the CPU stage had room: raised.
    Starved,
    /// The store answered with throttling (429, 503 SlowDown): lowered.
    Throttled,
    /// More than 5% of requests failed or were retried: lowered.
    Errors,
    /// The run used far less than the limit for a while: lowered to twice its use.
    Unused,
    /// Held at the cap or at the byte budget over the mean request size.
    Bound,
    /// Held at half the process's open-files limit (`ulimit -n`): each request in flight
    /// holds a socket, and past the limit new connections fail.
    OpenFiles,
}

impl fmt::Display for LimitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitReason::Start => "start",
            LimitReason::Starved => "requests waited while the CPU had room",
            LimitReason::Throttled => "the store throttled",
            LimitReason::Errors => "errors rose",
            LimitReason::Unused => "far under the limit",
            LimitReason::Bound => "at the cap or the byte budget",
            LimitReason::OpenFiles => {
                "at half the open-files limit; raise `ulimit -n` for more in flight"
            }
        })
    }
}
