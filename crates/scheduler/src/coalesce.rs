//! Coalescing: neighbouring byte ranges of one object read in one request.

use crate::item::{Chunk, RecordOf, WorkItem};

/// Runs of neighbouring ranges of one object in `items` (in plan order) are read in one
/// request each: consecutive ranged items without a chunk of their own whose gap is at most
/// `gap` bytes and whose joint span is at most `max` bytes get a shared chunk; items stored
/// in a span with other samples ([`RecordOf::shared`]) share one only with items of the
/// same span.
pub(crate) fn coalesce(items: &mut [WorkItem], gap: u64, max: u64) {
    let mut start = 0;
    while start < items.len() {
        let Some(first) = items[start].span().filter(|_| items[start].chunk.is_none()) else {
            start += 1;
            continue;
        };
        let mut span = first;
        let mut end = start + 1;
        while end < items.len() {
            let next = &items[end];
            let Some(s) = next.span().filter(|_| next.chunk.is_none()) else {
                break;
            };
            let joined = span.start.min(s.start)..span.end.max(s.end);
            let near =
                s.start <= span.end.saturating_add(gap) && s.end.saturating_add(gap) >= span.start;
            // A shared span is decoded once per request only when the request is that
            // span: rows of one page share a request, neighbouring pages do not.
            let encoded = RecordOf::shared(&items[start]) || RecordOf::shared(next);
            if next.key != items[start].key
                || !near
                || joined.end - joined.start > max
                || (encoded && s != span)
            {
                break;
            }
            span = joined;
            end += 1;
        }
        if end - start > 1 {
            for (i, item) in items[start..end].iter_mut().enumerate() {
                item.chunk = Some(Chunk {
                    range: span.clone(),
                    last_use: i == end - start - 1,
                });
            }
        }
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_of_one_object_share_a_request_others_do_not() {
        let mut items = vec![
            WorkItem::ranged("a", 0..100),
            WorkItem::ranged("a", 150..200),   // gap 50
            WorkItem::ranged("a", 1000..1100), // gap 800: a new run
            WorkItem::ranged("b", 1100..1200), // another object
            WorkItem::object(0, "c"),
            WorkItem::ranged("c", 0..10),
        ];
        coalesce(&mut items, 64, 1 << 20);
        let chunks: Vec<Option<Chunk>> = items.iter().map(|i| i.chunk.clone()).collect();
        let shared = Chunk {
            range: 0..200,
            last_use: false,
        };
        assert_eq!(chunks[0], Some(shared.clone()));
        assert_eq!(
            chunks[1],
            Some(Chunk {
                last_use: true,
                ..shared
            })
        );
        assert!(chunks[2..].iter().all(Option::is_none), "{chunks:?}");
    }

    #[test]
    fn a_run_stops_at_the_size_limit() {
        let mut items: Vec<WorkItem> = (0..10)
            .map(|i| WorkItem::ranged("a", i * 10..i * 10 + 10))
            .collect();
        coalesce(&mut items, 0, 30);
        let spans: Vec<_> = items
            .iter()
            .map(|i| i.chunk.as_ref().map(|c| c.range.clone()))
            .collect();
        assert_eq!(spans[0], Some(0..30));
        assert_eq!(spans[3], Some(30..60));
        assert_eq!(spans[9], None, "a run of one needs no chunk");
    }
}
