//! The Spark data source's decoder (`tiered.jobs.tier_decode`): a read's units checked as the
//! read path checks them and turned into the columns of the `rocketmq_tiered` table, in one
//! pass, as Arrow buffers (little-endian fixed-width values, `int32` offsets, UTF-8 data,
//! validity bitmaps) that Python wraps without copying.
//!
//! Properties are read as Java's `string2messageProperties` reads them: items cut at `\x02`,
//! each cut at its first `\x01`, an item without a name or a value dropped; every item kept
//! (the map keeps a repeated name, a lookup takes the last). Properties that are not UTF-8 are
//! decoded with U+FFFD for each maximal invalid subpart, as Python's `"replace"` does. Compressed
//! bodies are decompressed (zlib, LZ4 frames, ZSTD frames); one that does not decompress is left
//! as stored and named, for Python to decompress and report.

use std::borrow::Cow;

use crate::unit::{be_i32, be_i64, topic_and_properties, unit_slice, MAGIC_V1, MAGIC_V2};
use crate::unit::{BORNHOST_V6_FLAG, PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION, STOREHOST_V6_FLAG, SYSFLAG_POSITION};

/// The magic of a legacy 16-byte coda a consumequeue unit may point at (spec §5.2).
const BLANK_MAGIC: i32 = -875_286_124; // 0xCBD43194
const COMPRESSED_FLAG: i32 = 0x1;
const COMPRESSION_TYPE_MASK: i32 = 0x700;
const BORN_HOST_AT: usize = 48;
const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Why a unit is not in the columns.
pub const KEPT: u8 = 0;
/// Its header disagrees with its consumequeue unit (TOTALSIZE, magic, queue or flat offset).
pub const BAD_HEADER: u8 = 1;
/// Its field lengths do not add up to TOTALSIZE.
pub const BAD_LENGTHS: u8 = 2;
/// Its body does not match BODYCRC.
pub const BAD_CRC: u8 = 3;
/// Sound, but outside the bounds (queue offsets, store times).
pub const OUTSIDE: u8 = 4;

/// The columns a decode builds, by name (the table's column names).
pub const COLUMNS: [&str; 17] = [
    "queueId", "flag", "queueOffset", "commitLogOffset", "sysFlag", "bodyCrc", "storeSize",
    "bornTimestamp", "storeTimestamp", "reconsumeTimes", "bornHost", "storeHost", "body", "tags",
    "uniqKey", "msgId", "keys",
];
/// The `properties` column (a map); asked for by its own flag.
pub const PROPERTIES: &str = "properties";

/// What the units must satisfy to be decoded (half-open ranges; store times in epoch ms).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub q_lo: i64,
    pub q_hi: i64,
    pub t_lo: i64,
    pub t_hi: i64,
}

impl Bounds {
    pub const ALL: Bounds = Bounds { q_lo: i64::MIN, q_hi: i64::MAX, t_lo: i64::MIN, t_hi: i64::MAX };
}

/// Strings (or binaries) of an Arrow string array: `offsets` (rows + 1), `data`, and a
/// validity bitmap when some row may be null.
#[derive(Debug, Default, PartialEq)]
pub struct Strings {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub valid: Option<Vec<u8>>,
    pub nulls: usize,
}

impl Strings {
    fn new(rows: usize, bytes: usize, nullable: bool) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        let valid = nullable.then(|| Vec::with_capacity(rows / 8 + 1));
        Strings { offsets, data: Vec::with_capacity(bytes), valid, nulls: 0 }
    }

    fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    fn close(&mut self) -> Result<(), Overflow> {
        let end = i32::try_from(self.data.len()).map_err(|_| Overflow(self.data.len()))?;
        self.offsets.push(end);
        Ok(())
    }

    fn mark(&mut self, valid: bool) {
        let row = self.rows();
        if let Some(bits) = self.valid.as_mut() {
            if row % 8 == 0 {
                bits.push(0);
            }
            if valid {
                *bits.last_mut().expect("a byte per 8 rows") |= 1 << (row % 8);
            }
        }
        self.nulls += usize::from(!valid);
    }

    fn push(&mut self, value: &[u8]) -> Result<(), Overflow> {
        self.mark(true);
        self.data.extend_from_slice(value);
        self.close()
    }

    fn push_opt(&mut self, value: Option<&[u8]>) -> Result<(), Overflow> {
        match value {
            Some(v) => self.push(v),
            None => {
                self.mark(false);
                self.close()
            }
        }
    }
}

/// A column's values or offsets passed 2 GiB (a read too large for `int32` offsets).
#[derive(Debug, PartialEq)]
pub struct Overflow(pub usize);

/// A list (`keys`) or a map (`properties`): `offsets` into its items, per row.
#[derive(Debug, Default, PartialEq)]
pub struct Nested {
    pub offsets: Vec<i32>,
    pub keys: Strings,
    pub values: Strings,
}

/// The units checked and the columns of the ones kept, in the order of the units.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Per unit: [`KEPT`], [`BAD_HEADER`], [`BAD_LENGTHS`], [`BAD_CRC`] or [`OUTSIDE`].
    pub verdicts: Vec<u8>,
    /// Per unit: its queue offset (the expected one, or when read from the units, the unit's;
    /// -1 where the unit is not inside the data).
    pub queue_offsets: Vec<i64>,
    /// Fixed-width columns by [`COLUMNS`] index: little-endian values, one per kept unit.
    pub fixed: Vec<(usize, Vec<u8>)>,
    /// String and binary columns by [`COLUMNS`] index.
    pub strings: Vec<(usize, Strings)>,
    /// `keys` (list of strings) when asked for.
    pub keys: Option<Nested>,
    /// `properties` (map) when asked for.
    pub properties: Option<Nested>,
    /// Rows whose body is compressed and was not decompressed here (an unknown codec, or bytes
    /// that do not decompress): the `body` column holds it as stored.
    pub compressed: Vec<i64>,
}

/// One unit's fields, located (the unit has passed its checks).
struct Unit<'a> {
    unit: &'a [u8],
    sys_flag: i32,
    store_ts_at: usize,
    store_host_at: usize,
    store_width: usize,
    tail_at: usize,
    body: &'a [u8],
    props: &'a [u8],
}

fn locate(unit: &[u8]) -> Option<Unit<'_>> {
    let (_, props) = topic_and_properties(unit)?;
    let sys_flag = be_i32(unit, SYSFLAG_POSITION)?;
    let born = if sys_flag & BORNHOST_V6_FLAG != 0 { 20 } else { 8 };
    let store_width = if sys_flag & STOREHOST_V6_FLAG != 0 { 20 } else { 8 };
    let store_ts_at = BORN_HOST_AT + born;
    let store_host_at = store_ts_at + 8;
    let tail_at = store_host_at + store_width;
    let body = crate::unit::body(unit)?;
    Some(Unit { unit, sys_flag, store_ts_at, store_host_at, store_width, tail_at, body, props })
}

/// The header check of the read path: TOTALSIZE, magic, queue offset and flat offset agree.
fn header_ok(unit: &[u8], size: i64, queue_offset: i64, flat: i64) -> bool {
    be_i32(unit, 0).map(i64::from) == Some(size)
        && matches!(be_i32(unit, 4), Some(MAGIC_V1 | MAGIC_V2))
        && be_i64(unit, QUEUE_OFFSET_POSITION) == Some(queue_offset)
        && be_i64(unit, PHYSICAL_OFFSET_POSITION) == Some(flat)
}

/// A host field (`addr` + `i32` port, 8 or 20 bytes) as `ip:port` / `[ipv6]:port`.
fn format_host(raw: &[u8], out: &mut Vec<u8>) {
    let port = i32::from_be_bytes(raw[raw.len() - 4..].try_into().expect("4 bytes"));
    if raw.len() == 8 {
        for (i, b) in raw[..4].iter().enumerate() {
            if i > 0 {
                out.push(b'.');
            }
            push_int(out, i64::from(*b));
        }
    } else {
        out.push(b'[');
        format_v6(&raw[..16], out);
        out.push(b']');
    }
    out.push(b':');
    push_int(out, i64::from(port));
}

/// RFC 5952 text of an IPv6 address as Python's `ipaddress` writes it: lowercase hextets
/// without leading zeros, the longest run (the first of equals) of two or more zero hextets
/// as `::`.
fn format_v6(addr: &[u8], out: &mut Vec<u8>) {
    let hextets: Vec<u16> = addr.chunks_exact(2).map(|p| u16::from_be_bytes([p[0], p[1]])).collect();
    let (mut best, mut best_len, mut run, mut run_len) = (usize::MAX, 0, 0, 0);
    for (i, &h) in hextets.iter().enumerate() {
        if h == 0 {
            if run_len == 0 {
                run = i;
            }
            run_len += 1;
            if run_len > best_len {
                (best, best_len) = (run, run_len);
            }
        } else {
            run_len = 0;
        }
    }
    if best_len < 2 {
        best = usize::MAX;
    }
    let mut i = 0;
    while i < 8 {
        if i == best {
            out.extend_from_slice(if i == 0 { b"::" } else { b":" });
            i += best_len;
            continue;
        }
        let mut digits = [0u8; 4];
        let mut n = 0;
        let mut v = hextets[i];
        loop {
            digits[n] = b"0123456789abcdef"[usize::from(v & 15)];
            n += 1;
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        out.extend(digits[..n].iter().rev());
        if i + 1 < 8 {
            out.push(b':');
        }
        i += 1;
    }
}

fn push_int(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    let mut u = v.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (u % 10) as u8;
        n += 1;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    out.extend(digits[..n].iter().rev());
}

/// A host column: the last host field formatted is remembered (a batch's hosts repeat).
struct Hosts {
    strings: Strings,
    last: Vec<u8>,
    text: Vec<u8>,
}

impl Hosts {
    fn push(&mut self, raw: &[u8]) -> Result<(), Overflow> {
        if raw != self.last.as_slice() {
            self.last.clear();
            self.last.extend_from_slice(raw);
            self.text.clear();
            format_host(raw, &mut self.text);
        }
        self.strings.push(&self.text)
    }
}

/// Each (name, value) item of a unit's properties, in order (`string2messageProperties`).
fn property_items(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|&b| b == 2).filter_map(|part| {
        let sep = memchr::memchr(1, part)?;
        (sep > 0 && sep + 1 < part.len()).then(|| (&part[..sep], &part[sep + 1..]))
    })
}

/// Check the units `(starts[i], sizes[i])` of `data` and decode the ones inside `bounds` into
/// the columns `want` names ([`COLUMNS`] and [`PROPERTIES`]).
///
/// A start at a legacy coda is moved past it. Unit `i` is expected at queue offset
/// `first_queue_offset + i` (or, when `first_queue_offset` is negative, at the one it holds)
/// and at flat offset `flat[i]`. Checks, in order: the header ([`BAD_HEADER`]), the field
/// lengths ([`BAD_LENGTHS`]), the bounds ([`OUTSIDE`]), then, for units inside them, the body
/// CRC ([`BAD_CRC`]).
pub fn decode(
    data: &[u8],
    starts: &[i64],
    sizes: &[i64],
    first_queue_offset: i64,
    flat: &[i64],
    bounds: Bounds,
    want: &[&str],
) -> Result<Decoded, Overflow> {
    let n = starts.len();
    let asked = |name: &str| want.contains(&name);
    let col = |name: &str| COLUMNS.iter().position(|c| *c == name).expect("a known column");
    let mut out = Decoded { verdicts: Vec::with_capacity(n), queue_offsets: Vec::with_capacity(n), ..Decoded::default() };
    let timed = bounds.t_lo > i64::MIN || bounds.t_hi < i64::MAX;
    let mut fixed: Vec<(usize, usize, Vec<u8>)> = Vec::new(); // (column, width, values)
    for (name, width) in [
        ("queueId", 4), ("flag", 4), ("queueOffset", 8), ("commitLogOffset", 8), ("sysFlag", 4),
        ("bodyCrc", 4), ("storeSize", 4), ("bornTimestamp", 8), ("storeTimestamp", 8), ("reconsumeTimes", 4),
    ] {
        if asked(name) {
            fixed.push((col(name), width, Vec::with_capacity(n * width)));
        }
    }
    let host = |name: &str| asked(name).then(|| Hosts { strings: Strings::new(n, n * 24, false), last: Vec::new(), text: Vec::new() });
    let (mut born_hosts, mut store_hosts) = (host("bornHost"), host("storeHost"));
    let mut bodies = asked("body").then(|| Strings::new(n, data.len(), false));
    let mut tags = asked("tags").then(|| Strings::new(n, n * 8, true));
    let mut uniqs = asked("uniqKey").then(|| Strings::new(n, n * 32, true));
    let mut ids = asked("msgId").then(|| Strings::new(n, n * 32, false));
    let new_nested = || Nested { offsets: vec![0], keys: Strings::new(n, n * 16, false), values: Strings::new(n, n * 16, false) };
    let mut keys = asked("keys").then(new_nested);
    let mut props = asked(PROPERTIES).then(new_nested);
    let read_props = tags.is_some() || uniqs.is_some() || ids.is_some() || keys.is_some() || props.is_some();
    let mut hex = Vec::with_capacity(56);

    for i in 0..n {
        let mut start = starts[i];
        if let Ok(s) = usize::try_from(start) {
            if s.checked_add(8).is_some_and(|e| e <= data.len()) && be_i32(data, s + 4) == Some(BLANK_MAGIC) {
                start += 16;
            }
        }
        let unit = unit_slice(data, start, sizes[i]);
        let queue_offset = if first_queue_offset >= 0 {
            first_queue_offset + i as i64
        } else {
            unit.and_then(|u| be_i64(u, QUEUE_OFFSET_POSITION)).unwrap_or(-1)
        };
        out.queue_offsets.push(queue_offset);
        let Some(unit) = unit.filter(|u| header_ok(u, sizes[i], queue_offset, flat[i])) else {
            out.verdicts.push(BAD_HEADER);
            continue;
        };
        let Some(u) = locate(unit) else {
            out.verdicts.push(BAD_LENGTHS);
            continue;
        };
        let store_ms = be_i64(unit, u.store_ts_at).expect("inside a unit whose lengths add up");
        let inside = queue_offset >= bounds.q_lo
            && queue_offset < bounds.q_hi
            && (!timed || (store_ms >= bounds.t_lo && store_ms < bounds.t_hi));
        if !inside {
            out.verdicts.push(OUTSIDE);
            continue;
        }
        if (crc32fast::hash(u.body) & 0x7fff_ffff) as i32 != be_i32(unit, 8).expect("a header") {
            out.verdicts.push(BAD_CRC);
            continue;
        }
        out.verdicts.push(KEPT);
        decode_fixed(&u, store_ms, &mut fixed);
        if let Some(h) = born_hosts.as_mut() {
            let width = if u.sys_flag & BORNHOST_V6_FLAG != 0 { 20 } else { 8 };
            h.push(&unit[BORN_HOST_AT..BORN_HOST_AT + width])?;
        }
        let store_host = &unit[u.store_host_at..u.store_host_at + u.store_width];
        if let Some(h) = store_hosts.as_mut() {
            h.push(store_host)?;
        }
        if let Some(b) = bodies.as_mut() {
            if u.sys_flag & COMPRESSED_FLAG == 0 {
                b.push(u.body)?;
            } else {
                b.mark(true);
                if !decompress(u.body, u.sys_flag, &mut b.data) {
                    out.compressed.push(b.rows() as i64);
                    b.data.extend_from_slice(u.body);
                }
                b.close()?;
            }
        }
        if !read_props {
            continue;
        }
        let text: Cow<'_, [u8]> = match std::str::from_utf8(u.props) {
            Ok(_) => Cow::Borrowed(u.props),
            Err(_) => Cow::Owned(String::from_utf8_lossy(u.props).into_owned().into_bytes()),
        };
        let (mut tag, mut uniq, mut key_text) = (None, None, None::<&[u8]>);
        for (name, value) in property_items(&text) {
            match name {
                b"TAGS" => tag = Some(value),
                b"UNIQ_KEY" => uniq = Some(value),
                b"KEYS" => key_text = Some(value),
                _ => {}
            }
            if let Some(p) = props.as_mut() {
                p.keys.push(name)?;
                p.values.push(value)?;
            }
        }
        if let Some(p) = props.as_mut() {
            p.offsets.push(count(p.keys.rows())?);
        }
        if let Some(t) = tags.as_mut() {
            t.push_opt(tag)?;
        }
        if let Some(q) = uniqs.as_mut() {
            q.push_opt(uniq)?;
        }
        if let Some(m) = ids.as_mut() {
            match uniq {
                Some(v) => m.push(v)?,
                None => {
                    // MessageDecoder.createMessageId: the store host field and the flat offset
                    hex.clear();
                    let phys = &unit[PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8];
                    for b in store_host.iter().chain(phys) {
                        hex.push(HEX[usize::from(b >> 4)]);
                        hex.push(HEX[usize::from(b & 15)]);
                    }
                    m.push(&hex)?;
                }
            }
        }
        if let Some(k) = keys.as_mut() {
            for token in key_text.unwrap_or_default().split(|&b| b == b' ') {
                if !token.is_empty() {
                    k.values.push(token)?;
                }
            }
            k.offsets.push(count(k.values.rows())?);
        }
    }

    out.fixed = fixed.into_iter().map(|(c, _, v)| (c, v)).collect();
    for (name, s) in [("bornHost", born_hosts.map(|h| h.strings)), ("storeHost", store_hosts.map(|h| h.strings))]
        .into_iter()
        .chain([("body", bodies), ("tags", tags), ("uniqKey", uniqs), ("msgId", ids)])
    {
        if let Some(s) = s {
            out.strings.push((col(name), s));
        }
    }
    out.keys = keys;
    out.properties = props;
    Ok(out)
}

/// Append the producer's body of a compressed unit to `out`, decompressed with the codec its
/// sysflag names (bits 8-10: 1 LZ4, 2 ZSTD, 3 or, in old units, 0 ZLIB), as Python's codecs read
/// it: the first frame or stream, what follows ignored. False (`out` as it was) for an unknown
/// codec or bytes that do not decompress whole: Python decompresses those, and raises what it
/// raises.
fn decompress(body: &[u8], sys_flag: i32, out: &mut Vec<u8>) -> bool {
    use std::io::Read;
    let start = out.len();
    let done = match (sys_flag & COMPRESSION_TYPE_MASK) >> 8 {
        0 | 3 => flate2::read::ZlibDecoder::new(body).read_to_end(out).is_ok(),
        1 => lz4_flex::frame::FrameDecoder::new(body).read_to_end(out).is_ok(),
        2 => ruzstd::decoding::StreamingDecoder::new(body).is_ok_and(|mut d| d.read_to_end(out).is_ok()),
        _ => false,
    };
    if !done {
        out.truncate(start);
    }
    done
}

fn count(rows: usize) -> Result<i32, Overflow> {
    i32::try_from(rows).map_err(|_| Overflow(rows))
}

fn decode_fixed(u: &Unit<'_>, store_ms: i64, fixed: &mut [(usize, usize, Vec<u8>)]) {
    let unit = u.unit;
    let i32_at = |at: usize| be_i32(unit, at).expect("inside the unit");
    let i64_at = |at: usize| be_i64(unit, at).expect("inside the unit");
    for (column, _, values) in fixed.iter_mut() {
        match *column {
            // the first ten of COLUMNS, in order; timestamps in microseconds
            0 => values.extend(i32_at(12).to_le_bytes()),
            1 => values.extend(i32_at(16).to_le_bytes()),
            2 => values.extend(i64_at(QUEUE_OFFSET_POSITION).to_le_bytes()),
            3 => values.extend(i64_at(PHYSICAL_OFFSET_POSITION).to_le_bytes()),
            4 => values.extend(u.sys_flag.to_le_bytes()),
            5 => values.extend(i32_at(8).to_le_bytes()),
            6 => values.extend(i32_at(0).to_le_bytes()),
            7 => values.extend(i64_at(40).wrapping_mul(1000).to_le_bytes()),
            8 => values.extend(store_ms.wrapping_mul(1000).to_le_bytes()),
            9 => values.extend(i32_at(u.tail_at).to_le_bytes()),
            other => unreachable!("{} is not a fixed-width column", COLUMNS[other]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::testing::{encode, Unit as Spec};

    fn batch(units: &[Vec<u8>]) -> (Vec<u8>, Vec<i64>, Vec<i64>, Vec<i64>) {
        let (mut data, mut starts, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        for u in units {
            starts.push(data.len() as i64);
            sizes.push(u.len() as i64);
            data.extend(u);
        }
        let flat = vec![0; units.len()];
        (data, starts, sizes, flat)
    }

    fn strings(s: &Strings) -> Vec<Option<String>> {
        (0..s.rows())
            .map(|r| {
                let valid = s.valid.as_ref().map_or(true, |v| v[r / 8] & (1 << (r % 8)) != 0);
                let (a, z) = (s.offsets[r] as usize, s.offsets[r + 1] as usize);
                valid.then(|| String::from_utf8(s.data[a..z].to_vec()).unwrap())
            })
            .collect()
    }

    fn column<'a>(d: &'a Decoded, name: &str) -> &'a Strings {
        let c = COLUMNS.iter().position(|c| *c == name).unwrap();
        &d.strings.iter().find(|(i, _)| *i == c).unwrap().1
    }

    #[test]
    fn properties_follow_string2message_properties() {
        let units: Vec<Vec<u8>> = [
            &b"TAGS\x01A\x02KEYS\x01k1  k2\x02UNIQ_KEY\x01U1\x02"[..],
            b"TAGS\x01A\x02TAGS\x01B\x02\x01x\x02y\x01\x02z\x02a\x01b\x01c",
            b"TAGS\x01\xff\xfe\x02",
            b"",
        ]
        .iter()
        .map(|p| encode(&Spec { properties: p, ..Spec::default() }))
        .collect();
        let (data, starts, sizes, flat) = batch(&units);
        let want = ["tags", "uniqKey", "keys", "msgId", PROPERTIES];
        let d = decode(&data, &starts, &sizes, -1, &flat, Bounds::ALL, &want).unwrap();
        assert_eq!(d.verdicts, vec![KEPT; 4]);
        let some = |s: &str| Some(s.to_string());
        assert_eq!(strings(column(&d, "tags")), vec![some("A"), some("B"), some("\u{fffd}\u{fffd}"), None]);
        assert_eq!(strings(column(&d, "uniqKey")), vec![some("U1"), None, None, None]);
        let ids = strings(column(&d, "msgId"));
        assert_eq!(ids[0], some("U1"));
        assert_eq!(ids[1], some("02020202020202020000000000000000")); // store host, flat offset
        let k = d.keys.as_ref().unwrap();
        assert_eq!(k.offsets, vec![0, 2, 2, 2, 2]);
        assert_eq!(strings(&k.values), vec![some("k1"), some("k2")]);
        let p = d.properties.as_ref().unwrap();
        assert_eq!(p.offsets, vec![0, 3, 6, 7, 7]);
        assert_eq!(strings(&p.keys)[3..6], [some("TAGS"), some("TAGS"), some("a")]);
        assert_eq!(strings(&p.values)[3..6], [some("A"), some("B"), some("b\u{1}c")]);
    }

    #[test]
    fn units_are_checked_in_order_and_bounded() {
        let ok = |q: i64| encode(&Spec { queue_offset: q, ..Spec::default() });
        let mut bad_crc = ok(2);
        let body_at = bad_crc.windows(5).position(|w| w == b"hello").unwrap();
        bad_crc[body_at] ^= 1;
        let mut bad_len = ok(3);
        let last = bad_len.len() - 1;
        bad_len[last] = 1; // the properties length (of none) says 1
        let (data, starts, sizes, flat) = batch(&[ok(0), ok(1), bad_crc, bad_len, ok(9)]);
        let d = decode(&data, &starts, &sizes, 0, &flat, Bounds::ALL, &["queueOffset"]).unwrap();
        assert_eq!(d.verdicts, vec![KEPT, KEPT, BAD_CRC, BAD_LENGTHS, BAD_HEADER]);
        assert_eq!(d.queue_offsets, vec![0, 1, 2, 3, 4]);
        assert_eq!(d.fixed[0].1, [0i64.to_le_bytes(), 1i64.to_le_bytes()].concat());
        let from_units = decode(&data, &starts, &sizes, -1, &flat, Bounds::ALL, &[]).unwrap();
        assert_eq!(from_units.verdicts, vec![KEPT, KEPT, BAD_CRC, BAD_LENGTHS, KEPT]);
        assert_eq!(from_units.queue_offsets, vec![0, 1, 2, 3, 9]);
        let b = Bounds { q_lo: 1, q_hi: 3, ..Bounds::ALL };
        let d = decode(&data, &starts, &sizes, 0, &flat, b, &[]).unwrap();
        assert_eq!(d.verdicts, vec![OUTSIDE, KEPT, BAD_CRC, BAD_LENGTHS, BAD_HEADER]);
        let t = Bounds { t_lo: 1_700_000_000_002, ..Bounds::ALL };
        let d = decode(&data, &starts, &sizes, -1, &flat, t, &[]).unwrap();
        assert_eq!(d.verdicts, vec![OUTSIDE, OUTSIDE, OUTSIDE, BAD_LENGTHS, OUTSIDE]);
        let torn = decode(&data[..data.len() - 1], &starts, &sizes, 0, &flat, Bounds::ALL, &[]).unwrap();
        assert_eq!(torn.verdicts[4], BAD_HEADER);
    }

    #[test]
    fn hosts_are_written_as_python_writes_them() {
        let text = |raw: &[u8]| {
            let mut out = Vec::new();
            format_host(raw, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(text(&[10, 0, 0, 255, 0, 0, 0x2a, 0x9f]), "10.0.0.255:10911");
        assert_eq!(text(&[1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff]), "1.2.3.4:-1");
        let v6 = |groups: [u16; 8]| {
            let mut raw: Vec<u8> = groups.iter().flat_map(|g| g.to_be_bytes()).collect();
            raw.extend(8080i32.to_be_bytes());
            text(&raw)
        };
        assert_eq!(v6([0; 8]), "[::]:8080");
        assert_eq!(v6([1, 0, 0, 0, 0, 0, 0, 0]), "[1::]:8080");
        assert_eq!(v6([0, 0, 0, 0, 0, 0, 0, 1]), "[::1]:8080");
        assert_eq!(v6([0, 0, 1, 0, 0, 1, 0, 0]), "[::1:0:0:1:0:0]:8080");
        assert_eq!(v6([1, 0, 1, 0, 1, 0, 1, 0]), "[1:0:1:0:1:0:1:0]:8080");
        assert_eq!(v6([0xfe80, 0, 0, 0, 0xabc, 0, 0, 0xffff]), "[fe80::abc:0:0:ffff]:8080");
        assert_eq!(v6([0, 0, 0, 0, 0, 0xffff, 0x102, 0x304]), "[::ffff:102:304]:8080");
    }

    #[test]
    fn bodies_are_decompressed_and_what_does_not_decompress_is_named() {
        let mut zlib = Vec::new();
        let mut z = flate2::write::ZlibEncoder::new(&mut zlib, flate2::Compression::default());
        std::io::Write::write_all(&mut z, b"hello, compressed").unwrap();
        z.finish().unwrap();
        zlib.extend(b"ignored");
        let lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        let mut lz4 = {
            let mut e = lz4;
            std::io::Write::write_all(&mut e, b"hello, lz4").unwrap();
            e.finish().unwrap()
        };
        lz4.extend(lz4.clone()); // a second frame: not read
        let units = [
            encode(&Spec::default()),
            encode(&Spec { sys_flag: COMPRESSED_FLAG, body: b"not zlib", ..Spec::default() }),
            encode(&Spec { sys_flag: COMPRESSED_FLAG | 3 << 8, body: &zlib, ..Spec::default() }),
            encode(&Spec { sys_flag: COMPRESSED_FLAG | 1 << 8, body: &lz4, ..Spec::default() }),
            encode(&Spec { sys_flag: COMPRESSED_FLAG | 7 << 8, ..Spec::default() }),
        ];
        let (data, starts, sizes, flat) = batch(&units);
        let d = decode(&data, &starts, &sizes, -1, &flat, Bounds::ALL, &["body"]).unwrap();
        assert_eq!(d.compressed, vec![1, 4]);
        let bodies = strings(column(&d, "body"));
        let want = ["hello", "not zlib", "hello, compressed", "hello, lz4", "hello"];
        assert_eq!(bodies, want.map(|b| Some(b.to_string())));
        let mut s = Strings::new(1, 0, false);
        s.data = vec![0; i32::MAX as usize + 1]; // calloc'd: its pages are never touched
        assert_eq!(s.close(), Err(Overflow(i32::MAX as usize + 1)));
    }
}

#[cfg(feature = "python")]
#[path = "decode_python.rs"]
pub mod python;
