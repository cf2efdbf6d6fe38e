//! This process's threads by name, for tests that check a component joins every thread it
//! starts.

use std::io;
use std::time::{Duration, Instant};

/// The names of this process's live threads that start with `prefix` (Linux: read from
/// /proc/self/task, where a name is cut to 15 bytes).
pub fn threads_named(prefix: &str) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        // A thread that ends while the directory is read has no comm any more: not live.
        if let Ok(name) = std::fs::read_to_string(task?.path().join("comm")) {
            let name = name.trim_end();
            if name.starts_with(prefix) {
                names.push(name.to_owned());
            }
        }
    }
    Ok(names)
}

/// [`threads_named`] once none are left or `limit` has passed, whichever comes first: a
/// joined thread lingers in /proc for a moment after `join` returns, while the kernel reaps
/// it, so a count taken right after a join can see it.
pub fn settled_threads_named(prefix: &str, limit: Duration) -> io::Result<Vec<String>> {
    let start = Instant::now();
    loop {
        let names = threads_named(prefix)?;
        if names.is_empty() || start.elapsed() >= limit {
            return Ok(names);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_named_thread_is_seen_while_it_runs_and_gone_once_joined() {
        let prefix = "tk-thr-test"; // with "-0", within the 15 bytes /proc keeps
        let (started, running) = std::sync::mpsc::channel::<()>();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("{prefix}-0"))
            .spawn(move || {
                // The thread names itself as it starts: say so only once it runs.
                let _ = started.send(());
                let _ = stopped.recv();
            })
            .unwrap();
        running.recv().unwrap();
        assert_eq!(threads_named(prefix).unwrap(), [format!("{prefix}-0")]);
        drop(stop);
        thread.join().unwrap();
        let left = settled_threads_named(prefix, Duration::from_secs(30)).unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}
