//! fastjson's pretty layout (spec §5: the metadata JSON) of JSON written with one space of
//! indentation per level and `": "` after keys (msgspec's `json.format` with `indent=1`).

/// `src` with each line's leading spaces turned into as many TABs and the space after each key's
/// `:` dropped; the text of strings is copied as it is (a string is followed byte by byte, its
/// escapes included, so a quote, colon or space inside it is never taken for layout).
pub fn fastjson_layout(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    let (mut in_string, mut escaped) = (false, false);
    let (mut line_start, mut after_colon) = (false, false);
    for &b in src {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
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
        in_string = b == b'"';
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::fastjson_layout;

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
