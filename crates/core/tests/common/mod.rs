//! What the suites of datasets written by other tools (MDS, LitData) share: a fixture
//! copied, damaged and read through the whole loader under the watchdog.
#![allow(dead_code)] // each suite uses its part

use std::path::Path;

use bytes::Bytes;
use loader_core::{DataLoader, Dataset, DynStorage, ErrorPolicy, RawBatch, SampleInfo, from_url};
use loader_testkit::watchdog::{HANG_LIMIT, within};

/// The local store of `dir`.
pub fn local(dir: &Path) -> DynStorage {
    from_url(&dir.to_string_lossy(), Vec::<(String, String)>::new()).unwrap()
}

/// What reading every sample of a damaged dataset gave: samples loaded, and the errors of
/// those skipped.
pub type Outcome = (usize, Vec<String>);

/// A copy of the dataset in `fixture` with `change` made to it, opened by `open` and every
/// sample read with each failure skipped, under the watchdog: the open's error, or what
/// the samples became.
pub fn damaged(
    fixture: &Path,
    change: impl FnOnce(&Path) + Send + 'static,
    open: impl FnOnce(&DynStorage) -> Result<Dataset, String> + Send + 'static,
    what: &str,
) -> Result<Outcome, String> {
    let fixture = fixture.to_path_buf();
    within(HANG_LIMIT, what, move || {
        let dir = tempfile::tempdir().unwrap();
        for f in std::fs::read_dir(&fixture).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
        }
        change(dir.path());
        let store = local(dir.path());
        let dataset = open(&store)?;
        let l = DataLoader::builder(store, dataset)
            .map(
                |bytes: Bytes, _: &SampleInfo| Ok(bytes.len()),
                |raw: RawBatch<usize>| {
                    let errors: Vec<String> = raw.skipped.iter().map(|e| e.to_string()).collect();
                    Ok((raw.samples.len(), errors))
                },
            )
            .batch_size(4)
            .epochs(1)
            .error_policy(ErrorPolicy::Skip {
                max_failures: usize::MAX,
            })
            .build()
            .unwrap();
        let mut out: Outcome = (0, Vec::new());
        for batch in l {
            let (n, errors) = batch.map_err(|e| e.to_string())?;
            out.0 += n;
            out.1.extend(errors);
        }
        Ok(out)
    })
}
