//! Arbitrary strings as object keys: validation never panics, and a key it accepts can
//! never name anything outside a store's root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_storage::{MAX_KEY_LEN, key_problem};

fuzz_target!(|key: &str| {
    if key_problem(key).is_none() {
        assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN);
        assert!(!key.starts_with('/') && !key.contains('\0') && !key.contains('\\'));
        let mut depth = 0usize;
        for segment in key.split('/') {
            assert!(!segment.is_empty() && segment != "." && segment != "..");
            depth += 1;
        }
        // Joined onto a root, the path stays below it.
        let root = std::path::Path::new("/root/of/store");
        let joined = root.join(key);
        assert!(joined.starts_with(root), "{key:?} escapes to {}", joined.display());
        assert_eq!(joined.components().count(), root.components().count() + depth);
    }
    let _ = loader_storage::check_prefix("fuzz", key);
});
