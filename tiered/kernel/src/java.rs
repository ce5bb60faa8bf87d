//! The Java arithmetic the index's bytes depend on (spec §6.4, §6.8): `String.hashCode` over
//! UTF-16 code units, `Character.isWhitespace`, the tiered index's sign rule and the bucket a
//! `HashSet` puts a key in.

/// `h * 31 + unit` over the units, wrapping as Java's `int` does (kept unsigned here).
#[inline]
pub fn hash_units(mut h: u32, units: impl Iterator<Item = u16>) -> u32 {
    for u in units {
        h = h.wrapping_mul(31).wrapping_add(u32::from(u));
    }
    h
}

/// `String.hashCode` of ASCII bytes (one UTF-16 unit each). Four bytes a step:
/// `h * 31^4 + b0 * 31^3 + b1 * 31^2 + b2 * 31 + b3`, so the chain of dependent multiplies is a
/// quarter as long (a 32-byte `UNIQ_KEY` hashed one byte a step is a chain of 32).
#[inline]
pub fn hash_ascii(bytes: &[u8]) -> u32 {
    const P2: u32 = 31 * 31;
    const P3: u32 = P2 * 31;
    const P4: u32 = P3 * 31;
    let mut h = 0u32;
    let mut chunks = bytes.chunks_exact(4);
    for c in &mut chunks {
        let (b0, b1, b2, b3) = (u32::from(c[0]), u32::from(c[1]), u32::from(c[2]), u32::from(c[3]));
        let tail = b0.wrapping_mul(P3).wrapping_add(b1.wrapping_mul(P2)).wrapping_add(b2.wrapping_mul(31)).wrapping_add(b3);
        h = h.wrapping_mul(P4).wrapping_add(tail);
    }
    for &b in chunks.remainder() {
        h = h.wrapping_mul(31).wrapping_add(u32::from(b));
    }
    h
}

/// `31**n` modulo 2**32 for `n` below 64, computed at build time: almost every key is shorter,
/// so almost no key pays for the loop below.
const POW31: [u32; 64] = {
    let mut table = [1u32; 64];
    let mut i = 1;
    while i < 64 {
        table[i] = table[i - 1].wrapping_mul(31);
        i += 1;
    }
    table
};

/// `31**n` modulo 2**32.
#[inline]
pub fn pow31(n: u32) -> u32 {
    match POW31.get(n as usize) {
        Some(&p) => p,
        None => pow31_loop(n),
    }
}

#[inline(never)]
fn pow31_loop(mut n: u32) -> u32 {
    let (mut base, mut acc) = (31u32, 1u32);
    while n > 0 {
        if n & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        n >>= 1;
    }
    acc
}

/// `IndexStoreFile.hashCode`: a negative hash is negated, so `Integer.MIN_VALUE` stays negative.
#[inline]
pub fn tiered_hash(h: u32) -> i32 {
    let signed = h as i32;
    if signed == i32::MIN {
        signed
    } else {
        signed.abs()
    }
}

/// `Character.isWhitespace` of a code point (what `StringUtils.isBlank` tests each char for):
/// the space separators except the no-break ones, line and paragraph separators, and the
/// controls 9..13 and 28..31.
#[inline]
pub fn is_java_whitespace(c: u32) -> bool {
    matches!(
        c,
        0x09..=0x0d
            | 0x1c..=0x20
            | 0x1680
            | 0x2000..=0x2006
            | 0x2008..=0x200a
            | 0x2028
            | 0x2029
            | 0x205f
            | 0x3000
    )
}

/// The smallest table of a `HashSet` grown from 16 that holds `size` keys without resizing
/// (doubled while `size > 0.75 * table`).
#[inline]
pub fn hashset_table(size: usize) -> u32 {
    let mut table = 16u64;
    while size as u64 > table * 3 / 4 {
        table *= 2;
    }
    table.min(1 << 30) as u32
}

/// The bucket of a key of `String.hashCode` `h` in a table of `table` slots.
#[inline]
pub fn hashset_bucket(h: u32, table: u32) -> u32 {
    (h ^ (h >> 16)) & (table - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn java_hash(s: &str) -> i32 {
        hash_units(0, s.encode_utf16()) as i32
    }

    #[test]
    fn pow31_table_equals_the_loop() {
        for n in 0..200u32 {
            assert_eq!(pow31(n), pow31_loop(n), "31^{n}");
            assert_eq!(pow31(n), (0..n).fold(1u32, |p, _| p.wrapping_mul(31)), "31^{n}");
        }
    }

    #[test]
    fn four_bytes_a_step_equals_one_byte_a_step() {
        let text: Vec<u8> = (0..64u32).map(|i| (i * 37 % 95 + 32) as u8).collect();
        for len in 0..text.len() {
            let bytes = &text[..len];
            let one = bytes.iter().fold(0u32, |h, &b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
            assert_eq!(hash_ascii(bytes), one, "{len} bytes");
        }
    }

    #[test]
    fn string_hash_code_matches_java() {
        // values printed by Java's "…".hashCode()
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("TopicTest#key"), "TopicTest#key".encode_utf16().fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(u as i32)));
        assert_eq!(java_hash("hello"), 99162322);
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
        assert_eq!(hash_ascii(b"hello") as i32, 99162322);
    }

    #[test]
    fn a_surrogate_pair_hashes_as_two_units() {
        let rocket = "\u{1f680}";
        assert_eq!(rocket.encode_utf16().count(), 2);
        assert_eq!(java_hash(rocket), 0xd83d_i32 * 31 + 0xde80);
    }

    #[test]
    fn prefix_extension_is_the_hash_of_the_concatenation() {
        let (p, k) = ("TopicTest#", "key-1");
        let whole = hash_ascii(format!("{p}{k}").as_bytes());
        assert_eq!(hash_ascii(p.as_bytes()).wrapping_mul(pow31(k.len() as u32)).wrapping_add(hash_ascii(k.as_bytes())), whole);
    }

    #[test]
    fn sign_rule() {
        assert_eq!(tiered_hash(5), 5);
        assert_eq!(tiered_hash((-5i32) as u32), 5);
        assert_eq!(tiered_hash(i32::MIN as u32), i32::MIN);
    }

    #[test]
    fn whitespace_is_javas() {
        for c in [0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1f, 0x20, 0x2028, 0x3000] {
            assert!(is_java_whitespace(c), "{c:#x}");
        }
        for c in [0x00, 0x08, 0x21, 0x85, 0xa0, 0x2007, 0x202f, 0xfeff] {
            assert!(!is_java_whitespace(c), "{c:#x}");
        }
    }

    #[test]
    fn hashset_tables_grow_as_javas() {
        assert_eq!(hashset_table(0), 16);
        assert_eq!(hashset_table(12), 16);
        assert_eq!(hashset_table(13), 32);
        assert_eq!(hashset_table(25), 64);
    }
}
