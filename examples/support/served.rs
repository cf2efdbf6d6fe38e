//! What the training examples share: a learnable dataset in the test kit's S3 server behind
//! a delay proxy, their few options, and the time a run spends waiting for data.

use std::error::Error;
use std::time::{Duration, Instant};

use loader_core::{
    DataLoader, DataLoaderBuilder, Dataset, DynStorage, Fetch, LoaderOptions, Pipeline,
    SourceContext, from_url,
};
use loader_testkit::{DatasetSpec, DelayProxy, S3Server};

/// A training run's size and the store's latency.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Training steps (batches).
    pub steps: usize,
    /// Round trip the proxy adds to each request, in milliseconds.
    pub rtt_ms: u64,
    /// Images in the dataset.
    pub images: usize,
    /// Samples per batch.
    pub batch_size: usize,
    /// Requests in flight, if not the loader's default.
    pub in_flight: Option<usize>,
}

impl Options {
    /// CI's short form of a training example: a few dozen steps at 20 ms.
    #[cfg(test)]
    pub fn short() -> Self {
        Self {
            steps: 60,
            rtt_ms: 20,
            images: 256,
            batch_size: 16,
            in_flight: None,
        }
    }

    /// `--steps N --rtt MS --images N --batch-size N --in-flight N`, each optional.
    pub fn from_args() -> Result<Self, Box<dyn Error>> {
        let mut options = Self {
            steps: 300,
            rtt_ms: 50,
            images: 1_024,
            batch_size: 32,
            in_flight: None,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let value = pair.get(1).ok_or("each option takes a value")?;
            match pair[0].as_str() {
                "--steps" => options.steps = value.parse()?,
                "--rtt" => options.rtt_ms = value.parse()?,
                "--images" => options.images = value.parse()?,
                "--batch-size" => options.batch_size = value.parse()?,
                "--in-flight" => options.in_flight = Some(value.parse()?),
                other => return Err(format!("unknown option {other}").into()),
            }
        }
        Ok(options)
    }
}

/// Classes of the generated dataset.
pub const CLASSES: usize = 8;

/// Side of the square images the model sees.
pub const SIZE: usize = 48;

/// A dataset on an S3 endpoint behind the delay proxy; the servers stop when dropped.
pub struct Served {
    /// The store, through the proxy.
    store: DynStorage,
    /// Its ImageFolder listing.
    dataset: Dataset,
    /// Square `SIZE` crops as normalised `[3, SIZE, SIZE]` tensors.
    transform: Pipeline,
    _proxy: DelayProxy,
    _server: S3Server,
    _dir: tempfile::TempDir,
}

/// Write `images` tinted 64x48 JPEGs (a colour per class, so they can be learnt) and serve
/// them with `rtt_ms` of latency on every request.
pub fn serve(images: usize, rtt_ms: u64) -> Result<Served, Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    DatasetSpec::tiny(images, CLASSES)
        .learnable()
        .write(&dir.path().join("train"))?;
    let server = S3Server::start(dir.path())?;
    let proxy = DelayProxy::start(server.addr(), Duration::from_millis(rtt_ms))?;
    let store = from_url("s3://train", server.options_for(&proxy.url()))?;
    // Listed behind the loader's default timeouts and retries, as its samples are read.
    let context = SourceContext::new(store.clone(), &LoaderOptions::default());
    let dataset = Dataset::open_blocking("", &context)?;
    Ok(Served {
        store,
        dataset,
        transform: transform()?,
        _proxy: proxy,
        _server: server,
        _dir: dir,
    })
}

impl Served {
    /// The loader both examples train from: shuffled batches of `SIZE` px tensors.
    pub fn loader(&self, options: &Options) -> DataLoaderBuilder {
        let mut builder = DataLoader::builder(self.store.clone(), self.dataset.clone())
            .batch_size(options.batch_size)
            .shuffle(true)
            .seed(7)
            .transform(self.transform.clone());
        if let Some(max_in_flight) = options.in_flight {
            builder = builder.fetch(Fetch::Async { max_in_flight });
        }
        builder
    }
}

fn transform() -> Result<Pipeline, Box<dyn Error>> {
    Ok(Pipeline::builder()
        .resize(SIZE)
        .center_crop(SIZE)
        .to_tensor_normalized(
            &loader_core::decoder::IMAGENET_MEAN,
            &loader_core::decoder::IMAGENET_STD,
        )
        .build()?)
}

/// Where a run's time went: waiting for the next batch, or in the training step.
#[derive(Debug, Default)]
pub struct Timing {
    wait: Duration,
    step: Duration,
    losses: Vec<f32>,
}

impl Timing {
    /// Time `next` (a wait for data) and return what it gave.
    pub fn wait<T>(&mut self, next: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = next();
        self.wait += start.elapsed();
        out
    }

    /// Time a training step, which returns its loss.
    pub fn step(
        &mut self,
        step: impl FnOnce() -> Result<f32, Box<dyn Error>>,
    ) -> Result<(), Box<dyn Error>> {
        let start = Instant::now();
        let loss = step()?;
        self.step += start.elapsed();
        self.losses.push(loss);
        Ok(())
    }

    /// Steps done.
    pub fn steps(&self) -> usize {
        self.losses.len()
    }

    /// After a step of `epoch`: print the loss every 50 steps, and say whether the run has
    /// done its `steps`.
    pub fn after_step(&self, epoch: u64, steps: usize) -> bool {
        if self.steps().is_multiple_of(50) {
            let loss = self.losses.last().copied().unwrap_or(f32::NAN);
            println!("epoch {epoch} step {}: loss {loss:.3}", self.steps());
        }
        self.steps() >= steps
    }

    /// Mean loss of the first 5 steps (the untrained model's) and of the last tenth.
    pub fn first_and_last_loss(&self) -> (f32, f32) {
        let mean = |s: &[f32]| s.iter().sum::<f32>() / s.len().max(1) as f32;
        let n = self.losses.len();
        let last = (n / 10).max(1).min(n);
        (
            mean(&self.losses[..5.min(n)]),
            mean(&self.losses[n - last..]),
        )
    }

    /// The share of the run spent waiting for data.
    fn wait_share(&self) -> f64 {
        let total = (self.wait + self.step).as_secs_f64();
        if total == 0.0 {
            0.0
        } else {
            self.wait.as_secs_f64() / total
        }
    }

    /// Whether the loss fell clearly: the last tenth's mean below half the first steps'.
    pub fn loss_fell(&self) -> Result<(), String> {
        let (first, last) = self.first_and_last_loss();
        if last < first * 0.5 {
            Ok(())
        } else {
            Err(format!("the loss did not fall: {}", self.report()))
        }
    }

    /// The run in one paragraph.
    pub fn report(&self) -> String {
        let (first, last) = self.first_and_last_loss();
        format!(
            "{} steps: loss {first:.3} -> {last:.3} (mean of the first 5 steps, of the last tenth); \
             {:.1} s in steps, {:.1} s waiting for data: {:.1}% of the time",
            self.steps(),
            self.step.as_secs_f64(),
            self.wait.as_secs_f64(),
            100.0 * self.wait_share()
        )
    }
}

/// Train for `steps` steps, epoch after epoch: `next` gives an epoch's next batch (`None`
/// at its end; the call after starts the next epoch), timed as a wait for data; `step`
/// trains on it, timed, and returns the loss. Returns where the time went.
pub fn train<B, E: Into<Box<dyn Error>>>(
    steps: usize,
    mut next: impl FnMut() -> Option<Result<B, E>>,
    mut step: impl FnMut(B) -> Result<f32, Box<dyn Error>>,
) -> Result<Timing, Box<dyn Error>> {
    let mut timing = Timing::default();
    for epoch in 0u64.. {
        let before = timing.steps();
        while let Some(batch) = timing.wait(&mut next) {
            let batch = batch.map_err(Into::into)?;
            timing.step(|| step(batch))?;
            if timing.after_step(epoch, steps) {
                return Ok(timing);
            }
        }
        if timing.steps() == before {
            return Err(format!("epoch {epoch} gave no batch").into());
        }
    }
    Ok(timing)
}

/// An example's `main`: train with the command line's options, report, and fail unless the
/// loss fell.
pub fn run(train: fn(Options) -> Result<Timing, Box<dyn Error>>) -> Result<(), Box<dyn Error>> {
    let timing = train(Options::from_args()?)?;
    println!("{}", timing.report());
    Ok(timing.loss_fell()?)
}

#[cfg(test)]
mod tests {
    /// CI's short form of each training example (`crate::train` is the example's): the loss
    /// must halve.
    #[test]
    fn a_short_run_lowers_the_loss() {
        let timing = crate::train(super::Options::short()).expect("the run");
        timing.loss_fell().unwrap();
    }
}
