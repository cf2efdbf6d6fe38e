//! The process's limit of open files, which bounds requests in flight: each holds a socket
//! (or a file), and past the limit connects and opens fail with EMFILE, which a store
//! reports as errors (or, behind some servers, as throttling) rather than as a limit.

/// Half this process's soft limit of open files (`ulimit -n`): the most requests the
/// adaptive limit lets fly, the rest being the process's own (the training framework, the
/// cache's files, a Python interpreter). `None` where there is no finite limit.
pub(crate) fn bound() -> Option<usize> {
    #[cfg(unix)]
    {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
        Some(usize::try_from(soft / 2).unwrap_or(usize::MAX))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Raise this process's soft limit of open files to its hard limit, as Go's runtime does
/// at start, and return the new soft limit (`None` if unlimited or not on Unix). For
/// programs that own their process (the `loader` command); a library leaves the choice to
/// its host, and the summary says when the limit binds. A failure leaves the limit as it
/// was.
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
