//! The backends, one per module: each turns the [`Storage`](crate::Storage) calls into its
//! own client's calls and its own errors into [`Error`](crate::Error)s.

pub(crate) mod aws_chain;
pub mod local;
pub mod object_store;
#[cfg(feature = "opendal")]
pub mod opendal;

pub use local::LocalStore;
pub use object_store::ObjectStoreAdapter;
#[cfg(feature = "opendal")]
pub use opendal::OpendalStore;

/// A version check on a whole-object read, which no backend here makes: refused, not
/// ignored.
pub(crate) fn whole_if_match(backend: &str, key: &str) -> crate::Error {
    crate::Error::new(
        crate::ErrorKind::Unsupported,
        backend,
        key,
        "a read of a whole object checked against a version; read it as a range (0..size)",
    )
}
