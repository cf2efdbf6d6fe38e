//! The process's limit of open files. Every request in flight holds a socket (or a file),
//! and past the limit connects and opens fail with EMFILE, which a store reports as errors
//! (or, behind some servers, as throttling) rather than as a limit: whoever keeps many
//! requests in flight must stay under it.

/// This process's soft limit of open files (`ulimit -n`); `None` where it has no finite
/// limit (or off Unix).
pub fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Raise this process's soft limit of open files to its hard limit, as Go's runtime does
/// at start, and return the soft limit then in force (`None` if unlimited or off Unix). For
/// programs that own their process (the `loader` command, the test kit's servers); a
/// library leaves the choice to its host. A failure leaves the limit as it was.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        // The soft limit is never above the hard one (`None` is unlimited).
        if limit.current != limit.maximum {
            let raised = Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                return limit.maximum;
            }
        }
        limit.current
    }
    #[cfg(not(unix))]
    {
        None
    }
}
