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

/// The key of the object a row's `path` names, on the store called `store` that holds
/// the Parquet file `file`: a relative path is relative to the file's folder; an absolute
/// path or URL must lie under the store's own path or URL. The error says why not.
pub(super) fn resolve(store: &str, file: &str, path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("its image's path is empty".into());
    }
    if path.starts_with('/') || path.contains("://") {
        return root_of(store)
            .and_then(|root| {
                let rest = path.strip_prefix(root.trim_end_matches('/'))?;
                rest.strip_prefix('/').map(str::to_owned)
            })
            .filter(|key| !key.is_empty())
            .ok_or_else(|| {
                format!(
                    "its image is at {path:?}, which is not on {store}: open the dataset on \
                     a store that holds the images too (a brace URL such as \
                     /data/{{out/train.parquet}} opens /data), or embed the images in the \
                     file (datasets: embed_table_storage before to_parquet)"
                )
            });
    }
    let folder = file.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut parts: Vec<&str> = folder.split('/').filter(|p| !p.is_empty()).collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!(
                        "its image's path {path:?} leads out of {store}, above {file:?}"
                    ));
                }
            }
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(format!("its image's path {path:?} names no object"));
    }
    Ok(parts.join("/"))
}

/// The path or URL a store's keys are under: a local store's directory (as its name gives
/// it, made absolute), any other store's URL.
fn root_of(store: &str) -> Option<String> {
    let local = store
        .strip_prefix("file://")
        .or_else(|| (!store.contains("://")).then_some(store));
    match local {
        Some(dir) => std::fs::canonicalize(dir)
            .ok()
            .map(|p| p.to_string_lossy().into_owned()),
        None => Some(store.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::resolve;

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
        for outside in [
            "../../x.jpg",
            "s3://bucket/other/0.jpg",
            "s3://bucket/database/0.jpg",
            "/home/me/0.jpg",
            "hf://datasets/x/0.jpg",
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
