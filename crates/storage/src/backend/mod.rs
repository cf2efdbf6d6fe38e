//! The backends, one per module: each turns the [`Storage`](crate::Storage) calls into its
//! own client's calls and its own errors into [`Error`](crate::Error)s.

pub mod local;
pub mod object_store;
#[cfg(feature = "opendal")]
pub mod opendal;

pub use local::LocalStore;
pub use object_store::ObjectStoreAdapter;
#[cfg(feature = "opendal")]
pub use opendal::OpendalStore;
