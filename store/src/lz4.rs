//! LZ4 block compression against a dictionary prepared once.
//!
//! Event bodies are compressed against their type's dictionary. `lz4_flex`
//! hashes the dictionary again for every body it compresses (every third
//! position of it), which cost more than compressing the body itself: on
//! the simulator's pods (3.5 KB) 3.8-5.5 us per body against the last
//! 8 KiB of the dictionary. Here the dictionary's hash table (every
//! position) is made once ([`Prepared::new`]) and copied for each body:
//! 1.9-2.0 us against all 16 KiB, 427 bytes per body instead of 423. The
//! output is the standard LZ4 block format
//! (<https://github.com/lz4/lz4/blob/dev/doc/lz4_Block_format.md>), read
//! back by `lz4_flex`'s decompressor with the same dictionary.

/// Positions hashed: 2^12 slots, as LZ4's reference compressor uses for
/// inputs of this size.
const HASH_LOG: u32 = 12;
const SLOTS: usize = 1 << HASH_LOG;
/// A match is at least 4 bytes.
const MIN_MATCH: usize = 4;
/// The last match starts at least 12 bytes before the end of the block.
const MF_LIMIT: usize = 12;
/// The last 5 bytes of a block are literals.
const LAST_LITERALS: usize = 5;
/// Offsets are 16 bits.
const MAX_OFFSET: usize = u16::MAX as usize;

fn hash(sequence: u32) -> usize {
    (sequence.wrapping_mul(2_654_435_761) >> (32 - HASH_LOG)) as usize
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// A dictionary with its hash table.
pub struct Prepared {
    /// The dictionary's last [`MAX_OFFSET`] bytes (what offsets can reach).
    dict: Vec<u8>,
    /// For each hash, the last dictionary position with it.
    table: Box<[u32; SLOTS]>,
}

impl Prepared {
    /// Prepares `dict` (empty: compression without a dictionary).
    pub fn new(dict: &[u8]) -> Prepared {
        let dict = dict[dict.len().saturating_sub(MAX_OFFSET)..].to_vec();
        let mut table = Box::new([0u32; SLOTS]);
        for at in 0..dict.len().saturating_sub(MIN_MATCH - 1) {
            if let Some(sequence) = read_u32(&dict, at) {
                table[hash(sequence)] = at as u32;
            }
        }
        Prepared { dict, table }
    }

    /// Compresses `input` to an LZ4 block in `out` (cleared first);
    /// `table` is scratch space kept between calls.
    pub fn compress(&self, input: &[u8], table: &mut Vec<u32>, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(input.len() + input.len() / 255 + 16);
        table.clear();
        table.extend_from_slice(&self.table[..]);
        let window = Window { dict: &self.dict, input };
        let d = self.dict.len();
        let n = input.len();
        let mut anchor = 0;
        let mut i = 0;
        // Inputs over 4 GiB minus the dictionary are stored without matches.
        let positions_fit = u32::try_from(d + n).is_ok();
        while positions_fit && i + MF_LIMIT <= n {
            let Some(sequence) = read_u32(input, i) else { break };
            let slot = hash(sequence);
            let here = d + i;
            let candidate = table[slot] as usize;
            table[slot] = here as u32;
            if candidate >= here || here - candidate > MAX_OFFSET || window.u32_at(candidate) != Some(sequence) {
                // Steps grow over long stretches without a match, as LZ4's do.
                i += 1 + ((i - anchor) >> 6);
                continue;
            }
            let (mut start, mut from) = (i, candidate);
            // Longer backwards, not before what is already written.
            while start > anchor && from > 0 && window.at(from - 1) == input[start - 1] {
                start -= 1;
                from -= 1;
            }
            // And forwards, up to the last literals.
            let limit = n - LAST_LITERALS;
            let end = i + MIN_MATCH + window.common_length(candidate + MIN_MATCH, &input[(i + MIN_MATCH).min(limit)..limit]);
            write_sequence(out, &input[anchor..start], here - candidate, end - start);
            anchor = end;
            i = end;
            // The position two back, so that a repeat starting there is found.
            if let Some(sequence) = i.checked_sub(2).and_then(|at| read_u32(input, at)) {
                table[hash(sequence)] = (d + i - 2) as u32;
            }
        }
        write_literals(out, &input[anchor..]);
    }
}

/// The dictionary followed by the input, as offsets see them.
struct Window<'a> {
    dict: &'a [u8],
    input: &'a [u8],
}

impl Window<'_> {
    fn at(&self, position: usize) -> u8 {
        match position.checked_sub(self.dict.len()) {
            None => self.dict[position],
            Some(at) => self.input[at],
        }
    }

    /// How many bytes from `position` on equal the start of `other`.
    fn common_length(&self, position: usize, other: &[u8]) -> usize {
        let d = self.dict.len();
        if position >= d {
            return common_prefix(&self.input[position - d..], other);
        }
        let in_dict = common_prefix(&self.dict[position..], other);
        if position + in_dict < d {
            return in_dict;
        }
        // The match runs on past the dictionary's end into the input.
        in_dict + common_prefix(self.input, &other[in_dict..])
    }

    fn u32_at(&self, position: usize) -> Option<u32> {
        let d = self.dict.len();
        if position >= d {
            return read_u32(self.input, position - d);
        }
        if position + 4 <= d {
            return read_u32(self.dict, position);
        }
        let mut bytes = [0u8; 4];
        for (k, byte) in bytes.iter_mut().enumerate() {
            *byte = match (position + k).checked_sub(d) {
                None => self.dict[position + k],
                Some(at) => *self.input.get(at)?,
            };
        }
        Some(u32::from_le_bytes(bytes))
    }
}

/// The length of the common prefix of `a` and `b`, eight bytes at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut k = 0;
    while k + 8 <= n {
        let x = u64::from_le_bytes(a[k..k + 8].try_into().expect("eight bytes"));
        let y = u64::from_le_bytes(b[k..k + 8].try_into().expect("eight bytes"));
        if x != y {
            return k + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    while k < n && a[k] == b[k] {
        k += 1;
    }
    k
}

/// A length past a token's 15: bytes of 255, then the rest.
fn write_length(out: &mut Vec<u8>, mut length: usize) {
    while length >= 255 {
        out.push(255);
        length -= 255;
    }
    out.push(length as u8);
}

fn write_sequence(out: &mut Vec<u8>, literals: &[u8], offset: usize, match_length: usize) {
    let extra = match_length - MIN_MATCH;
    out.push(((literals.len().min(15) as u8) << 4) | extra.min(15) as u8);
    if literals.len() >= 15 {
        write_length(out, literals.len() - 15);
    }
    out.extend_from_slice(literals);
    out.extend_from_slice(&(offset as u16).to_le_bytes());
    if extra >= 15 {
        write_length(out, extra - 15);
    }
}

/// The last sequence: literals alone.
fn write_literals(out: &mut Vec<u8>, literals: &[u8]) {
    out.push((literals.len().min(15) as u8) << 4);
    if literals.len() >= 15 {
        write_length(out, literals.len() - 15);
    }
    out.extend_from_slice(literals);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(dict: &[u8], input: &[u8]) -> Vec<u8> {
        let prepared = Prepared::new(dict);
        let (mut table, mut out) = (Vec::new(), Vec::new());
        prepared.compress(input, &mut table, &mut out);
        let back = lz4_flex::block::decompress_with_dict(&out, input.len(), dict)
            .unwrap_or_else(|e| panic!("{} bytes against {} of dictionary: {e}", input.len(), dict.len()));
        assert_eq!(back, input);
        out
    }

    /// Fixtures against dictionaries made of other fixtures, of the
    /// sizes the store uses and past LZ4's 64 KiB window.
    #[test]
    fn lz4_reads_back_every_fixture_against_dictionaries() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/fixtures/kubernetes-api-testdata");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (the fixtures are in testdata/fixtures)", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        assert!(files.len() >= 10, "fixtures in {}", dir.display());
        let texts: Vec<Vec<u8>> = files.iter().map(|path| std::fs::read(path).unwrap()).collect();
        let all: Vec<u8> = texts.concat();
        for size in [0, 3, 4, 100, 8 * 1024, 16 * 1024, 70 * 1024] {
            let dict: Vec<u8> = all.iter().cycle().take(size).copied().collect();
            for text in &texts {
                let out = round_trip(&dict, text);
                if size >= 8 * 1024 {
                    assert!(out.len() < text.len() / 2, "{} of {} bytes", out.len(), text.len());
                }
            }
        }
    }

    /// The format's edges: empty and short inputs, lengths of 15 and 255
    /// and past them, a match reaching from the dictionary into the input.
    #[test]
    fn lz4_reads_back_edges_of_the_format() {
        for n in 0..40 {
            round_trip(b"", &vec![b'a'; n]);
            round_trip(b"abcdefgh", &b"abcdefghabcdefgh".repeat(3)[..n.min(48)]);
        }
        for n in [14, 15, 16, 18, 19, 20, 254, 255, 256, 270, 271, 272, 509, 510, 511, 1000] {
            let noise: Vec<u8> = (0..n as u32).map(|k| (k.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
            round_trip(b"", &noise);
            round_trip(b"", &[&noise[..], &vec![b'z'; n][..], &noise[..]].concat());
            round_trip(&noise, &[&noise[n / 2..], &noise[..]].concat());
        }
        // The dictionary's end continues into the input's start.
        round_trip(b"0123456789abcdef", b"cdefcdefcdefcdef0123456789abcdefxyz--------------");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn lz4_reads_back_any_input(dict in proptest::collection::vec(0u8..4, 0..300), input in proptest::collection::vec(0u8..4, 0..3000)) {
            round_trip(&dict, &input);
        }

        #[test]
        fn lz4_reads_back_any_bytes(dict in proptest::collection::vec(any::<u8>(), 0..100), input in proptest::collection::vec(any::<u8>(), 0..600)) {
            round_trip(&dict, &input);
        }
    }
}
