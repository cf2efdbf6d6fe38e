//! Rows whose image is not in the file but at a path beside it: what Hugging Face's
//! `Image` feature stores (`{bytes: null, path: "images/0.jpg"}`) when a dataset built from
//! image files is written with `to_parquet`. Such a row is read as the object its path
//! names on the same store, whole.

use parquet::basic::Type as PhysicalType;
use parquet::schema::types::SchemaDescriptor;

/// The `path` leaf beside the image leaf `image` when the image column is Hugging Face's
/// struct of `bytes` and `path`.
pub(super) fn path_leaf(schema: &SchemaDescriptor, image: usize) -> Option<usize> {
    let parts = schema.column(image).path().parts().to_vec();
    let [name, bytes] = parts.as_slice() else {
        return None;
    };
    if bytes != "bytes" {
        return None;
    }
    let columns = schema.columns();
    (0..columns.len()).find(|&i| {
        columns[i].path().parts() == [name.as_str(), "path"]
            && columns[i].physical_type() == PhysicalType::BYTE_ARRAY
            && columns[i].max_rep_level() == 0
    })
}

/// What a row's path may be resolved against: the store a Parquet file is on.
#[derive(Debug)]
pub(super) struct Root {
    /// The store's name, for messages.
    store: String,
    /// The path or URL its keys are under: a local store's directory (made absolute), any
    /// other store's URL; `None` when a local directory cannot be resolved. Found when an
    /// absolute path first asks: making a directory absolute is a blocking call, which
    /// relative paths (nearly all) need not pay for on the runtime.
    under: std::sync::OnceLock<Option<String>>,
}

impl Root {
    /// The root of the store called `store` (its URL, or a local directory as given).
    pub(super) fn of(store: &str) -> Self {
        Self {
            store: store.to_owned(),
            under: std::sync::OnceLock::new(),
        }
    }

    fn under(&self) -> Option<&str> {
        self.under
            .get_or_init(|| {
                let store = &self.store;
                let local = store
                    .strip_prefix("file://")
                    .or_else(|| (!store.contains("://")).then_some(store));
                match local {
                    Some(dir) => std::fs::canonicalize(dir)
                        .ok()
                        .map(|p| p.to_string_lossy().into_owned()),
                    None => Some(store.clone()),
                }
            })
            .as_deref()
    }

    /// The key of the object a row's `path` names, for a row of the Parquet file `file`:
    /// a relative path is relative to the file's folder; an absolute path or URL must lie
    /// under the store's own path or URL. The error says why not.
    pub(super) fn resolve(&self, file: &str, path: &str) -> Result<String, String> {
        let store = &self.store;
        if path.is_empty() {
            return Err("its image's path is empty".into());
        }
        if path.starts_with('/') || path.contains("://") {
            let rest = self.under().and_then(|root| {
                path.strip_prefix(root.trim_end_matches('/'))?
                    .strip_prefix('/')
            });
            return rest.and_then(|rest| normalized("", rest)).ok_or_else(|| {
                format!(
                    "its image is at {path:?}, which is not on {store}: an absolute path \
                     or URL is read only under the store's own; write the paths relative to \
                     the Parquet file's folder, or embed the images (datasets: \
                     ds.with_format(\"arrow\").map(embed_table_storage, batched=True) \
                     before to_parquet)"
                )
            });
        }
        let folder = file.rsplit_once('/').map_or("", |(dir, _)| dir);
        normalized(folder, path).ok_or_else(|| {
            format!("its image's path {path:?} names no object of {store} beside {file:?}")
        })
    }
}

/// `path` joined to `folder`, its `.` and `..` parts resolved; `None` when it leads above
/// the store or names nothing.
fn normalized(folder: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = folder.split('/').filter(|p| !p.is_empty()).collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::Root;

    fn resolve(store: &str, file: &str, path: &str) -> Result<String, String> {
        Root::of(store).resolve(file, path)
    }

    #[test]
    fn paths_resolve_beside_the_file_or_under_the_store() {
        let s3 = "s3://bucket/data";
        assert_eq!(
            resolve(s3, "train/a.parquet", "images/0.jpg").unwrap(),
            "train/images/0.jpg"
        );
        assert_eq!(
            resolve(s3, "a.parquet", "./images/0.jpg").unwrap(),
            "images/0.jpg"
        );
        assert_eq!(
            resolve(s3, "train/a.parquet", "../images/0.jpg").unwrap(),
            "images/0.jpg"
        );
        assert_eq!(
            resolve(s3, "train/a.parquet", "s3://bucket/data/images/0.jpg").unwrap(),
            "images/0.jpg"
        );
        assert_eq!(
            resolve(s3, "train/a.parquet", "s3://bucket/data//images/./0.jpg").unwrap(),
            "images/0.jpg"
        );
        for outside in [
            "../../x.jpg",
            "s3://bucket/other/0.jpg",
            "s3://bucket/database/0.jpg",
            "/home/me/0.jpg",
            "hf://datasets/x/0.jpg",
            "s3://bucket/data/../x.jpg",
            "",
        ] {
            assert!(
                resolve(s3, "train/a.parquet", outside).is_err(),
                "{outside}"
            );
        }
        let dir = std::env::temp_dir();
        let root = std::fs::canonicalize(&dir).unwrap();
        let path = format!("{}/sub/0.jpg", root.display());
        assert_eq!(
            resolve(&dir.to_string_lossy(), "a.parquet", &path).unwrap(),
            "sub/0.jpg"
        );
        let url = format!("file://{}", dir.display());
        assert_eq!(resolve(&url, "a.parquet", &path).unwrap(), "sub/0.jpg");
    }
}
