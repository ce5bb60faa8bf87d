//! The key index items of a batch of stored units (spec §2.1, §6.4, §6.8): for each unit, the
//! keys upstream indexes it under -- `UNIQ_KEY` unless blank, and every token of
//! `KEYS.split(" ")` unless `KEYS` is blank, each once, in the order Java's `HashSet` iterates
//! them -- and the index hash of `topic#key`.
//!
//! Properties are read as `string2messageProperties` reads them: items cut at `\x02`, the name
//! up to the first `\x01`, an empty value dropped, a later item replacing an earlier one. A key
//! is hashed over its UTF-16 code units (a byte is one unit for ASCII keys). A unit whose key
//! values are not valid UTF-8 is returned as `slow`: Python decodes it with replacement
//! characters (as Java does) and indexes it.

use crate::java::{hash_ascii, hash_units, hashset_bucket, hashset_table, is_java_whitespace, pow31, tiered_hash};
use crate::unit::{properties, unit_slice};
use std::collections::HashSet;

const ITEM_SEPARATOR: u8 = 2;
const UNIQ_NAME: &[u8] = b"UNIQ_KEY\x01";
const KEYS_NAME: &[u8] = b"KEYS\x01";
/// Above this many keys a message's duplicates are found with a hash set, below by comparing.
const SMALL_SET: usize = 16;

/// The items of a batch: row `r` is a key of unit `msg[r]` with index hash `hash[r]`; a unit's
/// rows are consecutive, units in batch order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Items {
    pub msg: Vec<i64>,
    pub hash: Vec<i32>,
    /// units whose key values are not valid UTF-8 (indexed by the caller)
    pub slow: Vec<i64>,
    /// units whose field lengths do not add up to their size (not indexed)
    pub inconsistent: usize,
}

/// One key of a message: its bytes, `String.hashCode` and length in UTF-16 units.
#[derive(Clone, Copy)]
struct Key<'a> {
    bytes: &'a [u8],
    hash: u32,
    units: u32,
}

/// `UNIQ_KEY` and `KEYS` of a property section: the last non-empty value of each.
fn key_values(props: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let (mut uniq, mut keys) = (None, None);
    // the separators found with memchr (SIMD), far cheaper than a byte-by-byte split
    let mut begin = 0;
    for end in memchr::memchr_iter(ITEM_SEPARATOR, props).chain(std::iter::once(props.len())) {
        let item = &props[begin..end];
        begin = end + 1;
        if item.len() > UNIQ_NAME.len() && item.starts_with(UNIQ_NAME) {
            uniq = Some(&item[UNIQ_NAME.len()..]);
        } else if item.len() > KEYS_NAME.len() && item.starts_with(KEYS_NAME) {
            keys = Some(&item[KEYS_NAME.len()..]);
        }
    }
    (uniq, keys)
}

/// `StringUtils.isBlank` of valid UTF-8 (`None` when the bytes are not valid UTF-8).
fn is_blank(value: &[u8]) -> Option<bool> {
    if value.is_ascii() {
        return Some(value.iter().all(|&b| is_java_whitespace(u32::from(b))));
    }
    let text = std::str::from_utf8(value).ok()?;
    Some(text.chars().all(|c| is_java_whitespace(c as u32)))
}

/// The key a token is (hashed over UTF-16 units; the token is valid UTF-8: its value was).
fn key(bytes: &[u8]) -> Key<'_> {
    if bytes.is_ascii() {
        return Key { bytes, hash: hash_ascii(bytes), units: bytes.len() as u32 };
    }
    // the value was checked as UTF-8, and a token cut at ASCII spaces stays valid
    let text = std::str::from_utf8(bytes).unwrap_or_default();
    let mut units = 0u32;
    let hash = hash_units(0, text.encode_utf16().inspect(|_| units += 1));
    Key { bytes, hash, units }
}

/// The key set of one message's properties, in insertion order, into `set` (cleared first);
/// false when a key value is not valid UTF-8.
fn key_set<'a>(props: &'a [u8], set: &mut Vec<Key<'a>>) -> bool {
    set.clear();
    let (uniq, keys) = key_values(props);
    if let Some(v) = uniq {
        match is_blank(v) {
            None => return false,
            Some(false) => set.push(key(v)),
            Some(true) => {}
        }
    }
    if let Some(v) = keys {
        match is_blank(v) {
            None => return false,
            Some(true) => {}
            Some(false) => {
                // String.split(" "): trailing empty tokens dropped (a non-blank value has a
                // non-empty token, so at least one is left)
                let trimmed = &v[..v.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1)];
                set.extend(trimmed.split(|&b| b == b' ').map(key));
            }
        }
    }
    if set.len() > 1 {
        dedup(set);
    }
    true
}

/// Drop keys equal to an earlier one, keeping the first (insertion order).
fn dedup(set: &mut Vec<Key<'_>>) {
    if set.len() <= SMALL_SET {
        let mut kept = 0;
        for i in 0..set.len() {
            let k = set[i];
            if !set[..kept].iter().any(|e| e.hash == k.hash && e.bytes == k.bytes) {
                set[kept] = k;
                kept += 1;
            }
        }
        set.truncate(kept);
    } else {
        let mut seen = HashSet::with_capacity(set.len());
        set.retain(|k| seen.insert(k.bytes));
    }
}

/// Order a message's key set as a `HashSet` of it iterates: by bucket, insertion order within
/// one (exact while no bucket holds more than 8 keys, when Java would build a tree bin).
fn hashset_order(set: &mut [Key<'_>]) {
    if set.len() > 1 {
        let table = hashset_table(set.len());
        set.sort_by_key(|k| hashset_bucket(k.hash, table)); // stable
    }
}

/// The index items of the units `(starts[i], sizes[i])` of `data`, keys hashed as
/// `topic#key` from `prefix_hash`, the `String.hashCode` of `topic + "#"`.
pub fn index_items(data: &[u8], starts: &[i64], sizes: &[i64], prefix_hash: u32) -> Items {
    let mut out = Items::default();
    out.msg.reserve(starts.len() * 3);
    out.hash.reserve(starts.len() * 3);
    let mut set: Vec<Key<'_>> = Vec::with_capacity(8);
    for (i, (&start, &size)) in starts.iter().zip(sizes).enumerate() {
        let Some(props) = unit_slice(data, start, size).and_then(properties) else {
            out.inconsistent += 1;
            continue;
        };
        if !key_set(props, &mut set) {
            out.slow.push(i as i64);
            continue;
        }
        hashset_order(&mut set);
        for k in &set {
            out.msg.push(i as i64);
            out.hash.push(tiered_hash(prefix_hash.wrapping_mul(pow31(k.units)).wrapping_add(k.hash)));
        }
    }
    out
}

/// [`index_items`] with the columns an index file takes beside the hashes: per item its
/// message's flat offset, size (`i32`) and store time, and per message its number of keys;
/// `flat_offsets` and `timestamps` hold one entry per unit.
#[derive(Debug, Default)]
pub struct Columns {
    pub items: Items,
    pub offsets: Vec<i64>,
    pub sizes: Vec<i32>,
    pub timestamps: Vec<i64>,
    pub key_counts: Vec<i64>,
}

/// The [`Columns`] of one batch: [`index_columns_many`] of it alone.
pub fn index_columns(
    data: &[u8],
    starts: &[i64],
    sizes: &[i64],
    prefix_hash: u32,
    flat_offsets: &[i64],
    timestamps: &[i64],
) -> Columns {
    index_columns_many(&[data], &[0, starts.len()], starts, sizes, &[prefix_hash], flat_offsets, timestamps)
}

/// [`index_columns`] of many batches at once: batch `b` is units `bounds[b]..bounds[b + 1]` of
/// `starts`, `sizes`, `flat_offsets` and `timestamps`, its bytes `datas[b]` (`starts` count from
/// there), its keys hashed from `prefixes[b]`. Items, `slow` and `key_counts` number the units
/// across all batches, and a batch's items follow the batch before's.
pub fn index_columns_many(
    datas: &[&[u8]],
    bounds: &[usize],
    starts: &[i64],
    sizes: &[i64],
    prefixes: &[u32],
    flat_offsets: &[i64],
    timestamps: &[i64],
) -> Columns {
    let mut out = Columns { key_counts: vec![0; starts.len()], ..Columns::default() };
    out.items.msg.reserve(starts.len() * 3);
    out.items.hash.reserve(starts.len() * 3);
    for (b, data) in datas.iter().enumerate() {
        let (lo, hi) = (bounds[b], bounds[b + 1]);
        let items = index_items(data, &starts[lo..hi], &sizes[lo..hi], prefixes[b]);
        for &m in &items.msg {
            let m = m as usize + lo;
            out.items.msg.push(m as i64);
            out.offsets.push(flat_offsets[m]);
            out.sizes.push(sizes[m] as i32);
            out.timestamps.push(timestamps[m]);
            out.key_counts[m] += 1;
        }
        out.items.hash.extend(items.hash);
        out.items.slow.extend(items.slow.iter().map(|&m| m + lo as i64));
        out.items.inconsistent += items.inconsistent;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_columns_many_equals_each_batchs_columns_one_after_the_other() {
        use crate::unit::testing::{encode, Unit};
        let units = [
            encode(&Unit { properties: b"KEYS\x01x y\x02UNIQ_KEY\x01u\x02", ..Unit::default() }),
            encode(&Unit { properties: b"TAGS\x01t\x02", ..Unit::default() }),
            encode(&Unit { properties: b"KEYS\x01z\x02", ..Unit::default() }),
            encode(&Unit { properties: b"KEYS\x01\xff\x02", ..Unit::default() }),
            encode(&Unit { properties: b"UNIQ_KEY\x01w\x02", ..Unit::default() }),
        ];
        let sizes: Vec<i64> = units.iter().map(|u| u.len() as i64).collect();
        // batch 0: units 0..2 in their own buffer; batch 1: units 2..5 in another
        let (a, b) = (units[..2].concat(), units[2..].concat());
        let starts = [0, sizes[0], 0, sizes[2], sizes[2] + sizes[3]];
        let (offsets, times) = ([100, 200, 300, 400, 500], [10, 20, 30, 40, 50]);
        let got = index_columns_many(&[&a, &b], &[0, 2, 5], &starts, &sizes, &[7, 11], &offsets, &times);
        let one = index_columns(&a, &starts[..2], &sizes[..2], 7, &offsets[..2], &times[..2]);
        let two = index_columns(&b, &starts[2..], &sizes[2..], 11, &offsets[2..], &times[2..]);
        let n = one.items.msg.len();
        assert_eq!(got.items.hash, [one.items.hash.clone(), two.items.hash.clone()].concat());
        assert_eq!(&got.items.msg[..n], &one.items.msg[..]);
        assert_eq!(got.items.msg[n..].to_vec(), two.items.msg.iter().map(|m| m + 2).collect::<Vec<_>>());
        assert_eq!(got.offsets, [one.offsets, two.offsets].concat());
        assert_eq!(got.sizes, [one.sizes, two.sizes].concat());
        assert_eq!(got.timestamps, [one.timestamps, two.timestamps].concat());
        assert_eq!(got.key_counts, [one.key_counts, two.key_counts].concat());
        assert_eq!(got.items.slow, vec![3]); // the \xff key: unit 1 of batch 1
        assert_eq!(got.items.inconsistent, 0);
    }

    #[test]
    fn index_columns_gather_each_items_message_fields() {
        use crate::unit::testing::{encode, Unit};
        let a = encode(&Unit { properties: b"KEYS\x01x y\x02UNIQ_KEY\x01u\x02", ..Unit::default() });
        let b = encode(&Unit { properties: b"TAGS\x01t\x02", ..Unit::default() });
        let c = encode(&Unit { properties: b"KEYS\x01z\x02", ..Unit::default() });
        let sizes = [a.len() as i64, b.len() as i64, c.len() as i64];
        let starts = [0, sizes[0], sizes[0] + sizes[1]];
        let data = [a, b, c].concat();
        let cols = index_columns(&data, &starts, &sizes, 7, &[100, 200, 300], &[10, 20, 30]);
        let items = index_items(&data, &starts, &sizes, 7);
        assert_eq!(cols.items.hash, items.hash);
        assert_eq!(cols.items.msg, vec![0, 0, 0, 2]);
        assert_eq!(cols.offsets, vec![100, 100, 100, 300]);
        assert_eq!(cols.sizes, vec![sizes[0] as i32; 3].into_iter().chain([sizes[2] as i32]).collect::<Vec<_>>());
        assert_eq!(cols.timestamps, vec![10, 10, 10, 30]);
        assert_eq!(cols.key_counts, vec![3, 0, 1]);
    }
    use crate::java::hash_units;
    use crate::unit::testing::{encode, Unit};

    fn topic_key_hash(topic: &str, key: &str) -> i32 {
        tiered_hash(hash_units(0, format!("{topic}#{key}").encode_utf16()))
    }

    fn items_of(props: &[&[u8]]) -> Items {
        let mut data = Vec::new();
        let (mut starts, mut sizes) = (Vec::new(), Vec::new());
        for p in props {
            let unit = encode(&Unit { properties: p, ..Unit::default() });
            starts.push(data.len() as i64);
            sizes.push(unit.len() as i64);
            data.extend(unit);
        }
        index_items(&data, &starts, &sizes, hash_ascii(b"T#"))
    }

    fn keys_of(props: &[u8]) -> Vec<i32> {
        items_of(&[props]).hash
    }

    #[test]
    fn uniq_key_and_keys_tokens_are_indexed_once() {
        let got = keys_of(b"KEYS\x01a b a\x02TAGS\x01t\x02UNIQ_KEY\x01u1\x02");
        let mut want = vec![topic_key_hash("T", "u1"), topic_key_hash("T", "a"), topic_key_hash("T", "b")];
        want.sort();
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, want);
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn java_split_keeps_leading_and_inner_empty_tokens_and_drops_trailing_ones() {
        let got = keys_of(b"KEYS\x01 a  b  \x02");
        let mut want = vec![topic_key_hash("T", ""), topic_key_hash("T", "a"), topic_key_hash("T", "b")];
        want.sort();
        let mut sorted = got;
        sorted.sort();
        assert_eq!(sorted, want);
    }

    #[test]
    fn blank_values_are_not_indexed() {
        assert!(keys_of(b"KEYS\x01 \t \x02UNIQ_KEY\x01\x1f\x02").is_empty());
        assert!(keys_of("KEYS\x01\u{3000} \u{2028}\x02".as_bytes()).is_empty());
        assert_eq!(keys_of("KEYS\x01\u{a0}\x02".as_bytes()), vec![topic_key_hash("T", "\u{a0}")]);
    }

    #[test]
    fn the_last_valid_item_wins_and_empty_values_are_dropped() {
        assert_eq!(keys_of(b"KEYS\x01old\x02KEYS\x01new\x02KEYS\x01\x02"), vec![topic_key_hash("T", "new")]);
        assert!(keys_of(b"KEYSx\x01a\x02XKEYS\x01b\x02").is_empty());
        assert_eq!(keys_of(b"KEYS\x01a\x01b"), vec![topic_key_hash("T", "a\x01b")]);
    }

    #[test]
    fn non_ascii_keys_hash_over_utf16_units() {
        for k in ["鍵", "заказ-1", "\u{1f680}-1"] {
            let props = format!("KEYS\x01{k}\x02");
            assert_eq!(keys_of(props.as_bytes()), vec![topic_key_hash("T", k)], "{k}");
        }
    }

    #[test]
    fn invalid_utf8_in_a_key_is_left_to_the_caller() {
        let got = items_of(&[b"KEYS\x01a\xffb\x02", b"KEYS\x01ok\x02", b"TAGS\x01\xff\x02KEYS\x01ok\x02"]);
        assert_eq!(got.slow, vec![0]);
        assert_eq!(got.msg, vec![1, 2]);
    }

    #[test]
    fn keys_are_ordered_as_a_java_hash_set_iterates() {
        // Java: new HashSet<>(List.of("b", "a", "c")) iterates a, b, c (buckets 97, 98, 99 & 15)
        let got = keys_of(b"KEYS\x01c b a\x02");
        assert_eq!(got, ["a", "b", "c"].map(|k| topic_key_hash("T", k)));
        // 13 keys: a 32-slot table
        let many: Vec<String> = (0..13).map(|i| format!("k{i}")).collect();
        let props = format!("KEYS\x01{}\x02", many.join(" "));
        let got = keys_of(props.as_bytes());
        let mut want: Vec<&String> = many.iter().collect();
        want.sort_by_key(|k| hashset_bucket(hash_ascii(k.as_bytes()), 32));
        assert_eq!(got, want.iter().map(|k| topic_key_hash("T", k)).collect::<Vec<_>>());
    }

    #[test]
    fn many_keys_are_deduplicated_with_a_set() {
        let tokens: Vec<String> = (0..40).map(|i| format!("k{}", i % 25)).collect();
        let props = format!("KEYS\x01{}\x02", tokens.join(" "));
        assert_eq!(keys_of(props.as_bytes()).len(), 25);
    }

    #[test]
    fn torn_units_are_counted_not_read() {
        let unit = encode(&Unit { properties: b"KEYS\x01a\x02", ..Unit::default() });
        for cut in [0, 10, unit.len() - 1] {
            let got = index_items(&unit[..cut], &[0], &[unit.len() as i64], 0);
            assert_eq!((got.inconsistent, got.msg.len()), (1, 0));
        }
        let got = index_items(&[], &[], &[], 0);
        assert_eq!(got, Items::default());
    }
}
