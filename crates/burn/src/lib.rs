//! burn trains straight from loader: [`BurnLoader`] implements burn's
//! [`DataLoader`](burn_core::data::dataloader::DataLoader) trait, so a training loop (or
//! burn's `Learner`) that takes burn's own loader takes this one, with batches fetched
//! concurrently from S3, HTTP or disk and handed to burn as tensors on the device asked for.
//!
//! ```
//! use burn_core::data::dataloader::DataLoader as _;
//! use burn_tensor::Device;
//! use loader_burn::{BurnLoader, ImageBatch};
//! use loader_core::{DataLoader, Dataset, Pipeline, from_url};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! loader_testkit::DatasetSpec::tiny(12, 3).write(dir.path())?;
//! let store = from_url(&dir.path().to_string_lossy(), Vec::<(String, String)>::new())?;
//! let dataset = Dataset::image_folder_blocking(&*store)?;
//!
//! // How to build the loader: the adapter builds it again for `to_device` and `slice`.
//! let train = BurnLoader::images(
//!     move || {
//!         DataLoader::builder(store.clone(), dataset.clone())
//!             .batch_size(5)
//!             .shuffle(true)
//!             .transform(Pipeline::imagenet_eval())
//!     },
//!     &Device::default(),
//! )?;
//! assert_eq!(train.num_items(), 12);
//!
//! for epoch in 0..2 {
//!     // Each `iter()` is one epoch, its own shuffle.
//!     for batch in train.iter() {
//!         let ImageBatch { images, targets, .. } = batch?;
//!         assert_eq!(images.dims()[1..], [3, 224, 224]);
//!         assert_eq!(targets.dims(), [images.dims()[0]]);
//!     }
//!     assert_eq!(train.state()?.epoch, epoch + 1);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Rooms: `error` (what the adapter reports) at the bottom, `convert` (a batch as burn
//! tensors), and `loader` (burn's `DataLoader` trait over a loader: epochs, slices, devices,
//! state).
//!
//! The images reach burn without a copy where the backend takes the bytes as they are (burn's
//! flex CPU backend does): the tensor holds the batch's buffer, which goes back to the loader
//! to hold a later batch when burn drops the last tensor using it.

mod convert;
mod error;
mod loader;

pub use convert::{Convert, ImageBatch, Images, float_tensor, images_tensor, targets_tensor};
pub use error::Error;
pub use loader::{BurnLoader, Recipe};
