//! s3s-fs with a cheaper whole-object GET, so the in-process server costs little CPU next to
//! the client it serves on the same cores.
//!
//! s3s-fs reads an object through tokio's file API in 4 KB chunks (a blocking-pool hop per
//! chunk) and, for files written straight to disk, MD5-hashes the whole file on every GET
//! for its ETag. Profiled under a loader run, thread hand-offs and MD5 were most of the
//! server's CPU. Here a whole-object GET of such a file is one read, one body chunk, and an
//! ETag computed once per (path, size, mtime). A range GET of such a file is one
//! positioned read with the same cached ETag (s3s-fs hashed the whole file for each one:
//! `loader bench --formats shards-global` measured ~90 ms of CPU per 110 KB image read
//! from 28 MB shards, client and server together). Everything else,
//! including objects uploaded through S3 (which carry stored metadata), goes to s3s-fs
//! unchanged.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use s3s::crypto::{Checksum, Md5};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};

/// The served directory: each top-level folder is a bucket.
pub(crate) struct DirStore {
    fs: s3s_fs::FileSystem,
    root: PathBuf,
    /// Refuse every write (put, copy, delete, bucket creation), as `loader serve` does by
    /// default over a user's folder.
    read_only: bool,
    etags: Mutex<HashMap<PathBuf, (u64, SystemTime, String)>>,
}

impl DirStore {
    pub(crate) fn new(root: &Path, read_only: bool) -> std::io::Result<Self> {
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| {
            std::io::Error::other(format!("cannot serve {}: {e:?}", root.display()))
        })?;
        Ok(Self {
            fs,
            root: root.canonicalize()?,
            read_only,
            etags: Mutex::new(HashMap::new()),
        })
    }

    /// The file of `bucket/key` if the fast path may serve it: plain path segments only (so
    /// nothing outside the root), and no s3s-fs metadata stored for it.
    fn plain_file(&self, bucket: &str, key: &str) -> Option<PathBuf> {
        let relative = Path::new(bucket).join(key);
        if !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
            || bucket.starts_with('.')
        {
            return None;
        }
        let encode = |s: &str| base64_simd::URL_SAFE_NO_PAD.encode_to_string(s);
        let (b, k) = (encode(bucket), encode(key));
        for sidecar in [
            format!(".bucket-{b}.object-{k}.internal.json"),
            format!(".bucket-{b}.object-{k}.metadata.json"),
        ] {
            if self.root.join(sidecar).exists() {
                return None;
            }
        }
        Some(self.root.join(relative))
    }

    async fn get_whole(&self, path: PathBuf) -> S3Result<S3Response<GetObjectOutput>> {
        let cached = self.etags.lock().ok().and_then(|e| e.get(&path).cloned());
        // A small file whose ETag is known is read right here: a page-cache read of
        // ~100 KB takes tens of microseconds, less than the two thread wake-ups of a hop
        // to the blocking pool (a quarter of the server's CPU in a profile). Hashing a file
        // not seen yet, or reading a big one, goes to the blocking pool; a small file
        // rewritten under a running server (rare) is hashed here, a millisecond or two.
        let read = match cached {
            Some(known) if known.0 <= INLINE_READ_MAX => read_with_etag(path, Some(known)),
            cached => tokio::task::spawn_blocking(move || read_with_etag(path, cached))
                .await
                .map_err(|e| s3_error!(e, InternalError))?,
        };
        let Read {
            path,
            modified,
            bytes,
            etag,
            hashed,
        } = read.map_err(io_error)?;
        let len = bytes.len() as u64;
        if hashed && let Ok(mut etags) = self.etags.lock() {
            etags.insert(path, (len, modified, etag.clone()));
        }
        let length = i64::try_from(len).map_err(|e| s3_error!(e, InternalError))?;
        let body = s3s::Body::from(Bytes::from(bytes));
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::from(body)),
            content_length: Some(length),
            last_modified: Some(Timestamp::from(modified)),
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }
}

/// A failed file read as S3 answers it: a missing file is `NoSuchKey`, anything else (out
/// of file descriptors, say) a 503 `SlowDown` a client retries, never a 404 that would pass
/// for a missing object.
fn io_error(e: std::io::Error) -> s3s::S3Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => s3_error!(e, NoSuchKey),
        std::io::ErrorKind::PermissionDenied => s3_error!(e, AccessDenied),
        _ => s3_error!(e, SlowDown),
    }
}

impl DirStore {
    /// `range` of the plain file at `path`, with its cached (or now computed) ETag.
    async fn get_range(
        &self,
        path: PathBuf,
        range: Range,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let cached = self.etags.lock().ok().and_then(|e| e.get(&path).cloned());
        let key = path.clone();
        let read = tokio::task::spawn_blocking(move || read_range(&path, range, cached))
            .await
            .map_err(|e| s3_error!(e, InternalError))?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidInput => s3_error!(InvalidRange),
                _ => io_error(e),
            })?;
        if read.hashed
            && let Ok(mut etags) = self.etags.lock()
        {
            etags.insert(key, (read.size, read.modified, read.etag.clone()));
        }
        let length = i64::try_from(read.bytes.len()).map_err(|e| s3_error!(e, InternalError))?;
        let last = (read.start + read.bytes.len() as u64).saturating_sub(1);
        Ok(S3Response::new(GetObjectOutput {
            content_range: Some(format!("bytes {}-{last}/{}", read.start, read.size)),
            body: Some(StreamingBlob::from(s3s::Body::from(Bytes::from(
                read.bytes,
            )))),
            content_length: Some(length),
            last_modified: Some(Timestamp::from(read.modified)),
            e_tag: Some(ETag::Strong(read.etag)),
            ..Default::default()
        }))
    }
}

/// A range read of a file, with the file's ETag.
struct RangeRead {
    size: u64,
    modified: SystemTime,
    start: u64,
    bytes: Vec<u8>,
    etag: String,
    /// The ETag was computed by this read (so it is worth caching).
    hashed: bool,
}

/// `range` of the file at `path` with one positioned read. The ETag is the cached one if
/// the file is unchanged, else the MD5 of the whole file, computed once.
fn read_range(
    path: &Path,
    range: Range,
    cached: Option<(u64, SystemTime, String)>,
) -> std::io::Result<RangeRead> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    }
    let (size, modified) = (meta.len(), meta.modified()?);
    let wanted = range
        .check(size)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut bytes = vec![0; (wanted.end - wanted.start) as usize];
    file.read_exact_at(&mut bytes, wanted.start)?;
    let (etag, hashed) = match cached {
        Some((l, m, etag)) if l == size && m == modified => (etag, false),
        _ => (md5_of_file(&file)?, true),
    };
    Ok(RangeRead {
        size,
        modified,
        start: wanted.start,
        bytes,
        etag,
        hashed,
    })
}

/// The MD5 of a whole file, as s3s-fs makes ETags, read in 1 MiB blocks: a range GET of a
/// 28 MB shard must not hold the whole shard in memory to name its ETag.
fn md5_of_file(file: &std::fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut hash = Md5::new();
    let mut buf = vec![0; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hex_simd::encode_to_string(
        hash.finalize(),
        hex_simd::AsciiCase::Lower,
    ))
}

/// Files up to this size with a cached ETag are read on the async thread.
const INLINE_READ_MAX: u64 = 1 << 20;

/// A file read whole, with its ETag.
struct Read {
    path: PathBuf,
    modified: SystemTime,
    bytes: Vec<u8>,
    etag: String,
    /// The ETag was computed by this read (so it is worth caching), not taken from the cache.
    hashed: bool,
}

/// The file's bytes and modification time, with the cached ETag if the file is unchanged
/// since it was computed, or a fresh one (MD5, as s3s-fs makes them).
fn read_with_etag(
    path: PathBuf,
    cached: Option<(u64, SystemTime, String)>,
) -> std::io::Result<Read> {
    let meta = std::fs::metadata(&path)?;
    if !meta.is_file() {
        return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    }
    let bytes = std::fs::read(&path)?;
    let (len, modified) = (bytes.len() as u64, meta.modified()?);
    let (etag, hashed) = match cached {
        Some((l, m, etag)) if l == len && m == modified => (etag, false),
        _ => (
            hex_simd::encode_to_string(Md5::checksum(&bytes), hex_simd::AsciiCase::Lower),
            true,
        ),
    };
    Ok(Read {
        path,
        modified,
        bytes,
        etag,
        hashed,
    })
}

/// The S3 operations s3s-fs implements go to it, except whole-object GETs of plain files;
/// writes only while the store is not read-only.
macro_rules! delegate_to_s3s_fs {
    (read { $($op:ident($input:ident) -> $output:ident;)* }
     write { $($wop:ident($winput:ident) -> $woutput:ident;)* }) => {
        #[async_trait::async_trait]
        impl S3 for DirStore {
            $(
                async fn $op(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    self.fs.$op(req).await
                }
            )*
            $(
                async fn $wop(&self, req: S3Request<$winput>) -> S3Result<S3Response<$woutput>> {
                    if self.read_only {
                        return Err(s3_error!(AccessDenied, "this server is read-only"));
                    }
                    self.fs.$wop(req).await
                }
            )*

            async fn get_object(
                &self,
                req: S3Request<GetObjectInput>,
            ) -> S3Result<S3Response<GetObjectOutput>> {
                let input = &req.input;
                let plain = input.part_number.is_none()
                    && input.if_match.is_none()
                    && input.if_none_match.is_none();
                match (plain.then(|| self.plain_file(&input.bucket, &input.key)).flatten(), input.range) {
                    (Some(path), None) => self.get_whole(path).await,
                    (Some(path), Some(range)) => self.get_range(path, range).await,
                    (None, _) => self.fs.get_object(req).await,
                }
            }
        }
    };
}

delegate_to_s3s_fs! {
    read {
        get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
        head_bucket(HeadBucketInput) -> HeadBucketOutput;
        head_object(HeadObjectInput) -> HeadObjectOutput;
        list_buckets(ListBucketsInput) -> ListBucketsOutput;
        list_objects(ListObjectsInput) -> ListObjectsOutput;
        list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
        list_parts(ListPartsInput) -> ListPartsOutput;
    }
    write {
        create_bucket(CreateBucketInput) -> CreateBucketOutput;
        copy_object(CopyObjectInput) -> CopyObjectOutput;
        delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
        delete_object(DeleteObjectInput) -> DeleteObjectOutput;
        delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
        put_object(PutObjectInput) -> PutObjectOutput;
        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
        upload_part(UploadPartInput) -> UploadPartOutput;
        upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
        complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput;
        abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
    }
}
