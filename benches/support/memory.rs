//! A memory store holding given objects, for the benches that leave the network out.

use std::sync::Arc;

use loader_core::DynStorage;
use loader_core::storage::backend::ObjectStoreAdapter;
use loader_core::storage::backend::object_store::Flavor;
use object_store::ObjectStoreExt;

/// `images` (key, bytes) in an object_store `InMemory` behind loader's adapter.
pub fn memory_store(images: &[(String, Vec<u8>)]) -> DynStorage {
    let inner = Arc::new(object_store::memory::InMemory::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for (key, bytes) in images {
        rt.block_on(inner.put(&key.as_str().into(), bytes.clone().into()))
            .expect("put");
    }
    Arc::new(ObjectStoreAdapter::new(
        inner,
        "memory://bench",
        Flavor::Memory,
    ))
}
