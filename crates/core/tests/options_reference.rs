#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

//! `docs/options.md` is the options' declarations rendered (`LoaderOptions::reference`): an
//! option added, removed or reworded without regenerating it fails here.
//! `LOADER_REGENERATE=1 cargo test -p loader-core --test options_reference` rewrites it.

use std::path::Path;

use loader_core::LoaderOptions;

#[test]
fn docs_options_md_is_the_declarations_rendered() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/options.md");
    let rendered = LoaderOptions::reference();
    if std::env::var_os("LOADER_REGENERATE").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == rendered,
        "docs/options.md is not the options' declarations rendered: run \
         LOADER_REGENERATE=1 cargo test -p loader-core --test options_reference"
    );
    // Every key is in it, and no cell runs past what a reader takes in.
    for key in LoaderOptions::keys() {
        assert!(
            rendered.contains(&format!("| `{}` |", key.key)),
            "{}",
            key.key
        );
    }
    for line in rendered.lines().filter(|l| l.starts_with('|')) {
        for cell in line.split(" | ") {
            assert!(
                cell.len() <= 300,
                "a cell of {} characters: {cell}",
                cell.len()
            );
        }
    }
}
