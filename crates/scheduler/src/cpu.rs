//! The process's CPU time, from `/proc`.

use std::time::Duration;

/// User + system CPU time of this whole process so far (Linux; `None` elsewhere): CPU
/// per image is what decides throughput on a few shared cores, so reports show it.
pub fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces;
    // utime and stime are the 12th and 13th of them, in clock ticks (100 per second).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

#[cfg(test)]
mod cpu_tests {
    #[test]
    fn process_cpu_time_grows_with_work() {
        let before = super::process_cpu_time().expect("Linux /proc");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(150) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = super::process_cpu_time().expect("Linux /proc");
        assert!(after > before, "{before:?} -> {after:?}");
    }
}
