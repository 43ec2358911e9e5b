//! The store's binary layout, written and read by hand: the heads of event
//! records ([`crate::record`]) and the index snapshot
//! ([`crate::snapshot`]) are made of these pieces (format
//! `kubefold-store/6`):
//!
//! - an unsigned integer: a varint, LEB128 (seven bits a byte, least
//!   significant first, the high bit set on every byte but the last; at
//!   most ten bytes, no needless trailing zero bytes); a value too large
//!   for its field is damage;
//! - a byte: itself;
//! - a string or byte string: its length as a varint, then its bytes (a
//!   string's UTF-8);
//! - a sequence: its number of items as a varint, then the items.
//!
//! Formats 5 and older wrote the same fields in the same order with
//! bincode 2's standard configuration, whose varints differ: one byte
//! below 251, else a marker 251, 252 or 253 and then 2, 4 or 8
//! little-endian bytes. [`Reader::old`] reads that layout, for the records
//! a data dir of an older format still holds.

/// Largest string or byte string the store decodes: no length read from a
/// damaged record can make decoding allocate more than this.
pub(crate) const MAX_BYTES: usize = 64 * 1024 * 1024;

/// Appends values in the layout to a buffer.
pub(crate) struct Writer<'a>(pub(crate) &'a mut Vec<u8>);

impl Writer<'_> {
    /// An unsigned integer.
    pub(crate) fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push(value as u8 | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    /// A byte.
    pub(crate) fn byte(&mut self, byte: u8) {
        self.0.push(byte);
    }

    /// A string or byte string.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    /// A sequence of `count` string pairs.
    pub(crate) fn pairs<'p>(&mut self, count: usize, pairs: impl IntoIterator<Item = (&'p str, &'p str)>) {
        self.varint(count as u64);
        for (key, value) in pairs {
            self.bytes(key.as_bytes());
            self.bytes(value.as_bytes());
        }
    }
}

/// Which varints a [`Reader`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Varints {
    /// LEB128 (format 6).
    Leb128,
    /// bincode 2's (formats 5 and older).
    Bincode,
}

/// A cursor over bytes in the layout; `None` from any read is damage (a
/// value past the end, too large, or not UTF-8 where a string is).
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    varints: Varints,
}

impl<'a> Reader<'a> {
    /// A reader of the current layout.
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0, varints: Varints::Leb128 }
    }

    /// A reader of the layout of formats 5 and older.
    pub(crate) fn old(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0, varints: Varints::Bincode }
    }

    /// Bytes read so far.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// True once every byte is read.
    pub(crate) fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    /// A byte.
    pub(crate) fn byte(&mut self) -> Option<u8> {
        Some(*self.take(1)?.first()?)
    }

    /// An unsigned integer of a type whose largest value is `max`.
    #[inline]
    pub(crate) fn varint(&mut self, max: u64) -> Option<u64> {
        // Nearly every integer of a record head (a length, a count) takes
        // one byte: read here, without the loop (a list reads every head,
        // and the loop was 7 % of a list's CPU at 2M pods).
        if self.varints == Varints::Leb128 {
            if let Some(&byte) = self.bytes.get(self.at) {
                if byte < 0x80 {
                    self.at += 1;
                    return (u64::from(byte) <= max).then_some(u64::from(byte));
                }
            }
        }
        self.varint_long(max)
    }

    /// [`Reader::varint`] of more than one byte, or of the old layout.
    fn varint_long(&mut self, max: u64) -> Option<u64> {
        let value = match self.varints {
            Varints::Leb128 => {
                let mut value = 0u64;
                let mut shift = 0;
                loop {
                    let byte = self.byte()?;
                    // The tenth byte holds the last bit of a u64; a zero
                    // byte after the first is a needless one.
                    if (shift == 63 && byte > 1) || (shift > 0 && byte == 0) {
                        return None;
                    }
                    value |= u64::from(byte & 0x7f) << shift;
                    if byte & 0x80 == 0 {
                        break value;
                    }
                    shift += 7;
                }
            }
            // A `u32` refuses the 8-byte marker, as bincode does.
            Varints::Bincode => match self.byte()? {
                first @ 0..=250 => u64::from(first),
                251 => u64::from(u16::from_le_bytes(self.take(2)?.try_into().ok()?)),
                252 => u64::from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)),
                253 if max > u64::from(u32::MAX) => u64::from_le_bytes(self.take(8)?.try_into().ok()?),
                _ => return None,
            },
        };
        (value <= max).then_some(value)
    }

    /// A `u64`.
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.varint(u64::MAX)
    }

    /// A `u32`.
    pub(crate) fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint(u64::from(u32::MAX))?).ok()
    }

    /// A byte string (a length past the end or over [`MAX_BYTES`] is damage).
    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u64()?).ok()?;
        if len > MAX_BYTES {
            return None;
        }
        self.take(len)
    }

    /// A string.
    pub(crate) fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    /// The number of items of a sequence whose items take at least
    /// `min_item_bytes` each: never more than the bytes left could hold,
    /// so that it can size an allocation.
    pub(crate) fn count(&mut self, min_item_bytes: usize) -> Option<usize> {
        let count = usize::try_from(self.u64()?).ok()?;
        (count.checked_mul(min_item_bytes.max(1))? <= self.bytes.len() - self.at).then_some(count)
    }

    /// A sequence of string pairs, borrowed.
    pub(crate) fn pairs(&mut self) -> Option<Vec<(&'a str, &'a str)>> {
        let count = self.count(2)?;
        let mut pairs = Vec::with_capacity(count);
        for _ in 0..count {
            pairs.push((self.str()?, self.str()?));
        }
        Some(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes a varint of `value` takes.
    fn varint_len(value: u64) -> usize {
        (64 - value.max(1).leading_zeros() as usize).div_ceil(7)
    }

    #[test]
    fn varints_round_trip_at_every_width() {
        let mut values = vec![0u64, 1, 127, 128, 255, 300, 16_383, 16_384, u64::from(u32::MAX), u64::MAX - 1, u64::MAX];
        values.extend((0..64).map(|bit| 1u64 << bit));
        values.extend((1..64).map(|bit| (1u64 << bit) - 1));
        for value in values {
            let mut out = Vec::new();
            Writer(&mut out).varint(value);
            assert_eq!(out.len(), varint_len(value), "{value}");
            let mut reader = Reader::new(&out);
            assert_eq!(reader.u64(), Some(value));
            assert!(reader.is_done());
            // Cut short, it is damage.
            assert_eq!(Reader::new(&out[..out.len() - 1]).u64(), None, "{value}");
        }
    }

    #[test]
    fn damaged_varints_and_lengths_are_refused() {
        // Eleven bytes, a tenth byte over one bit, a needless zero byte.
        assert_eq!(Reader::new(&[0xff; 11]).u64(), None);
        assert_eq!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64(), None);
        assert_eq!(Reader::new(&[0x80, 0x00]).u64(), None);
        // Too large for a u32.
        let mut out = Vec::new();
        Writer(&mut out).varint(u64::from(u32::MAX) + 1);
        assert_eq!(Reader::new(&out).u32(), None);
        // A length past the end, and over the limit.
        let mut out = Vec::new();
        Writer(&mut out).varint(10);
        out.extend_from_slice(b"short");
        assert_eq!(Reader::new(&out).bytes(), None);
        let mut out = Vec::new();
        Writer(&mut out).varint(MAX_BYTES as u64 + 1);
        assert_eq!(Reader::new(&out).bytes(), None);
        // A count no remaining bytes could hold.
        let mut out = Vec::new();
        Writer(&mut out).varint(1 << 40);
        assert_eq!(Reader::new(&out).pairs(), None);
        // Not UTF-8.
        let mut out = Vec::new();
        Writer(&mut out).bytes(&[0xff, 0xfe]);
        assert_eq!(Reader::new(&out).str(), None);
    }

    #[test]
    fn strings_and_pairs_round_trip() {
        let mut out = Vec::new();
        let mut w = Writer(&mut out);
        w.bytes("ünïcode".as_bytes());
        w.byte(7);
        w.pairs(2, [("app", "web"), ("", "x\u{0}y")]);
        let mut r = Reader::new(&out);
        assert_eq!(r.str(), Some("ünïcode"));
        assert_eq!(r.byte(), Some(7));
        assert_eq!(r.pairs(), Some(vec![("app", "web"), ("", "x\u{0}y")]));
        assert!(r.is_done());
    }

    #[test]
    fn the_old_layout_reads_bincode_varints() {
        // 1, 3, 5 and 9 bytes.
        let bytes = [7, 251, 0x34, 0x12, 252, 1, 0, 0, 1, 253, 1, 0, 0, 0, 0, 0, 0, 1];
        let mut r = Reader::old(&bytes);
        assert_eq!(r.u64(), Some(7));
        assert_eq!(r.u64(), Some(0x1234));
        assert_eq!(r.u64(), Some(0x0100_0001));
        assert_eq!(r.u64(), Some(0x0100_0000_0000_0001));
        assert!(r.is_done());
        // A u32 refuses the 8-byte marker; 254 and 255 are no u64's.
        assert_eq!(Reader::old(&[253, 1, 0, 0, 0, 0, 0, 0, 0]).u32(), None);
        assert_eq!(Reader::old(&[254; 17]).u64(), None);
        assert_eq!(Reader::old(&[255]).u64(), None);
    }
}
