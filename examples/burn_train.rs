//! Train a small CNN with burn, its batches fetched by loader from S3: the test kit's S3
//! server behind a delay proxy (50 ms per request by default), a generated dataset whose
//! classes have colours of their own, burn's flex CPU backend with autodiff. Prints the loss
//! falling and the share of the time spent waiting for data.
//!
//! `cargo run --release -p loader-examples --features burn --example burn_train -- --steps 300 --rtt 50`

#[path = "support/served.rs"]
mod served;

use std::error::Error;
use std::sync::Arc;

use burn::data::dataloader::DataLoader as _;
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use loader_burn::{BurnLoader, ImageBatch};
use served::{CLASSES, Options, Timing};

/// Three strided convolutions, a global average and a linear layer.
#[derive(Module, Debug)]
struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    conv3: Conv2d,
    head: Linear,
}

impl Cnn {
    fn new(device: &Device) -> Self {
        let conv = |from, to| {
            Conv2dConfig::new([from, to], [3, 3])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        Self {
            conv1: conv(3, 16),
            conv2: conv(16, 32),
            conv3: conv(32, 64),
            head: LinearConfig::new(64, CLASSES).init(device),
        }
    }

    fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = relu(self.conv1.forward(images));
        let x = relu(self.conv2.forward(x));
        let x = relu(self.conv3.forward(x));
        // [N, 64, h, w] -> [N, 64]
        let x = x.mean_dim(3).mean_dim(2).flatten::<2>(1, 3);
        self.head.forward(x)
    }
}

/// Train for `options.steps` steps, epoch after epoch; returns where the time went.
fn train(options: Options) -> Result<Timing, Box<dyn Error>> {
    let served = Arc::new(served::serve(options.images, options.rtt_ms)?);
    let device = Device::default().autodiff();
    // A recipe, called again for each slice or device burn asks for.
    let recipe = {
        let served = Arc::clone(&served);
        move || served.loader(&options)
    };
    let loader = BurnLoader::images(recipe, &device)?;

    let mut model = Cnn::new(&device);
    let mut optimizer = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    // An epoch is a pass over the loader; the next starts once this one's iterator is gone.
    let mut epoch = None;
    served::train(
        options.steps,
        || {
            let next = epoch.get_or_insert_with(|| loader.iter()).next();
            if next.is_none() {
                epoch = None;
            }
            next
        },
        |ImageBatch {
             images, targets, ..
         }| {
            let logits = model.forward(images);
            let loss = loss_fn.forward(logits, targets);
            let value = loss.clone().into_scalar::<f32>();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(2e-3, model.clone(), grads);
            Ok(value)
        },
    )
}

fn main() -> Result<(), Box<dyn Error>> {
    served::run(train)
}
