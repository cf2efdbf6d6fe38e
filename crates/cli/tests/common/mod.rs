//! What the command's tests share: the binary, a run that must succeed, generated data.
#![allow(dead_code)] // each test file uses some of it

use std::path::Path;
use std::process::{Command, Output};

/// The `loader` binary under test.
pub fn loader() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loader"))
}

/// `command` run to its end, which must be a success: its stderr is the failure report.
pub fn ok(command: &mut Command) -> Output {
    succeeded(command.output().unwrap())
}

/// A finished process's output, which must be a success's.
pub fn succeeded(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `loader gen DIR --tiny`: an ImageFolder of `images` 64x48 JPEGs in `classes` classes.
pub fn tiny_folder(dir: &Path, images: usize, classes: usize) {
    ok(loader().arg("gen").arg(dir).args([
        "--images",
        &images.to_string(),
        "--classes",
        &classes.to_string(),
        "--tiny",
    ]));
}
