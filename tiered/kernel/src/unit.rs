//! Where the fields of a stored message unit are (spec §2.1), read from bytes that may be torn
//! or corrupt: every read is bounds-checked and a unit whose field lengths do not add up to its
//! TOTALSIZE is reported, never trusted.

pub const MAGIC_V1: i32 = -626_843_481; // 0xDAA320A7
pub const MAGIC_V2: i32 = -626_843_477; // 0xDAA320AB
pub const QUEUE_OFFSET_POSITION: usize = 20;
pub const PHYSICAL_OFFSET_POSITION: usize = 28;
pub const SYSFLAG_POSITION: usize = 36;
pub const BORNHOST_V6_FLAG: i32 = 0x10;
pub const STOREHOST_V6_FLAG: i32 = 0x20;
/// TOTALSIZE .. a one-byte topic length and a two-byte properties length, hosts of 8 bytes:
/// 91, the Python side's `MIN_UNIT_SIZE` (an empty topic, body and properties).
pub const MIN_UNIT_SIZE: i64 = 91;
/// The body length field of a unit whose hosts are IPv4 (each IPv6 host adds 12 bytes).
const BODY_LENGTH_V4: usize = 84;
const V6_EXTRA: usize = 12;

#[inline]
pub fn be_i32(data: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(data.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

#[inline]
pub fn be_i64(data: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(data.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

#[inline]
fn be_i16(data: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(data.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

/// The unit `[start, start + size)` of `data` as a slice, when it lies inside `data` and is at
/// least the smallest unit.
#[inline]
pub fn unit_slice(data: &[u8], start: i64, size: i64) -> Option<&[u8]> {
    if start < 0 || size < MIN_UNIT_SIZE {
        return None;
    }
    let (start, size) = (usize::try_from(start).ok()?, usize::try_from(size).ok()?);
    data.get(start..start.checked_add(size)?)
}

/// The topic and the properties of one unit (the properties are its last PROPLEN bytes, after
/// the two-byte length), or None when its field lengths do not add up to its size.
pub fn topic_and_properties(unit: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = unit.len();
    let sys_flag = be_i32(unit, SYSFLAG_POSITION)?;
    let v2 = be_i32(unit, 4)? == MAGIC_V2;
    let mut body_at = BODY_LENGTH_V4;
    if sys_flag & BORNHOST_V6_FLAG != 0 {
        body_at += V6_EXTRA;
    }
    if sys_flag & STOREHOST_V6_FLAG != 0 {
        body_at += V6_EXTRA;
    }
    let body_len = usize::try_from(be_i32(unit, body_at)?).ok()?;
    let topic_at = body_at.checked_add(4)?.checked_add(body_len)?;
    if topic_at.checked_add(2)? > end {
        return None;
    }
    let (topic_len, width) = if v2 {
        (usize::try_from(be_i16(unit, topic_at)?).ok()?, 2)
    } else {
        (usize::from(unit[topic_at]), 1)
    };
    let props_at = topic_at + width + topic_len;
    let props_len = usize::try_from(be_i16(unit, props_at)?).ok()?;
    if props_at + 2 + props_len != end {
        return None;
    }
    Some((&unit[topic_at + width..props_at], &unit[props_at + 2..]))
}

/// The properties of one unit, or None when its field lengths do not add up to its size (it is
/// not indexed).
pub fn properties(unit: &[u8]) -> Option<&[u8]> {
    topic_and_properties(unit).map(|(_, props)| props)
}

#[cfg(test)]
pub mod testing {
    //! A unit encoder for the tests (the layout of spec §2.1).

    pub struct Unit<'a> {
        pub queue_offset: i64,
        pub physical_offset: i64,
        pub sys_flag: i32,
        pub body: &'a [u8],
        pub topic: &'a [u8],
        pub properties: &'a [u8],
        pub v2: bool,
    }

    impl Default for Unit<'_> {
        fn default() -> Self {
            Unit { queue_offset: 0, physical_offset: 0, sys_flag: 0, body: b"hello", topic: b"TopicTest", properties: b"", v2: false }
        }
    }

    pub fn encode(u: &Unit) -> Vec<u8> {
        let born = if u.sys_flag & super::BORNHOST_V6_FLAG != 0 { 20 } else { 8 };
        let store = if u.sys_flag & super::STOREHOST_V6_FLAG != 0 { 20 } else { 8 };
        let topic_width = if u.v2 { 2 } else { 1 };
        let size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8 + 4 + u.body.len()
            + topic_width + u.topic.len() + 2 + u.properties.len();
        let mut out = Vec::with_capacity(size);
        out.extend((size as i32).to_be_bytes());
        out.extend((if u.v2 { super::MAGIC_V2 } else { super::MAGIC_V1 }).to_be_bytes());
        out.extend(((crc32fast::hash(u.body) & 0x7fff_ffff) as i32).to_be_bytes()); // body CRC
        out.extend(0i32.to_be_bytes()); // queue id
        out.extend(0i32.to_be_bytes()); // flag
        out.extend(u.queue_offset.to_be_bytes());
        out.extend(u.physical_offset.to_be_bytes());
        out.extend(u.sys_flag.to_be_bytes());
        out.extend(1_700_000_000_000i64.to_be_bytes());
        out.extend(vec![1u8; born]);
        out.extend(1_700_000_000_001i64.to_be_bytes());
        out.extend(vec![2u8; store]);
        out.extend(0i32.to_be_bytes()); // reconsume times
        out.extend(0i64.to_be_bytes()); // prepared transaction offset
        out.extend((u.body.len() as i32).to_be_bytes());
        out.extend(u.body);
        if u.v2 {
            out.extend((u.topic.len() as i16).to_be_bytes());
        } else {
            out.push(u.topic.len() as u8);
        }
        out.extend(u.topic);
        out.extend((u.properties.len() as i16).to_be_bytes());
        out.extend(u.properties);
        assert_eq!(out.len(), size);
        out
    }
}

#[cfg(test)]
mod check_batches_tests {
    use super::*;

    fn unit(size: usize, queue_offset: i64, physical: i64, born_ms: i64) -> Vec<u8> {
        let mut u = vec![0u8; size];
        u[0..4].copy_from_slice(&(size as i32).to_be_bytes());
        u[4..8].copy_from_slice(&MAGIC_V1.to_be_bytes());
        u[QUEUE_OFFSET_POSITION..QUEUE_OFFSET_POSITION + 8].copy_from_slice(&queue_offset.to_be_bytes());
        u[PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8].copy_from_slice(&physical.to_be_bytes());
        let at = 56; // store timestamp of an IPv4 born host (sysflag 0)
        u[at..at + 8].copy_from_slice(&born_ms.to_be_bytes());
        u
    }

    #[test]
    fn each_batch_is_checked_as_check_batch_checks_it_alone() {
        let a = [unit(100, 7, 1000, 5), unit(120, 8, 1100, 9)].concat();
        let b = [unit(96, 3, 2000, 4)].concat();
        let mut c = [unit(100, 40, 3000, 1), unit(100, 41, 3100, 2)].concat();
        c[100 + 4] ^= 1; // the second unit of the third batch: a bad magic
        let sizes = [100, 120, 96, 100, 100];
        let physical = [1000, 1100, 2000, 3000, 3100];
        let got = check_batches(&[&a, &b, &c], &sizes, &[2, 1, 2], &[7, 3, 40], Some(&physical));
        assert_eq!(got[0], check_batch(&a, &sizes[0..2], 7, Some(&physical[0..2])));
        assert_eq!(got[1], check_batch(&b, &sizes[2..3], 3, Some(&physical[2..3])));
        assert_eq!(got[2], check_batch(&c, &sizes[3..5], 40, Some(&physical[3..5])));
        assert_eq!((got[0].good, got[0].first_time, got[0].last_time), (2, 5, 9));
        assert_eq!(got[2].good, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{encode, Unit};
    use super::*;

    #[test]
    fn properties_are_found_for_every_host_and_magic_shape() {
        for sys_flag in [0, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, BORNHOST_V6_FLAG | STOREHOST_V6_FLAG] {
            for v2 in [false, true] {
                let unit = encode(&Unit { sys_flag, v2, properties: b"KEYS\x01a b\x02", ..Unit::default() });
                assert_eq!(properties(&unit), Some(&b"KEYS\x01a b\x02"[..]));
            }
        }
    }

    #[test]
    fn a_torn_or_inconsistent_unit_has_no_properties() {
        let unit = encode(&Unit { properties: b"KEYS\x01a\x02", ..Unit::default() });
        for cut in 0..unit.len() {
            assert_eq!(properties(&unit[..cut]), None, "cut at {cut}");
        }
        let mut bad = unit.clone();
        bad[84..88].copy_from_slice(&(-1i32).to_be_bytes()); // negative body length
        assert_eq!(properties(&bad), None);
        let mut long = unit;
        long[84..88].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(properties(&long), None);
        assert_eq!(unit_slice(&[0u8; 200], -1, 100), None);
        assert_eq!(unit_slice(&[0u8; 200], 150, 100), None);
        assert_eq!(unit_slice(&[0u8; 200], 0, MIN_UNIT_SIZE - 1), None);
        assert!(unit_slice(&[0u8; 200], 0, MIN_UNIT_SIZE).is_some());
        assert_eq!(unit_slice(&[0u8; 200], i64::MAX, 100), None);
    }
}

/// The store timestamp field of a unit (after an IPv4 or IPv6 born host).
#[inline]
pub fn store_timestamp(unit: &[u8]) -> Option<i64> {
    let sys_flag = be_i32(unit, SYSFLAG_POSITION)?;
    let at = 56 + if sys_flag & BORNHOST_V6_FLAG != 0 { V6_EXTRA } else { 0 };
    be_i64(unit, at)
}

/// The index of the first unit whose header disagrees with what the consumequeue says of it --
/// it lies outside `data`, is shorter than the smallest unit, or its TOTALSIZE, magic, queue
/// offset or (when given) physical offset differ -- or `starts.len()` when all agree.
pub fn check_units(
    data: &[u8],
    starts: &[i64],
    sizes: &[i64],
    queue_offsets: &[i64],
    physical_offsets: Option<&[i64]>,
) -> usize {
    for i in 0..starts.len() {
        let Some(unit) = unit_slice(data, starts[i], sizes[i]) else { return i };
        let good = be_i32(unit, 0).map(i64::from) == Some(sizes[i])
            && matches!(be_i32(unit, 4), Some(MAGIC_V1 | MAGIC_V2))
            && be_i64(unit, QUEUE_OFFSET_POSITION) == Some(queue_offsets[i])
            && physical_offsets.map_or(true, |p| be_i64(unit, PHYSICAL_OFFSET_POSITION) == Some(p[i]));
        if !good {
            return i;
        }
    }
    starts.len()
}

/// The store timestamp of each unit at `starts`, or the index of the first unit whose header
/// is not inside `data`.
pub fn store_timestamps(data: &[u8], starts: &[i64]) -> Result<Vec<i64>, usize> {
    starts
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let unit = usize::try_from(s).ok().and_then(|s| data.get(s..)).ok_or(i)?;
            store_timestamp(unit).ok_or(i)
        })
        .collect()
}

/// Write `offsets[i]` big-endian into the physical offset field of the unit at `starts[i]`;
/// the index of the first unit whose field is not inside `data` when one is not (nothing is
/// written for it or after it).
pub fn rewrite_physical_offsets(data: &mut [u8], starts: &[i64], offsets: &[i64]) -> Result<(), usize> {
    for (i, (&s, &o)) in starts.iter().zip(offsets).enumerate() {
        let at = usize::try_from(s).ok().and_then(|s| s.checked_add(PHYSICAL_OFFSET_POSITION)).ok_or(i)?;
        data.get_mut(at..at + 8).ok_or(i)?.copy_from_slice(&o.to_be_bytes());
    }
    Ok(())
}

/// A batch of units read back to back, checked: `good` units agree with their consumequeue
/// units (all of them when `good == starts.len()`), each one's start (the sizes' running sum)
/// and, for the good ones, store timestamp with their least and greatest.
#[derive(Debug, PartialEq)]
pub struct CheckedBatch {
    pub good: usize,
    pub starts: Vec<i64>,
    pub timestamps: Vec<i64>,
    pub first_time: i64,
    pub last_time: i64,
}

/// [`check_units`] and [`store_timestamps`] of units that lie back to back in `data`, the
/// first at queue offset `first_queue_offset`: one pass, no arrays of starts or queue offsets
/// built first. A unit whose store timestamp is not inside it fails the check.
pub fn check_batch(
    data: &[u8],
    sizes: &[i64],
    first_queue_offset: i64,
    physical_offsets: Option<&[i64]>,
) -> CheckedBatch {
    let mut starts = Vec::with_capacity(sizes.len());
    let mut at = 0i64;
    for &size in sizes {
        starts.push(at);
        at = at.saturating_add(size);
    }
    let mut timestamps = Vec::with_capacity(sizes.len());
    let (mut first_time, mut last_time) = (i64::MAX, i64::MIN);
    for i in 0..sizes.len() {
        let queue_offset = first_queue_offset.wrapping_add(i as i64);
        let physical = physical_offsets.map(|p| &p[i..i + 1]);
        if check_units(data, &starts[i..i + 1], &sizes[i..i + 1], &[queue_offset], physical) != 1 {
            break;
        }
        let Some(time) = unit_slice(data, starts[i], sizes[i]).and_then(store_timestamp) else { break };
        timestamps.push(time);
        first_time = first_time.min(time);
        last_time = last_time.max(time);
    }
    CheckedBatch { good: timestamps.len(), starts, timestamps, first_time, last_time }
}

/// [`check_batch`] of many batches: batch `i` holds `counts[i]` units back to back in
/// `datas[i]`, whose sizes (and physical offsets) are the next `counts[i]` of `sizes`
/// (`physical_offsets`), the first at queue offset `first_queue_offsets[i]`. The callers check
/// that the columns agree in length and that `counts` adds up to `sizes`.
pub fn check_batches(
    datas: &[&[u8]],
    sizes: &[i64],
    counts: &[usize],
    first_queue_offsets: &[i64],
    physical_offsets: Option<&[i64]>,
) -> Vec<CheckedBatch> {
    let mut at = 0usize;
    let mut out = Vec::with_capacity(datas.len());
    for ((&data, &n), &first) in datas.iter().zip(counts).zip(first_queue_offsets) {
        let physical = physical_offsets.map(|p| &p[at..at + n]);
        out.push(check_batch(data, &sizes[at..at + n], first, physical));
        at += n;
    }
    out
}

/// Consumequeue units (20 bytes each, big-endian: offset, size, tags code) of three equally
/// long columns, or the index of the first size that does not fit a 32-bit int.
pub fn encode_units(offsets: &[i64], sizes: &[i64], tags_codes: &[i64]) -> Result<Vec<u8>, usize> {
    let mut out = Vec::with_capacity(offsets.len() * 20);
    for (i, ((&o, &z), &t)) in offsets.iter().zip(sizes).zip(tags_codes).enumerate() {
        let z = i32::try_from(z).map_err(|_| i)?;
        out.extend_from_slice(&o.to_be_bytes());
        out.extend_from_slice(&z.to_be_bytes());
        out.extend_from_slice(&t.to_be_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod walk_tests {
    use super::testing::{encode, Unit};
    use super::*;

    fn two_units() -> (Vec<u8>, Vec<i64>, Vec<i64>) {
        let a = encode(&Unit { queue_offset: 7, physical_offset: 100, ..Unit::default() });
        let b = encode(&Unit { queue_offset: 8, physical_offset: 100 + a.len() as i64, sys_flag: BORNHOST_V6_FLAG, v2: true, ..Unit::default() });
        let sizes = vec![a.len() as i64, b.len() as i64];
        (
            [a, b].concat(),
            vec![0, sizes[0]],
            sizes,
        )
    }

    #[test]
    fn a_batch_check_is_the_unit_check_and_the_timestamps_in_one_pass() {
        let (data, starts, sizes) = two_units();
        let phys = [100, 100 + sizes[0]];
        let times = store_timestamps(&data, &starts).unwrap();
        let all = check_batch(&data, &sizes, 7, Some(&phys));
        assert_eq!(all.good, 2);
        assert_eq!(all.starts, starts);
        assert_eq!(all.timestamps, times);
        assert_eq!((all.first_time, all.last_time), (*times.iter().min().unwrap(), *times.iter().max().unwrap()));
        // a wrong queue offset, physical offset or size stops it where check_units stops
        assert_eq!(check_batch(&data, &sizes, 8, None).good, check_units(&data, &starts, &sizes, &[8, 9], None));
        assert_eq!(check_batch(&data, &sizes, 7, Some(&[100, 1])).good, 1);
        assert_eq!(check_batch(&data, &[sizes[0], sizes[1] + 1], 7, None).good, 1);
        // a torn buffer: the second unit is cut short
        assert_eq!(check_batch(&data[..data.len() - 1], &sizes, 7, None).good, 1);
        let none = check_batch(&data, &[], 7, None);
        assert_eq!((none.good, none.starts.len(), none.first_time, none.last_time), (0, 0, i64::MAX, i64::MIN));
    }

    #[test]
    fn consumequeue_units_are_encoded_big_endian_and_sizes_must_fit_an_int() {
        let out = encode_units(&[1, -2], &[20, 0x7fff_ffff], &[3, i64::MIN]).unwrap();
        assert_eq!(out.len(), 40);
        assert_eq!(&out[..20], &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 3]);
        assert_eq!(&out[20..28], &(-2i64).to_be_bytes());
        assert_eq!(&out[28..32], &[0x7f, 0xff, 0xff, 0xff]);
        assert_eq!(&out[32..], &i64::MIN.to_be_bytes());
        assert_eq!(encode_units(&[0, 0], &[1, 1 << 31], &[0, 0]), Err(1));
        assert_eq!(encode_units(&[], &[], &[]), Ok(vec![]));
    }

    #[test]
    fn units_are_checked_against_their_consumequeue_units() {
        let (data, starts, sizes) = two_units();
        let phys = [100, 100 + sizes[0]];
        assert_eq!(check_units(&data, &starts, &sizes, &[7, 8], Some(&phys)), 2);
        assert_eq!(check_units(&data, &starts, &sizes, &[7, 9], Some(&phys)), 1);
        assert_eq!(check_units(&data, &starts, &sizes, &[7, 8], Some(&[100, 5])), 1);
        assert_eq!(check_units(&data, &starts, &sizes, &[7, 8], None), 2);
        assert_eq!(check_units(&data, &starts, &[sizes[0] + 1, sizes[1]], &[7, 8], None), 0);
        assert_eq!(check_units(&data[..data.len() - 1], &starts, &sizes, &[7, 8], None), 1);
        let mut bad_magic = data.clone();
        bad_magic[4] ^= 1;
        assert_eq!(check_units(&bad_magic, &starts, &sizes, &[7, 8], None), 0);
        assert_eq!(check_units(&data, &[], &[], &[], None), 0);
    }

    #[test]
    fn store_timestamps_follow_the_born_host() {
        let (data, starts, _) = two_units();
        assert_eq!(store_timestamps(&data, &starts), Ok(vec![1_700_000_000_001; 2]));
        assert_eq!(store_timestamps(&data, &[0, data.len() as i64 - 10]), Err(1));
        assert_eq!(store_timestamps(&data, &[-1]), Err(0));
    }

    #[test]
    fn physical_offsets_are_rewritten_in_place() {
        let (mut data, starts, sizes) = two_units();
        rewrite_physical_offsets(&mut data, &starts, &[5, 6]).unwrap();
        assert_eq!(check_units(&data, &starts, &sizes, &[7, 8], Some(&[5, 6])), 2);
        let near_end = data.len() as i64 - 20;
        assert_eq!(rewrite_physical_offsets(&mut data, &[0, near_end], &[1, 2]), Err(1));
    }
}

/// The body of a unit (after its hosts, as its sysflag says), when it lies inside `unit`.
#[inline]
pub fn body(unit: &[u8]) -> Option<&[u8]> {
    let sys_flag = be_i32(unit, SYSFLAG_POSITION)?;
    let mut at = BODY_LENGTH_V4;
    if sys_flag & BORNHOST_V6_FLAG != 0 {
        at += V6_EXTRA;
    }
    if sys_flag & STOREHOST_V6_FLAG != 0 {
        at += V6_EXTRA;
    }
    let len = usize::try_from(be_i32(unit, at)?).ok()?;
    unit.get(at + 4..(at + 4).checked_add(len)?)
}

/// The indexes of the units at `starts` whose body does not match their BODYCRC (the CRC-32
/// of the body, as `UtilAll.crc32` masks it to 31 bits); a unit whose body is not inside
/// `data` does not match.
pub fn crc_mismatches(data: &[u8], starts: &[i64]) -> Vec<i64> {
    let mut bad = Vec::new();
    for (i, &s) in starts.iter().enumerate() {
        let unit = usize::try_from(s).ok().and_then(|s| data.get(s..));
        let ok = unit.and_then(|u| Some((body(u)?, be_i32(u, 8)?))).is_some_and(|(b, stored)| {
            (crc32fast::hash(b) & 0x7fff_ffff) as i32 == stored
        });
        if !ok {
            bad.push(i as i64);
        }
    }
    bad
}

#[cfg(test)]
mod crc_tests {
    use super::testing::{encode, Unit};
    use super::*;

    #[test]
    fn bodies_are_checked_against_their_crc() {
        let a = encode(&Unit { body: b"first body", sys_flag: STOREHOST_V6_FLAG, ..Unit::default() });
        let b = encode(&Unit { body: b"", ..Unit::default() });
        let mut data = [a.clone(), b].concat();
        let starts = [0, a.len() as i64];
        assert!(crc_mismatches(&data, &starts).is_empty());
        let body_at = a.windows(10).position(|w| w == b"first body").unwrap();
        data[body_at] ^= 1;
        assert_eq!(crc_mismatches(&data, &starts), vec![0]);
        assert_eq!(crc_mismatches(&data[..a.len() + 50], &starts), vec![0, 1]);
        assert_eq!(crc_mismatches(&data, &[-1, i64::MAX]), vec![0, 1]);
    }
}
