//! Following the commitlog as the broker's reput service does: which queues the messages of a
//! stretch of commitlog bytes went to, so a dispatch pass looks only at the queues that moved.
//!
//! The bytes are read while the broker writes them: a message may be torn (its TOTALSIZE
//! written, the rest not yet), so a message is only taken when its magic is a message magic and
//! its field lengths add up to its TOTALSIZE; the walk stops there and the caller reads again
//! from that message later.

use std::collections::HashMap;

use crate::unit::{
    be_i32, be_i64, store_timestamp, topic_and_properties, MAGIC_V1, MAGIC_V2, MIN_UNIT_SIZE,
    QUEUE_OFFSET_POSITION,
};

/// The magic of the filler after a commitlog file's last message (spec §2.1).
pub const BLANK_MAGIC: i32 = -875_286_124;
const QUEUE_ID_POSITION: usize = 12;

/// Why a walk stopped where it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The bytes ran out inside or before a message header: read on from `consumed`.
    More,
    /// Zeros where the next message would start: nothing written there yet.
    Unwritten,
    /// The file's filler (BLANK magic): the next message is at the next file's start.
    Blank,
    /// A message header that does not add up (written right now, or damaged).
    Torn,
}

/// What [`walk`] found.
#[derive(Debug)]
pub struct Walk<'a> {
    /// Bytes of whole messages from the start of the data (where the next walk starts).
    pub consumed: usize,
    /// Messages walked.
    pub messages: usize,
    pub stop: Stop,
    /// `(topic, queue id) ->` what the messages walked of that queue say.
    pub queues: HashMap<(&'a [u8], i32), Moved>,
}

/// One queue's messages in a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// The max queue offset + 1.
    pub end: i64,
    /// Where the queue's first message walked starts (from the start of the data).
    pub first: usize,
    /// That message's store timestamp.
    pub first_time: i64,
}

/// The topic of a whole message (its field lengths add up to its size, the topic not empty).
fn topic(unit: &[u8]) -> Option<&[u8]> {
    topic_and_properties(unit).map(|(topic, _)| topic).filter(|t| !t.is_empty())
}

/// Walk the messages of `data` (which starts at a message boundary) until the bytes run out or
/// something other than a whole message starts.
pub fn walk(data: &[u8]) -> Walk<'_> {
    let mut queues: HashMap<(&[u8], i32), Moved> = HashMap::new();
    let (mut pos, mut messages) = (0usize, 0usize);
    let stop = loop {
        let (Some(size), Some(magic)) = (be_i32(data, pos), be_i32(data, pos + 4)) else {
            break Stop::More;
        };
        if magic == BLANK_MAGIC {
            break Stop::Blank;
        }
        if size == 0 && magic == 0 {
            break Stop::Unwritten;
        }
        if (magic != MAGIC_V1 && magic != MAGIC_V2) || i64::from(size) < MIN_UNIT_SIZE {
            break Stop::Torn;
        }
        let Some(unit) = data.get(pos..pos + size as usize) else {
            break Stop::More;
        };
        let (Some(name), Some(queue_id), Some(offset), Some(time)) = (
            topic(unit),
            be_i32(unit, QUEUE_ID_POSITION),
            be_i64(unit, QUEUE_OFFSET_POSITION),
            store_timestamp(unit),
        ) else {
            break Stop::Torn;
        };
        let moved = queues.entry((name, queue_id)).or_insert(Moved { end: 0, first: pos, first_time: time });
        moved.end = moved.end.max(offset.saturating_add(1));
        pos += size as usize;
        messages += 1;
    };
    Walk { consumed: pos, messages, stop, queues }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::testing::{encode, Unit};
    use crate::unit::{BORNHOST_V6_FLAG, STOREHOST_V6_FLAG};

    fn message(topic: &[u8], queue_id: i32, queue_offset: i64, sys_flag: i32, v2: bool) -> Vec<u8> {
        let mut m = encode(&Unit { topic, queue_offset, sys_flag, v2, properties: b"a\x01b\x02", ..Unit::default() });
        m[QUEUE_ID_POSITION..QUEUE_ID_POSITION + 4].copy_from_slice(&queue_id.to_be_bytes());
        m
    }

    #[test]
    fn the_queues_of_every_message_shape_with_their_max_offsets() {
        let mut data = Vec::new();
        let mut n = 0;
        for sys_flag in [0, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, BORNHOST_V6_FLAG | STOREHOST_V6_FLAG] {
            for v2 in [false, true] {
                for (q, o) in [(0, 5), (1, 9), (0, 7), (0, 6)] {
                    data.extend(message(b"T", q, o, sys_flag, v2));
                    n += 1;
                }
            }
        }
        data.extend(message(b"Other", 3, 0, 0, false));
        let end = data.len();
        data.extend([0u8; 64]);
        let w = walk(&data);
        assert_eq!((w.consumed, w.messages, w.stop), (end, n + 1, Stop::Unwritten));
        let firsts: Vec<_> = [b"Other".as_slice(), b"T", b"T"]
            .iter()
            .zip([3, 0, 1])
            .map(|(t, q)| w.queues[&(*t, q)].first)
            .collect();
        let one = message(b"T", 0, 5, 0, false).len();
        assert_eq!(firsts[1..], [0, one]); // each queue's first message
        assert_eq!(firsts[0], end - message(b"Other", 3, 0, 0, false).len());
        for m in w.queues.values() {
            assert_eq!(store_timestamp(&data[m.first..]), Some(m.first_time));
        }
        let mut got: Vec<_> = w.queues.into_iter().map(|(k, m)| (k, m.end)).collect();
        got.sort();
        assert_eq!(got, vec![((&b"Other"[..], 3), 1), ((&b"T"[..], 0), 8), ((&b"T"[..], 1), 10)]);
    }

    #[test]
    fn a_torn_message_stops_the_walk_before_it_and_a_cut_asks_for_more() {
        let first = message(b"T", 0, 0, 0, false);
        let second = message(b"T", 1, 0, 0, false);
        let whole = [first.clone(), second.clone()].concat();
        for cut in 0..whole.len() {
            let w = walk(&whole[..cut]);
            let want = if cut < first.len() { 0 } else { first.len() };
            assert_eq!(w.consumed, want, "cut at {cut}");
            assert_eq!(w.stop, if cut == first.len() { Stop::More } else { w.stop });
        }
        // the size written, the rest still zeros: a header that does not add up
        let mut torn = first.clone();
        torn.extend((second.len() as i32).to_be_bytes());
        torn.extend(vec![0u8; second.len() - 4]);
        let w = walk(&torn);
        assert_eq!((w.consumed, w.stop), (first.len(), Stop::Torn));
        // any byte of the second message damaged: no panic, and the walk ends on a boundary
        for at in 0..second.len() {
            let mut bad = whole.clone();
            bad[first.len() + at] ^= 0xff;
            let w = walk(&bad);
            assert!([first.len(), whole.len()].contains(&w.consumed), "{at}: {}", w.consumed);
        }
    }

    #[test]
    fn the_blank_filler_ends_the_file() {
        let mut data = message(b"T", 0, 0, 0, false);
        let end = data.len();
        data.extend(64i32.to_be_bytes());
        data.extend(BLANK_MAGIC.to_be_bytes());
        data.extend([0u8; 56]);
        let w = walk(&data);
        assert_eq!((w.consumed, w.messages, w.stop), (end, 1, Stop::Blank));
        assert_eq!(walk(&[]).stop, Stop::More);
    }
}
