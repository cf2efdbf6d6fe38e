//! Megatron-LM's indexed datasets (`.bin` + `.idx`, the `MMIDIDX` layout), read where they
//! lie: the `.idx` file once, then each block of tokens a ranged GET of the `.bin` file.
//! Sequences lie back to back in the `.bin` file, so a block is one byte range whatever
//! documents it crosses; the documents' boundaries come from the `.idx` file.

mod index;

pub use index::{MAGIC, MegatronIndex, parse as parse_index};
