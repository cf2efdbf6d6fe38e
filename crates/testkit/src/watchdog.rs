//! A watchdog for tests that claim "does not hang": the call runs on a thread of its own
//! and the test fails once a limit passes, instead of blocking the test binary forever.

use std::sync::mpsc;
use std::time::Duration;

/// The limit the workspace's hang tests use: generous, so only a real hang trips it on a
/// loaded 2-core CI machine.
pub const HANG_LIMIT: Duration = Duration::from_secs(60);

/// Run `call` on its own thread and return its value, or panic naming `what` if it has not
/// returned within `limit`. A panic inside `call` is re-raised here, so assertions inside it
/// fail the test as usual. A call that hangs is left behind on its thread (it cannot be
/// stopped from outside); the test fails all the same, and the process ends with it.
pub fn within<T, F>(limit: Duration, what: &str, call: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (done, result) = mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(format!("watchdog: {what}"))
        .spawn(move || {
            let _ = done.send(call());
        })
        .unwrap_or_else(|e| panic!("watchdog: cannot start a thread for {what}: {e}"));
    match result.recv_timeout(limit) {
        Ok(value) => {
            let _ = thread.join();
            value
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("watchdog: {what} ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: {what} did not return within {limit:?}: a hang")
        }
    }
}

/// [`within`] with [`HANG_LIMIT`].
pub fn no_hang<T, F>(what: &str, call: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    within(HANG_LIMIT, what, call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value() {
        assert_eq!(within(Duration::from_secs(5), "add", || 2 + 2), 4);
    }

    #[test]
    #[should_panic(expected = "did not return within")]
    fn a_hang_fails_instead_of_blocking() {
        within(Duration::from_millis(100), "sleep", || {
            std::thread::sleep(Duration::from_secs(3600))
        });
    }

    #[test]
    #[should_panic(expected = "inner assertion")]
    fn a_panic_inside_is_the_test_failure() {
        within(Duration::from_secs(5), "panic", || {
            panic!("inner assertion")
        });
    }
}
