//! fastjson's pretty layout (spec §5: the metadata JSON) of JSON written with one space of
//! indentation per level and `": "` after keys (msgspec's `json.format` with `indent=1`).

/// `src` with each line's leading spaces turned into as many TABs and the space after each key's
/// `:` dropped; the text of strings is copied as it is (a string is followed byte by byte, its
/// escapes included, so a quote, colon or space inside it is never taken for layout).
pub fn fastjson_layout(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    let mut strings = Strings::default();
    let (mut line_start, mut after_colon) = (false, false);
    for &b in src {
        if strings.take(b) {
            out.push(b);
            (line_start, after_colon) = (false, false);
            continue;
        }
        if b == b' ' && line_start {
            out.push(b'\t');
            continue;
        }
        if b == b' ' && after_colon {
            after_colon = false;
            continue;
        }
        line_start = b == b'\n';
        after_colon = b == b':';
        out.push(b);
    }
    out
}

/// Follows the string literals of JSON text byte by byte, escapes included.
#[derive(Default)]
struct Strings {
    in_string: bool,
    escaped: bool,
}

impl Strings {
    /// Whether `b`, the next byte, belongs to a string literal (its quotes included).
    fn take(&mut self, b: u8) -> bool {
        if !self.in_string {
            self.in_string = b == b'"';
            return self.in_string;
        }
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
        }
        true
    }
}

/// Just past the string literal whose opening quote is at `start`, if one is closed there: any
/// bytes but a quote or a backslash, and a backslash with the byte after it unless that is a line
/// break. Where none is closed (damaged text) the quote is an ordinary byte, as it is for the
/// regular expression `parse_fastjson` holds this to.
fn string_end(src: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    while j < src.len() {
        match src[j] {
            b'"' => return Some(j + 1),
            b'\\' if j + 1 < src.len() && src[j + 1] != b'\n' => j += 2,
            b'\\' => return None,
            _ => j += 1,
        }
    }
    None
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `src` with fastjson's bare integer map keys quoted (`{0:1}` -> `{"0":1}`): an optional `-` and
/// digits right after `{` or `,` (spaces around them allowed) and followed by `:`. Strings are
/// copied as they are, so digits and colons inside them are never taken for a key.
pub fn quote_bare_keys(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() + src.len() / 16);
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        if b == b'"' {
            if let Some(end) = string_end(src, i) {
                out.extend_from_slice(&src[i..end]);
                i = end;
                continue;
            }
        }
        out.push(b);
        i += 1;
        if b != b'{' && b != b',' {
            continue;
        }
        // a bare key: spaces, -?digits, spaces, then ':'
        let mut j = i;
        while j < src.len() && is_space(src[j]) {
            j += 1;
        }
        let key_start = j;
        if j < src.len() && src[j] == b'-' {
            j += 1;
        }
        let digits = j;
        while j < src.len() && src[j].is_ascii_digit() {
            j += 1;
        }
        if j == digits {
            continue;
        }
        let key_end = j;
        while j < src.len() && is_space(src[j]) {
            j += 1;
        }
        if j < src.len() && src[j] == b':' {
            out.extend_from_slice(&src[i..key_start]);
            out.push(b'"');
            out.extend_from_slice(&src[key_start..key_end]);
            out.push(b'"');
            out.extend_from_slice(&src[key_end..=j]);
            i = j + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::fastjson_layout;
    use super::quote_bare_keys;

    fn quoted(s: &str) -> String {
        String::from_utf8(quote_bare_keys(s.as_bytes())).unwrap()
    }

    #[test]
    fn bare_keys_are_quoted_and_nothing_else_is() {
        assert_eq!(
            quoted("{0:{1:2},\"a\":[3,4],-5 :6}"),
            "{\"0\":{\"1\":2},\"a\":[3,4],\"-5\" :6}"
        );
        assert_eq!(
            quoted("{\n\t7\t:\"{8:9,10:\\\"\"}"),
            "{\n\t\"7\"\t:\"{8:9,10:\\\"\"}"
        );
        assert_eq!(quoted("{-:1,2 3:4,"), "{-:1,2 3:4,");
    }

    #[test]
    fn an_unclosed_quote_is_an_ordinary_byte() {
        assert_eq!(quoted("\",0:"), "\",\"0\":");
        assert_eq!(quoted("{\"a\\\n\",1:2}"), "{\"a\\\n\",\"1\":2}");
        assert_eq!(quoted("{\"a,1:\"}"), "{\"a,1:\"}");
    }

    fn layout(s: &str) -> String {
        String::from_utf8(fastjson_layout(s.as_bytes())).unwrap()
    }

    #[test]
    fn indentation_becomes_tabs_and_keys_lose_their_space() {
        let src = "{\n \"a\": {\n  \"b\": [\n   1,\n   2\n  ]\n },\n \"c\": \"x\"\n}";
        let want = "{\n\t\"a\":{\n\t\t\"b\":[\n\t\t\t1,\n\t\t\t2\n\t\t]\n\t},\n\t\"c\":\"x\"\n}";
        assert_eq!(layout(src), want);
    }

    #[test]
    fn strings_keep_their_spaces_colons_and_escaped_quotes() {
        let src = "{\n \": t\\\" \": \"we\\\": \\\\\\\": é \",\n \"k\": \"\\\\\"\n}";
        let want = "{\n\t\": t\\\" \":\"we\\\": \\\\\\\": é \",\n\t\"k\":\"\\\\\"\n}";
        assert_eq!(layout(src), want);
    }
}
