//! Generation work spread over every core, with a progress bar.

use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `count` `what`, hidden unless `show`.
pub fn bar(count: usize, what: &str, show: bool) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(count as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "generating {{bar:30}} {{pos}}/{{len}} {what}, eta {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// `work(i)` for every `i` in `0..count` on every core, ticking `bar`; the results in order.
pub fn parallel<T: Send>(
    count: usize,
    bar: &ProgressBar,
    work: impl Fn(usize) -> std::io::Result<T> + Sync,
) -> std::io::Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results: Vec<std::io::Result<Vec<(usize, T)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            return Ok(mine);
                        }
                        mine.push((i, work(i)?));
                        bar.inc(1);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a generator thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(count);
    for part in results {
        all.extend(part?);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, t)| t).collect())
}
