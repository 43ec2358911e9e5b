//! Skipping over JSON text byte by byte: whitespace, strings (eight bytes
//! at a time up to their closing quote), numbers and nested values, without
//! decoding them. The primitives under both [`crate::check`], which checks
//! text as it goes, and [`crate::scan`], which walks text checked already.
//!
//! Given text that is not valid JSON these functions do not panic: they
//! return `None` where the structure breaks.

/// The index of the first non-whitespace byte at or after `i`.
pub(crate) fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(i) {
        i += 1;
    }
    i
}

pub(crate) const ONES: u64 = u64::from_le_bytes([1; 8]);
pub(crate) const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The high bit of each byte of `word` that is `byte` (exact up to the
/// first such byte; bytes after it may be marked wrongly).
pub(crate) fn bytes_equal(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// The index of the first quote or backslash at or after `j`, eight bytes
/// at a time.
pub fn quote_or_backslash(text: &[u8], mut j: usize) -> Option<usize> {
    while let Some(chunk) = text.get(j..j + 8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else { break };
        let word = u64::from_le_bytes(bytes);
        let found = bytes_equal(word, b'"') | bytes_equal(word, b'\\');
        if found != 0 {
            return Some(j + (found.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    Some(j + text.get(j..)?.iter().position(|&b| b == b'"' || b == b'\\')?)
}

/// The index after the closing quote of the string opened at `i`.
pub(crate) fn string_end(text: &[u8], i: usize) -> Option<usize> {
    string_end_escaped(text, i).map(|(end, _)| end)
}

/// [`string_end`], and whether the string has an escape.
pub(crate) fn string_end_escaped(text: &[u8], i: usize) -> Option<(usize, bool)> {
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        j = quote_or_backslash(text, j)?;
        if text.get(j) == Some(&b'"') {
            return Some((j + 1, escaped));
        }
        // A backslash: the byte after it never closes the string.
        escaped = true;
        j += 2;
    }
}

/// Nesting at which a walk doubts that decoding would accept the text
/// (serde_json refuses past 128; counted with a margin).
pub(crate) const DOUBTFUL_DEPTH: usize = 90;

/// Whether decoding could refuse the number `text` that reading raw values
/// accepted: one with an exponent or more than 18 digits may be out of range.
pub(crate) fn doubtful_number(text: &[u8]) -> bool {
    text.len() > 18 || text.iter().any(|b| matches!(b, b'e' | b'E'))
}

/// The length of the number at the start of `text`.
fn number_len(text: &[u8]) -> usize {
    text.iter().position(|b| !matches!(b, b'-' | b'+' | b'.' | b'0'..=b'9' | b'e' | b'E')).unwrap_or(text.len())
}

/// The index after the value that starts at `i`, which is `depth` deep;
/// sets `doubt` when the value holds a number or nesting decoding could
/// refuse (see [`crate::scan::split_pruned`]).
pub(crate) fn value_end(text: &[u8], i: usize, depth: usize, doubt: &mut bool) -> Option<usize> {
    match *text.get(i)? {
        b'"' => string_end(text, i),
        b'{' | b'[' => {
            let mut nested = 0usize;
            let mut j = i;
            while let Some(&b) = text.get(j) {
                match b {
                    b'"' => {
                        j = string_end(text, j)?;
                        continue;
                    }
                    b'{' | b'[' => {
                        nested += 1;
                        *doubt |= depth + nested >= DOUBTFUL_DEPTH;
                    }
                    b'}' | b']' => {
                        nested = nested.checked_sub(1)?;
                        if nested == 0 {
                            return Some(j + 1);
                        }
                    }
                    b'-' | b'0'..=b'9' => {
                        let len = number_len(&text[j..]);
                        *doubt |= doubtful_number(&text[j..j + len]);
                        j += len;
                        continue;
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        first => {
            let rest = &text[i..];
            let len = rest.iter().position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')).unwrap_or(rest.len());
            if matches!(first, b'-' | b'0'..=b'9') {
                *doubt |= doubtful_number(&rest[..len]);
            }
            (len > 0).then_some(i + len)
        }
    }
}
