//! Feed batches to a model: here a linear probe in ndarray on zero-copy views of the
//! batch buffer (no tensor library needed).
//!
//! `cargo run --release -p loader-examples --example train`

use loader_core::{DataLoader, Pipeline};
use ndarray::{Array2, Axis};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    loader_testkit::DatasetSpec::tiny(48, 3).write(dir.path())?;
    let (store, dataset) = loader_core::open(&dir.path().to_string_lossy())?;
    let classes = dataset.classes().len();
    let transform = Pipeline::builder()
        .resize(16)
        .center_crop(16)
        .to_tensor_normalized(
            &loader_core::decoder::IMAGENET_MEAN,
            &loader_core::decoder::IMAGENET_STD,
        )
        .build()?;
    let mut loader = DataLoader::builder(store, dataset)
        .batch_size(12)
        .shuffle(true)
        .transform(transform)
        .build()?;

    let features = 3 * 16 * 16;
    let mut weights = Array2::<f32>::zeros((features, classes));
    for epoch in 0..3 {
        let mut correct = 0;
        let mut total = 0;
        for batch in &mut loader {
            let batch = batch?;
            let x = batch.ndarray_f32().ok_or("not an f32 batch")?;
            let x = x.to_shape((batch.len(), features))?;
            let labels = batch.labels.as_i64().ok_or("labels are not classes")?;
            let logits = x.dot(&weights);
            for (row, &label) in logits.axis_iter(Axis(0)).zip(labels) {
                let predicted = row
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or(0, |p| p.0);
                correct += usize::from(predicted as i64 == label);
                total += 1;
            }
            // A perceptron step towards each sample's class.
            for (sample, &label) in x.axis_iter(Axis(0)).zip(labels) {
                let mut column = weights.column_mut(label as usize);
                column.scaled_add(0.01, &sample);
            }
        }
        println!("epoch {epoch}: {correct}/{total} correct before the update");
    }
    Ok(())
}
