//! Tag filtering of a batch of stored units (spec §9.2): whether each unit's `TAGS` property is
//! one of a subscription's tags, confirming the consumequeue's tag-code match (two tags can
//! share a code).
//!
//! `TAGS` is read as `string2messageProperties` reads it: items cut at `\x02`, the name up to
//! the first `\x01`, an empty value dropped, a later item replacing an earlier one.

use crate::unit::{properties, unit_slice};

const ITEM_SEPARATOR: u8 = 2;
const TAGS_NAME: &[u8] = b"TAGS\x01";

/// A unit's verdict: its `TAGS` is not one of the wanted tags (or it has none).
pub const NO: u8 = 0;
/// Its `TAGS` is one of the wanted tags.
pub const YES: u8 = 1;
/// Undecided here: its `TAGS` is not valid UTF-8 (Java decodes it with replacement characters)
/// or its field lengths do not add up; the caller decodes the message.
pub const ASK: u8 = 2;

/// The last non-empty `TAGS` value of a property section.
fn tags_value(props: &[u8]) -> Option<&[u8]> {
    props
        .split(|&b| b == ITEM_SEPARATOR)
        .filter(|item| item.len() > TAGS_NAME.len() && item.starts_with(TAGS_NAME))
        .last()
        .map(|item| &item[TAGS_NAME.len()..])
}

/// For each unit `(starts[i], sizes[i])` of `data`: [`YES`], [`NO`] or [`ASK`] whether its
/// `TAGS` is one of `wanted` (UTF-8 bytes).
pub fn tags_in(data: &[u8], starts: &[i64], sizes: &[i64], wanted: &[Vec<u8>]) -> Vec<u8> {
    starts
        .iter()
        .zip(sizes)
        .map(|(&s, &z)| match unit_slice(data, s, z).and_then(properties) {
            None => ASK,
            Some(props) => match tags_value(props) {
                None => NO,
                Some(v) if std::str::from_utf8(v).is_err() => ASK,
                Some(v) => u8::from(wanted.iter().any(|w| w.as_slice() == v)),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::testing::{encode, Unit};

    fn batch(props: &[&[u8]]) -> (Vec<u8>, Vec<i64>, Vec<i64>) {
        let (mut data, mut starts, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        for p in props {
            let unit = encode(&Unit { properties: p, ..Unit::default() });
            starts.push(data.len() as i64);
            sizes.push(unit.len() as i64);
            data.extend(unit);
        }
        (data, starts, sizes)
    }

    #[test]
    fn tags_are_read_as_java_reads_properties() {
        let (data, starts, sizes) = batch(&[
            b"TAGS\x01A\x02",
            b"TAGS\x01B\x02",
            b"KEYS\x01A\x02",
            b"TAGS\x01A\x02TAGS\x01B\x02",  // the later item wins
            b"TAGS\x01B\x02TAGS\x01\x02",   // an empty value is dropped
            b"TAGS\x01\xff\x02",            // not UTF-8: the caller decides
            b"TAGSX\x01A\x02",
            "TAGS\x01\u{4e2d}\x02".as_bytes(),
            b"",
        ]);
        let wanted = vec![b"A".to_vec(), "\u{4e2d}".as_bytes().to_vec()];
        assert_eq!(tags_in(&data, &starts, &sizes, &wanted), vec![YES, NO, NO, NO, NO, ASK, NO, YES, NO]);
    }

    #[test]
    fn a_torn_unit_is_asked_about() {
        let (data, starts, sizes) = batch(&[b"TAGS\x01A\x02"]);
        let wanted = vec![b"A".to_vec()];
        assert_eq!(tags_in(&data[..data.len() - 1], &starts, &sizes, &wanted), vec![ASK]);
        assert_eq!(tags_in(&data, &[-1], &sizes, &wanted), vec![ASK]);
        assert_eq!(tags_in(&data, &[0], &[sizes[0] - 1], &wanted), vec![ASK]);
    }
}
