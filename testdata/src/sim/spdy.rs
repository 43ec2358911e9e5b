//! SPDY/3.1 framing, as much as port-forward needs (draft-mbelshe-httpbis-spdy-00,
//! "SPDY Protocol - Draft 3" and its 3.1 revision): frames read from a byte
//! buffer and written to bytes, and the name/value header blocks, compressed
//! with zlib and the protocol's preset dictionary (section 2.6.10.1), one
//! compression context per direction for the whole session.
//!
//! A frame starts with 8 bytes. A control frame: the control bit and the
//! version (15 bits, 3), its type (16 bits), flags (8 bits), length (24
//! bits). A data frame: the stream id (31 bits, control bit 0), flags,
//! length. The payload follows.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The protocol version in control frames.
pub const VERSION: u16 = 3;
/// `FLAG_FIN`: the sender's last frame on the stream.
pub const FLAG_FIN: u8 = 0x01;
/// SYN_STREAM: a new stream, with its headers.
pub const SYN_STREAM: u16 = 1;
/// SYN_REPLY: the answer to a SYN_STREAM.
pub const SYN_REPLY: u16 = 2;
/// RST_STREAM: a stream ends abnormally.
pub const RST_STREAM: u16 = 3;
/// SETTINGS.
pub const SETTINGS: u16 = 4;
/// PING: echoed by the receiver.
pub const PING: u16 = 6;
/// GOAWAY: no new streams.
pub const GOAWAY: u16 = 7;
/// HEADERS: more headers of a stream.
pub const HEADERS: u16 = 8;
/// WINDOW_UPDATE: flow control.
pub const WINDOW_UPDATE: u16 = 9;
/// Largest frame payload accepted (the length field has 24 bits).
pub const MAX_PAYLOAD: usize = (1 << 24) - 1;

/// Why bytes are not SPDY.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A control frame of another version.
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    /// A frame or header block shorter than its fields.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// The header block does not inflate.
    #[error("header block: {0}")]
    Compression(String),
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A data frame.
    Data {
        /// Its stream.
        stream_id: u32,
        /// Flags (`FLAG_FIN`).
        flags: u8,
        /// The data.
        data: Bytes,
    },
    /// A control frame.
    Control {
        /// Its type (`SYN_STREAM`, ...).
        kind: u16,
        /// Flags.
        flags: u8,
        /// The payload after the 8-byte head.
        payload: Bytes,
    },
}

/// Takes one whole frame off the front of `buffer`; `None` while it is
/// incomplete.
pub fn parse(buffer: &mut BytesMut) -> Result<Option<Frame>, Error> {
    if buffer.len() < 8 {
        return Ok(None);
    }
    let length = u32::from_be_bytes([0, buffer[5], buffer[6], buffer[7]]) as usize;
    if buffer.len() < 8 + length {
        return Ok(None);
    }
    let head = buffer.split_to(8);
    let payload = buffer.split_to(length).freeze();
    let flags = head[4];
    if head[0] & 0x80 != 0 {
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(Error::Version(version));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        return Ok(Some(Frame::Control { kind, flags, payload }));
    }
    let stream_id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
    Ok(Some(Frame::Data { stream_id, flags, data: payload }))
}

fn head(out: &mut BytesMut, first: u32, flags: u8, length: usize) {
    out.put_u32(first);
    out.put_u32(((flags as u32) << 24) | (length as u32 & 0x00ff_ffff));
}

/// A data frame.
pub fn data(stream_id: u32, fin: bool, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + data.len());
    head(&mut out, stream_id & 0x7fff_ffff, if fin { FLAG_FIN } else { 0 }, data.len());
    out.put_slice(data);
    out.freeze()
}

/// A control frame of `kind` with `payload`.
pub fn control(kind: u16, flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + payload.len());
    head(&mut out, 0x8000_0000 | ((VERSION as u32) << 16) | kind as u32, flags, payload.len());
    out.put_slice(payload);
    out.freeze()
}

/// The stream id at the start of a control frame's payload.
pub fn stream_id(payload: &[u8]) -> Result<u32, Error> {
    let bytes: [u8; 4] = payload.get(..4).and_then(|b| b.try_into().ok()).ok_or(Error::Truncated("control frame"))?;
    Ok(u32::from_be_bytes(bytes) & 0x7fff_ffff)
}

/// The header block of a SYN_STREAM payload (after the stream id, the
/// associated stream id, the priority and the slot).
pub fn syn_stream_block(payload: &[u8]) -> Result<&[u8], Error> {
    payload.get(10..).ok_or(Error::Truncated("SYN_STREAM"))
}

/// A SYN_REPLY of `stream_id` with a compressed header block.
pub fn syn_reply(stream_id: u32, block: &[u8]) -> Bytes {
    let mut payload = Vec::with_capacity(4 + block.len());
    payload.extend_from_slice(&stream_id.to_be_bytes());
    payload.extend_from_slice(block);
    control(SYN_REPLY, 0, &payload)
}

/// A frame of a stream id and a 32-bit value (RST_STREAM with a status,
/// WINDOW_UPDATE with a delta, GOAWAY with a status).
pub fn id_and_value(kind: u16, id: u32, value: u32) -> Bytes {
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    payload[4..].copy_from_slice(&value.to_be_bytes());
    control(kind, 0, &payload)
}

/// The preset dictionary of header compression (section 2.6.10.1): these
/// words, each preceded by its length in 4 bytes, then [`DICTIONARY_TAIL`].
const DICTIONARY_WORDS: [&str; 65] = [
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding",
    "accept-language", "accept-ranges", "age", "allow", "authorization", "cache-control", "connection",
    "content-base", "content-encoding", "content-language", "content-length", "content-location",
    "content-md5", "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host",
    "if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "last-modified",
    "location", "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
    "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via",
    "warning", "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url",
    "public", "set-cookie", "keep-alive", "origin",
];

/// The dictionary's last part, status codes, reason phrases, dates and
/// common values, without length prefixes.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The preset dictionary of header compression.
pub fn dictionary() -> Vec<u8> {
    let mut out = Vec::with_capacity(1423);
    for word in DICTIONARY_WORDS {
        out.extend_from_slice(&(word.len() as u32).to_be_bytes());
        out.extend_from_slice(word.as_bytes());
    }
    out.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    out
}

/// Headers: `(name, value)` pairs (several values of one name are joined
/// by NUL, as SPDY carries them).
pub type Headers = Vec<(String, String)>;

/// The inflating side of a session's header compression.
pub struct Inflater {
    inflate: Decompress,
    dictionary: Vec<u8>,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater { inflate: Decompress::new(true), dictionary: dictionary() }
    }
}

impl Inflater {
    /// Inflates and parses one header block.
    pub fn headers(&mut self, block: &[u8]) -> Result<Headers, Error> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let mut input = block;
        loop {
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(1024));
            }
            let before = self.inflate.total_in();
            let result = self.inflate.decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = (self.inflate.total_in() - before) as usize;
            input = &input[used..];
            match result {
                Ok(Status::Ok | Status::BufError | Status::StreamEnd) if input.is_empty() && out.capacity() > out.len() => break,
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&self.dictionary).map_err(|e| Error::Compression(e.to_string()))?;
                }
                Err(e) => return Err(Error::Compression(e.to_string())),
            }
        }
        parse_block(&out)
    }
}

/// The deflating side of a session's header compression.
pub struct Deflater {
    deflate: Compress,
}

impl Default for Deflater {
    fn default() -> Self {
        let mut deflate = Compress::new(Compression::default(), true);
        // Without the dictionary the peer's inflater still reads the block;
        // with it, as the protocol asks.
        let _ = deflate.set_dictionary(&dictionary());
        Deflater { deflate }
    }
}

impl Deflater {
    /// Encodes and compresses one header block (flushed, so that it stands
    /// alone on the wire).
    pub fn block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            raw.extend_from_slice(&(name.len() as u32).to_be_bytes());
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
            raw.extend_from_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input = raw.as_slice();
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.deflate.total_in();
            let _ = self.deflate.compress_vec(input, &mut out, FlushCompress::Sync);
            input = &input[(self.deflate.total_in() - before) as usize..];
            if input.is_empty() && out.capacity() > out.len() {
                break;
            }
        }
        out
    }
}

/// Parses an inflated header block: the number of pairs, then each name
/// and value with its 4-byte length.
pub fn parse_block(mut raw: &[u8]) -> Result<Headers, Error> {
    let take = |raw: &mut &[u8]| -> Result<String, Error> {
        if raw.remaining() < 4 {
            return Err(Error::Truncated("header block"));
        }
        let length = raw.get_u32() as usize;
        if raw.remaining() < length {
            return Err(Error::Truncated("header block"));
        }
        let text = String::from_utf8_lossy(&raw[..length]).into_owned();
        raw.advance(length);
        Ok(text)
    };
    if raw.remaining() < 4 {
        return Err(Error::Truncated("header block"));
    }
    let pairs = raw.get_u32();
    let mut headers = Vec::new();
    for _ in 0..pairs {
        let name = take(&mut raw)?;
        let value = take(&mut raw)?;
        headers.push((name, value));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_frames_carry_their_stream_flags_and_length() {
        let frame = data(5, true, b"hello");
        assert_eq!(&frame[..8], &[0, 0, 0, 5, FLAG_FIN, 0, 0, 5]);
        let mut buffer = BytesMut::from(&frame[..]);
        assert_eq!(parse(&mut buffer).unwrap(), Some(Frame::Data { stream_id: 5, flags: FLAG_FIN, data: Bytes::from_static(b"hello") }));
        assert!(buffer.is_empty());
    }

    #[test]
    fn control_frames_have_the_control_bit_version_and_type() {
        // A PING with id 1: 0x8003 0006, flags 0, length 4, the id.
        let ping = control(PING, 0, &1u32.to_be_bytes());
        assert_eq!(&ping[..], &[0x80, 0x03, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1]);
        let rst = id_and_value(RST_STREAM, 3, 5);
        assert_eq!(&rst[..], &[0x80, 0x03, 0x00, 0x03, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 5]);
        let mut buffer = BytesMut::from(&rst[..]);
        let Some(Frame::Control { kind, payload, .. }) = parse(&mut buffer).unwrap() else { panic!("a control frame") };
        assert_eq!((kind, stream_id(&payload).unwrap()), (RST_STREAM, 3));
    }

    #[test]
    fn frames_are_read_only_when_whole_and_one_at_a_time() {
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&data(1, false, b"ab"));
        wire.extend_from_slice(&control(PING, 0, &7u32.to_be_bytes()));
        let mut buffer = BytesMut::new();
        let mut frames = Vec::new();
        for byte in wire.iter() {
            buffer.put_u8(*byte);
            while let Some(frame) = parse(&mut buffer).unwrap() {
                frames.push(frame);
            }
        }
        assert_eq!(frames.len(), 2);
        assert!(matches!(&frames[1], Frame::Control { kind: PING, .. }));
        let mut other = BytesMut::from(&[0x80, 0x02, 0, 6, 0, 0, 0, 0][..]);
        assert_eq!(parse(&mut other), Err(Error::Version(2)));
    }

    #[test]
    fn the_dictionary_is_the_protocols() {
        let dictionary = dictionary();
        assert_eq!(dictionary.len(), 1423);
        assert_eq!(&dictionary[..11], b"\0\0\0\x07options");
        assert!(dictionary.ends_with(b",*,enq=0."));
    }

    #[test]
    fn header_blocks_round_trip_through_one_context_per_direction() {
        let mut deflater = Deflater::default();
        let mut inflater = Inflater::default();
        // The stream's first block carries the dictionary's id in its zlib head.
        let first = deflater.block(&[("streamtype", "data"), ("port", "80"), ("requestid", "0")]);
        assert_eq!(first[0] & 0x0f, 8, "deflate");
        assert_ne!(first[1] & 0x20, 0, "FDICT");
        assert_eq!(inflater.headers(&first).unwrap(), vec![("streamtype".into(), "data".into()), ("port".into(), "80".into()), ("requestid".into(), "0".into())]);
        // Later blocks continue the same zlib stream.
        let second = deflater.block(&[("streamtype", "error"), ("port", "80")]);
        assert_eq!(inflater.headers(&second).unwrap(), vec![("streamtype".into(), "error".into()), ("port".into(), "80".into())]);
        let empty = deflater.block(&[]);
        assert_eq!(inflater.headers(&empty).unwrap(), Vec::<(String, String)>::new());
        assert!(Inflater::default().headers(&second).is_err(), "a block out of its stream does not inflate");
    }
}
