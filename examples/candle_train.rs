//! Train a small CNN with candle, its batches fetched by loader from S3: the test kit's S3
//! server behind a delay proxy (50 ms per request by default), a generated dataset whose
//! classes have colours of their own, candle on the CPU. Prints the loss falling and the
//! share of the time spent waiting for data.
//!
//! `cargo run --release -p loader-examples --features candle --example candle_train -- --steps 300 --rtt 50`

#[path = "support/served.rs"]
mod served;

use std::error::Error;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Optimizer, VarBuilder, VarMap};
use loader_candle::{CandleBatch, CandleLoader};
use served::{CLASSES, Options, Timing};

/// Three strided convolutions, a global average and a linear layer.
struct Cnn {
    convs: [Conv2d; 3],
    head: Linear,
}

impl Cnn {
    fn new(vb: VarBuilder<'_>) -> candle_core::Result<Self> {
        let cfg = Conv2dConfig {
            padding: 1,
            stride: 2,
            ..Default::default()
        };
        Ok(Self {
            convs: [
                candle_nn::conv2d(3, 16, 3, cfg, vb.pp("conv1"))?,
                candle_nn::conv2d(16, 32, 3, cfg, vb.pp("conv2"))?,
                candle_nn::conv2d(32, 64, 3, cfg, vb.pp("conv3"))?,
            ],
            head: candle_nn::linear(64, CLASSES, vb.pp("head"))?,
        })
    }

    fn forward(&self, images: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = images.clone();
        for conv in &self.convs {
            x = conv.forward(&x)?.relu()?;
        }
        // [N, 64, h, w] -> [N, 64]
        self.head.forward(&x.mean((2, 3))?)
    }
}

/// Train for `options.steps` steps, epoch after epoch; returns where the time went.
fn train(options: Options) -> Result<Timing, Box<dyn Error>> {
    let served = served::serve(options.images, options.rtt_ms)?;
    let device = Device::Cpu;
    let loader = served.loader(&options).build()?;
    let mut loader = CandleLoader::new(loader, &device);

    let vars = VarMap::new();
    let model = Cnn::new(VarBuilder::from_varmap(&vars, DType::F32, &device))?;
    let mut optimizer = candle_nn::AdamW::new_lr(vars.all_vars(), 2e-3)?;
    served::train(
        options.steps,
        || loader.next(),
        |CandleBatch { images, labels, .. }| {
            let logits = model.forward(&images)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &labels)?;
            optimizer.backward_step(&loss)?;
            Ok(loss.to_scalar::<f32>()?)
        },
    )
}

fn main() -> Result<(), Box<dyn Error>> {
    served::run(train)
}
