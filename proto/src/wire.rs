//! The protobuf wire format: varints, keys, length-delimited fields; pure
//! functions over a byte cursor.

use crate::{Error, Result};

/// The wire type of a field (the low three bits of its key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    /// int32, int64, uint32, uint64, sint32, sint64, bool, enum.
    Varint,
    /// fixed64, sfixed64, double.
    Fixed64,
    /// string, bytes, messages, packed repeated fields.
    Len,
    /// fixed32, sfixed32, float.
    Fixed32,
}

impl WireType {
    fn from_bits(bits: u64) -> Result<WireType> {
        match bits {
            0 => Ok(WireType::Varint),
            1 => Ok(WireType::Fixed64),
            2 => Ok(WireType::Len),
            5 => Ok(WireType::Fixed32),
            other => Err(Error::Malformed(format!("unsupported wire type {other}"))),
        }
    }

    fn bits(self) -> u64 {
        match self {
            WireType::Varint => 0,
            WireType::Fixed64 => 1,
            WireType::Len => 2,
            WireType::Fixed32 => 5,
        }
    }
}

/// A cursor over one message's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Whether every byte has been read.
    pub fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next varint.
    pub fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(Error::Malformed("truncated varint".into()));
            };
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(Error::Malformed("varint overflows 64 bits".into()));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::Malformed("varint longer than 10 bytes".into()))
    }

    /// The next key: field number and wire type.
    pub fn key(&mut self) -> Result<(u32, WireType)> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(Error::Malformed(format!("invalid field number {number}")));
        }
        Ok((number as u32, WireType::from_bits(key & 7)?))
    }

    /// The next length-delimited value.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.varint()?;
        let end = usize::try_from(len).ok().and_then(|len| self.pos.checked_add(len)).filter(|end| *end <= self.buf.len());
        let Some(end) = end else {
            return Err(Error::Malformed("length-delimited field runs past the end".into()));
        };
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next 4 bytes, little-endian.
    pub fn fixed32(&mut self) -> Result<u32> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// The next 8 bytes, little-endian.
    pub fn fixed64(&mut self) -> Result<u64> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(array))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(Error::Malformed("truncated fixed-width field".into()));
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    /// Skips a value of the given wire type (an unknown field).
    pub fn skip(&mut self, wire: WireType) -> Result<()> {
        match wire {
            WireType::Varint => self.varint().map(drop),
            WireType::Fixed64 => self.take(8).map(drop),
            WireType::Len => self.bytes().map(drop),
            WireType::Fixed32 => self.take(4).map(drop),
        }
    }
}

/// Appends a varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a field key.
pub fn put_key(out: &mut Vec<u8>, number: u32, wire: WireType) {
    put_varint(out, (u64::from(number) << 3) | wire.bits());
}

/// Appends a length-delimited field.
pub fn put_len(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_key(out, number, WireType::Len);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_garbage() {
        for value in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX, (-1i64) as u64] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut reader = Reader::new(&out);
            assert_eq!(reader.varint().unwrap(), value);
            assert!(reader.done());
        }
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        // A length past the end of the buffer.
        assert!(Reader::new(&[0x0a, 0x05, b'a']).key().and_then(|_| Reader::new(&[0x05, b'a']).bytes().map(drop)).is_err());
        // Wire types 3 and 4 (groups) are not used by Kubernetes.
        assert!(Reader::new(&[0x0b]).key().is_err());
    }
}
