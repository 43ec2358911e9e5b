//! Checking that bytes are JSON text (RFC 8259) without building anything,
//! as serde_json checks what it reads as a raw value: structure, strings
//! (no control characters, escapes of the known forms), numbers, literals
//! and UTF-8. Like that reading, it does not check what only decoding
//! finds (what a `\u` escape encodes, whether a number is in range, how
//! deep the nesting goes): [`crate::object`] looks for those apart.
//!
//! A member's watch events are checked so, one line each, instead of
//! serde_json reading each line ([`split_watch_line`]): the walk that
//! ingests an object ([`crate::scan`]) then relies on the check. It costs
//! a fraction of serde_json's reading: strings, most of an object's bytes,
//! are searched eight bytes at a time.
//! <https://www.rfc-editor.org/rfc/rfc8259>

use crate::skip::{bytes_equal, skip_ws, HIGHS, ONES};

/// The high bit of each byte of `word` below `limit` (at most 128; exact up
/// to the first such byte).
fn bytes_below(word: u64, limit: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGHS
}

/// The index of the first quote, backslash or control character at or
/// after `j`.
fn string_stop(text: &[u8], mut j: usize) -> Option<usize> {
    while let Some(chunk) = text.get(j..j + 8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else { break };
        let word = u64::from_le_bytes(bytes);
        // The lowest mark of the three is a true one: each is exact up to its first.
        let found = bytes_equal(word, b'"') | bytes_equal(word, b'\\') | bytes_below(word, 0x20);
        if found != 0 {
            return Some(j + (found.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    Some(j + text.get(j..)?.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)?)
}

/// The index after the string that opens at `i` (a quote), if it is one.
fn check_string(text: &[u8], i: usize) -> Option<usize> {
    check_string_escaped(text, i).map(|(end, _)| end)
}

/// [`check_string`], and whether the string has an escape.
pub(crate) fn check_string_escaped(text: &[u8], i: usize) -> Option<(usize, bool)> {
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        j = string_stop(text, j)?;
        match text[j] {
            b'"' => return Some((j + 1, escaped)),
            b'\\' => match *text.get(j + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => (j, escaped) = (j + 2, true),
                b'u' if text.get(j + 2..j + 6)?.iter().all(u8::is_ascii_hexdigit) => (j, escaped) = (j + 6, true),
                _ => return None,
            },
            // A control character.
            _ => return None,
        }
    }
}

/// The index after the digits at `j`.
fn digits_end(text: &[u8], mut j: usize) -> usize {
    while text.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    j
}

/// The index after the number at `i`, if it is one:
/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn check_number(text: &[u8], i: usize) -> Option<usize> {
    let mut j = i + usize::from(text.get(i) == Some(&b'-'));
    j = match *text.get(j)? {
        b'0' => j + 1,
        b'1'..=b'9' => digits_end(text, j + 1),
        _ => return None,
    };
    if text.get(j) == Some(&b'.') {
        let end = digits_end(text, j + 1);
        if end == j + 1 {
            return None;
        }
        j = end;
    }
    if matches!(text.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(text.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let end = digits_end(text, j);
        if end == j {
            return None;
        }
        j = end;
    }
    Some(j)
}

/// The index after the member name at `i` and its colon, if they are there.
fn check_name(text: &[u8], i: usize) -> Option<usize> {
    if text.get(i) != Some(&b'"') {
        return None;
    }
    let j = skip_ws(text, check_string(text, i)?);
    (text.get(j) == Some(&b':')).then_some(j + 1)
}

/// The index after the JSON value at `i` (no whitespace before it), if
/// there is one; its UTF-8 is not checked (see [`check`]). Nesting of any
/// depth is followed without recursion.
pub fn check_value(text: &[u8], i: usize) -> Option<usize> {
    check_value_doubting(text, i, 0, &mut false)
}

/// [`check_value`] of a value `depth` deep; sets `doubt` when it holds a
/// number or nesting decoding could refuse (see [`crate::scan::split_pruned`]).
pub(crate) fn check_value_doubting(text: &[u8], i: usize, depth: usize, doubt: &mut bool) -> Option<usize> {
    // Open containers, innermost last: true for an object.
    let mut open: Vec<bool> = Vec::new();
    let mut j = i;
    loop {
        // A value at `j`.
        j = skip_ws(text, j);
        match *text.get(j)? {
            bracket @ (b'{' | b'[') => {
                let object = bracket == b'{';
                j = skip_ws(text, j + 1);
                if text.get(j) == Some(if object { &b'}' } else { &b']' }) {
                    j += 1;
                } else {
                    open.push(object);
                    *doubt |= depth + open.len() >= crate::skip::DOUBTFUL_DEPTH;
                    if object {
                        j = check_name(text, j)?;
                    }
                    continue;
                }
            }
            b'"' => j = check_string(text, j)?,
            b't' => j = literal(text, j, b"true")?,
            b'f' => j = literal(text, j, b"false")?,
            b'n' => j = literal(text, j, b"null")?,
            b'-' | b'0'..=b'9' => {
                let end = check_number(text, j)?;
                *doubt |= crate::skip::doubtful_number(&text[j..end]);
                j = end;
            }
            _ => return None,
        }
        // After a value: the containers it closes, then a comma or the end.
        loop {
            let Some(&object) = open.last() else { return Some(j) };
            j = skip_ws(text, j);
            match (object, *text.get(j)?) {
                (true, b',') => {
                    j = check_name(text, skip_ws(text, j + 1))?;
                    break;
                }
                (false, b',') => {
                    j += 1;
                    break;
                }
                (true, b'}') | (false, b']') => {
                    open.pop();
                    j += 1;
                }
                _ => return None,
            }
        }
    }
}

/// The index after `word` at `i`, if it is there.
fn literal(text: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (text.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// Whether `text` is one JSON value, with whitespace around it only.
pub fn check(text: &[u8]) -> bool {
    std::str::from_utf8(text).is_ok()
        && check_value(text, skip_ws(text, 0)).is_some_and(|end| skip_ws(text, end) == text.len())
}

/// A line of a watch stream (`metav1.WatchEvent`: `{"type": ..., "object":
/// ...}`) checked as serde_json reads it into a struct of those two
/// members: other members are checked and skipped, a repeated one is
/// refused, `type` is a string without escapes. Its type and the text of
/// its object, whose end is found but which is **not checked**: the line
/// is JSON if and only if that text is ([`check`]; an object to ingest is
/// checked by the walk that ingests it, [`crate::object::ingest_unchecked`]).
/// `None` when serde_json would refuse the line, and for lines it reads
/// otherwise than this check (a member name with escapes): the caller asks
/// serde_json then, which tells why.
pub fn split_watch_line(line: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(line).ok()?;
    let line = text.as_bytes();
    let mut j = skip_ws(line, 0);
    if line.get(j) != Some(&b'{') {
        return None;
    }
    let (mut event_type, mut object) = (None, None);
    j = skip_ws(line, j + 1);
    if line.get(j) != Some(&b'}') {
        loop {
            if line.get(j) != Some(&b'"') {
                return None;
            }
            let name_end = check_string(line, j)?;
            let name = &line[j + 1..name_end - 1];
            if name.contains(&b'\\') {
                return None;
            }
            j = skip_ws(line, name_end);
            if line.get(j) != Some(&b':') {
                return None;
            }
            let start = skip_ws(line, j + 1);
            let end = match name {
                // Found, not checked (see above).
                b"object" => crate::skip::value_end(line, start, 1, &mut false)?,
                _ => check_value(line, start)?,
            };
            let value = &text[start..end];
            match name {
                b"type" if event_type.is_none() => {
                    let inner = value.strip_prefix('"')?.strip_suffix('"')?;
                    if inner.contains('\\') {
                        return None;
                    }
                    event_type = Some(inner);
                }
                b"object" if object.is_none() => object = Some(value),
                // Repeated.
                b"type" | b"object" => return None,
                _ => {}
            }
            j = skip_ws(line, end);
            match line.get(j) {
                Some(b',') => j = skip_ws(line, j + 1),
                Some(b'}') => break,
                _ => return None,
            }
        }
    }
    if skip_ws(line, j + 1) != line.len() {
        return None;
    }
    Some((event_type?, object?))
}

/// [`split_watch_line`] for a line as Kubernetes writes one,
/// `{"type":"<type>","object":<object>}` (whitespace allowed where JSON
/// allows it): the object is taken to run up to the line's last closing
/// brace, without reading it. Nothing of the object is checked, not even
/// its UTF-8: the line is a watch event of that type if and only if the
/// object's text is JSON ([`check`]), which a caller that finds it is not
/// learns from [`split_watch_line`] or serde_json (the line may have
/// members after the object).
pub fn split_canonical_watch_line(line: &[u8]) -> Option<(&str, &[u8])> {
    let mut j = skip_ws(line, 0);
    let expect = |line: &[u8], j: usize, what: &[u8]| -> Option<usize> {
        let j = skip_ws(line, j);
        (line.get(j..j + what.len())? == what).then_some(j + what.len())
    };
    j = expect(line, j, b"{")?;
    j = expect(line, j, b"\"type\"")?;
    j = expect(line, j, b":")?;
    let start = skip_ws(line, j);
    if line.get(start) != Some(&b'"') {
        return None;
    }
    let end = check_string(line, start)?;
    let event_type = std::str::from_utf8(&line[start + 1..end - 1]).ok().filter(|t| !t.contains('\\'))?;
    j = expect(line, end, b",")?;
    j = expect(line, j, b"\"object\"")?;
    j = expect(line, j, b":")?;
    let start = skip_ws(line, j);
    let mut close = line.len();
    while close > start && matches!(line[close - 1], b' ' | b'\n' | b'\r' | b'\t') {
        close -= 1;
    }
    if close <= start || line[close - 1] != b'}' {
        return None;
    }
    let mut end = close - 1;
    while end > start && matches!(line[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
        end -= 1;
    }
    (end > start).then_some((event_type, &line[start..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether serde_json reads `text` as a raw value.
    fn serde_reads(text: &[u8]) -> bool {
        serde_json::from_slice::<&serde_json::value::RawValue>(text).is_ok()
    }

    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(rename = "type")]
        event_type: &'a str,
        #[serde(borrow)]
        object: &'a serde_json::value::RawValue,
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Bytes that change what a JSON reader decides.
    const TOKENS: &[&[u8]] = &[
        b"\"", b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"\n", b"\t", b"\x01", b"\x1f", b"\x7f", b"0", b"-", b"+", b".", b"e",
        b"E", b"1", b"true", b"fals", b"null", b"\\u", b"\\u12", b"\\uD83D", b"\\x", b"\\/", b"\xc3\xa9", b"\xc3", b"\xff", b"\xe2\x82",
        b"01", b"-0", b"1e", b"1.", b".5", b"1e+5", b"\"a\":", b"\"type\":\"ADDED\"", b"\"object\":{}", b"\"typ\\u0065\":\"X\"",
    ];

    fn corpus() -> Vec<Vec<u8>> {
        let mut texts: Vec<Vec<u8>> = crate::fixtures::API_TYPES.iter().map(|(file, ..)| crate::fixtures::read(file)).collect();
        for text in [
            &br#"{"a":[1,-2.5e+3,0,-0,0.0e0,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"],"b":{},"c":[]}"#[..],
            br#"  [ { "k" : "v" } , [ ] , "" ]  "#,
            br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#,
            br#"{"object":{"x":1},"extra":[1,{"y":null}],"type":"MODIFIED"}"#,
            b"\"\xc3\xa9t\xc3\xa9\"",
            b"123456789012345678901234567890",
        ] {
            texts.push(text.to_vec());
        }
        texts
    }

    fn mutate(rng: &mut Rng, text: &[u8]) -> Vec<u8> {
        let mut out = text.to_vec();
        for _ in 0..=rng.below(3) {
            let at = rng.below(out.len() + 1);
            match rng.below(3) {
                0 if !out.is_empty() => {
                    let at = at.min(out.len() - 1);
                    let end = (at + 1 + rng.below(4)).min(out.len());
                    out.drain(at..end);
                }
                1 if at < out.len() => out[at] = TOKENS[rng.below(TOKENS.len())][0],
                _ => {
                    let token = TOKENS[rng.below(TOKENS.len())];
                    out.splice(at..at, token.iter().copied());
                }
            }
        }
        out
    }

    #[test]
    fn check_decides_as_serde_json_reads_raw_values() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let corpus = corpus();
        let (mut accepted, mut refused) = (0, 0);
        for text in &corpus {
            assert!(check(text), "{}", String::from_utf8_lossy(text));
            for _ in 0..3000 {
                let mutated = mutate(&mut rng, text);
                let expected = serde_reads(&mutated);
                assert_eq!(check(&mutated), expected, "{:?}", String::from_utf8_lossy(&mutated));
                if expected {
                    accepted += 1;
                } else {
                    refused += 1;
                }
            }
        }
        // Both outcomes are exercised.
        assert!(accepted > 1000 && refused > 1000, "accepted {accepted}, refused {refused}");
        // Nesting of any depth is read (serde_json reads raw values so).
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        assert!(check(deep.as_bytes()) && serde_reads(deep.as_bytes()));
        assert!(!check(format!("{}{}", "[".repeat(5000), "]".repeat(4999)).as_bytes()));
    }

    /// An object ingested unchecked is refused when it is not JSON (as
    /// serde_json reads raw values), and ingested as a checked one otherwise.
    #[test]
    fn unchecked_ingest_refuses_what_is_not_json() {
        use crate::object::{ingest, ingest_unchecked};
        let catalog = crate::resources::builtin();
        let mut rng = Rng(7);
        let (mut ingested, mut refused) = (0, 0);
        for (file, group, plural) in crate::fixtures::API_TYPES {
            let resource = catalog.iter().find(|r| r.group == *group && r.plural == *plural).unwrap();
            let text = crate::fixtures::read(file);
            for _ in 0..1000 {
                let mutated = mutate(&mut rng, &text);
                let unchecked = ingest_unchecked(resource, "m1", &mutated);
                if check(&mutated) {
                    let whole = ingest(resource, "m1", &mutated);
                    match (&unchecked, &whole) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b),
                        _ => assert_eq!(unchecked.is_ok(), whole.is_ok(), "{:?}", String::from_utf8_lossy(&mutated)),
                    }
                } else {
                    assert!(unchecked.is_err(), "ingested what is not JSON: {:?}", String::from_utf8_lossy(&mutated));
                }
                if unchecked.is_ok() {
                    ingested += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert!(ingested > 1000 && refused > 1000, "ingested {ingested}, refused {refused}");
    }

    #[test]
    fn watch_lines_split_as_serde_json_reads_them() {
        let pod = String::from_utf8(crate::fixtures::read("core.v1.Pod.json")).unwrap();
        let lines = [
            format!(r#"{{"type":"ADDED","object":{pod}}}"#),
            format!("{{ \"object\" : {pod} ,\n \"type\" : \"DELETED\" }}\n"),
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}},"other":[1,2]}"#.to_string(),
            r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#.to_string(),
        ];
        let mut rng = Rng(42);
        let (mut split, mut refused) = (0, 0);
        // A line split and its object checked, as the watcher reads one.
        fn read_as_the_watcher(line: &[u8]) -> Option<(&str, &str)> {
            split_watch_line(line).filter(|(_, object)| check(object.as_bytes()))
        }
        for line in &lines {
            let (event_type, object) = read_as_the_watcher(line.as_bytes()).expect("a watch line");
            let read: Line = serde_json::from_str(line).unwrap();
            assert_eq!((event_type, object), (read.event_type, read.object.get()));
            for _ in 0..3000 {
                let mutated = mutate(&mut rng, line.as_bytes());
                let read = serde_json::from_slice::<Line>(&mutated).ok();
                match read_as_the_watcher(&mutated) {
                    Some(got) => {
                        let read = read.unwrap_or_else(|| panic!("split what serde_json refuses: {:?}", String::from_utf8_lossy(&mutated)));
                        assert_eq!(got, (read.event_type, read.object.get()));
                        split += 1;
                    }
                    // Refused: only lines serde_json refuses too, or reads
                    // by a member name with escapes.
                    None => {
                        assert!(read.is_none() || mutated.contains(&b'\\'), "{:?}", String::from_utf8_lossy(&mutated));
                        refused += 1;
                    }
                }
            }
        }
        assert!(split > 1000 && refused > 1000, "split {split}, refused {refused}");
        // The canonical form, its object checked: never what serde_json
        // refuses, and what it reads the same.
        let mut canonical = 0;
        for line in &lines {
            for _ in 0..3000 {
                let mutated = mutate(&mut rng, line.as_bytes());
                if let Some((event_type, object)) = split_canonical_watch_line(&mutated).filter(|(_, object)| check(object)) {
                    let read = serde_json::from_slice::<Line>(&mutated)
                        .unwrap_or_else(|e| panic!("split what serde_json refuses ({e}): {:?}", String::from_utf8_lossy(&mutated)));
                    assert_eq!((event_type, object), (read.event_type, read.object.get().as_bytes()));
                    canonical += 1;
                }
            }
        }
        assert!(canonical > 1000, "canonical {canonical}");
        let (event_type, object) = split_canonical_watch_line(b" { \"type\" : \"ADDED\" , \"object\" : {\"a\":1} } \n").unwrap();
        assert_eq!((event_type, object), ("ADDED", &br#"{"a":1}"#[..]));
        // Members after the object: the text taken is not one value.
        let (_, object) = split_canonical_watch_line(br#"{"type":"ADDED","object":{"a":1},"x":2}"#).unwrap();
        assert!(!check(object));
        // Repeated, missing or mistyped members; an escaped name is left to serde_json.
        for line in [
            r#"{"type":"ADDED","type":"ADDED","object":{}}"#,
            r#"{"type":"ADDED"}"#,
            r#"{"object":{}}"#,
            r#"{"type":1,"object":{}}"#,
            r#"{"type":"ADD\u0045D","object":{}}"#,
            r#"{"typ\u0065":"ADDED","object":{}}"#,
            r#"{"type":"ADDED","object":{}} x"#,
            r#"[{"type":"ADDED","object":{}}]"#,
        ] {
            assert_eq!(split_watch_line(line.as_bytes()), None, "{line}");
        }
    }
}
