//! Arbitrary bytes as a Megatron-LM `.idx` file, for a `.bin` file of a size the input's
//! first 8 bytes choose: the documents or an error, never a panic or an allocation the
//! file's own length does not hold; documents keep their promises: none empty, their
//! tokens exactly what the `.bin` file holds, every block of them inside it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loader_core::source::megatron::parse_index;
use loader_core::tokens::Blocking;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let bin_size = u64::from_le_bytes(data[..8].try_into().unwrap()) % (1 << 40);
    let Ok(index) = parse_index(&data[8..], bin_size) else {
        return;
    };
    let documents = &index.documents;
    assert_eq!(documents.tokens() * index.dtype.size(), bin_size);
    for d in 0..documents.len() {
        let end = if d + 1 < documents.len() {
            documents.start(d + 1)
        } else {
            documents.tokens()
        };
        assert!(end > documents.start(d), "document {d} is empty");
    }
    // Overlapping blocks (Megatron's) and disjoint ones (LitData's), tails kept.
    let cuts = [1, 7, 4096].map(|len| Blocking::new(len, true).unwrap());
    for blocking in cuts.into_iter().flat_map(|b| [b, b.disjoint()]) {
        let blocks = blocking.blocks(documents.tokens());
        for i in [0, blocks / 2, blocks.saturating_sub(1)] {
            if i < blocks {
                let block = blocking.block(documents, i);
                assert!(
                    block.tokens.end <= documents.tokens() && block.tokens.start < block.tokens.end
                );
            }
        }
    }
});
