//! gzip response encoding for lists, as kube-apiserver's: a client that
//! sends `Accept-Encoding: gzip` gets a list of more than 128 KiB
//! compressed at level 1 (k8s.io/apiserver `negotiateContentEncoding`,
//! `defaultGzipThresholdBytes`, `defaultGzipContentEncodingLevel`;
//! client-go's transport asks for it unless compression is disabled).
//!
//! A long list is produced in chunks by several threads; each chunk is
//! deflated where it is made, on its own ([`Piece`]), and the pieces are
//! joined in order into one gzip member ([`Member`]) as pigz does: every
//! piece ends with a sync flush (byte-aligned, not final), so the pieces
//! follow each other as one deflate stream, closed by an empty final block
//! and the trailer's CRC-32 (combined from the pieces') and length. One
//! member, not one per chunk: decoders that read only a stream's first
//! member are common.

use flate2::{Compress, Compression, FlushCompress, Status};

/// Responses up to this size are sent as they are
/// (kube-apiserver's `defaultGzipThresholdBytes`).
pub const THRESHOLD_BYTES: usize = 128 * 1024;

/// Whether the request's `Accept-Encoding` names `gzip`, read as
/// kube-apiserver reads it (a comma-separated token equal to `gzip`).
pub fn accepted(headers: &actix_web::http::header::HeaderMap) -> bool {
    headers
        .get_all(actix_web::http::header::ACCEPT_ENCODING)
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|token| token.trim() == "gzip"))
}

/// A piece of a gzip member: some bytes deflated on their own.
pub struct Piece {
    /// The deflated bytes, ending with a sync flush.
    pub deflated: Vec<u8>,
    crc: crc32fast::Hasher,
    len: u64,
}

impl Piece {
    /// Deflates `input` (level 1, as kube-apiserver).
    pub fn deflate(input: &[u8]) -> Piece {
        let mut compress = Compress::new(Compression::fast(), false);
        let mut deflated = Vec::with_capacity(input.len() / 4 + 64);
        loop {
            let read = compress.total_in() as usize;
            let room = deflated.capacity() - deflated.len();
            if room < 64 {
                deflated.reserve(input.len() / 8 + 1024);
            }
            match compress.compress_vec(&input[read..], &mut deflated, FlushCompress::Sync) {
                // A sync flush is complete when all input was taken and
                // output room was left over.
                Ok(Status::Ok | Status::BufError) if compress.total_in() as usize == input.len() && deflated.len() < deflated.capacity() => break,
                Ok(_) => {}
                Err(e) => unreachable!("deflating from memory into memory cannot fail: {e}"),
            }
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(input);
        Piece { deflated, crc, len: input.len() as u64 }
    }
}

/// A gzip member being written piece by piece, in order.
#[derive(Default)]
pub struct Member {
    crc: crc32fast::Hasher,
    len: u64,
}

impl Member {
    /// The member's header: deflate, no name or time, OS unknown.
    pub const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff];

    /// Takes the next piece's checksum and length; returns its bytes.
    pub fn add(&mut self, piece: Piece) -> Vec<u8> {
        self.crc.combine(&piece.crc);
        self.len += piece.len;
        piece.deflated
    }

    /// The member's end: an empty final block, the CRC-32 and the length
    /// (modulo 2^32) of everything added.
    pub fn end(self) -> [u8; 10] {
        let crc = self.crc.finalize().to_le_bytes();
        let len = (self.len as u32).to_le_bytes();
        // BFINAL 1, BTYPE 01 (fixed Huffman), end of block (7 zero bits).
        [0x03, 0x00, crc[0], crc[1], crc[2], crc[3], len[0], len[1], len[2], len[3]]
    }

    /// `bytes` as a whole member.
    pub fn whole(bytes: &[u8]) -> Vec<u8> {
        let mut member = Member::default();
        let mut out = Member::HEADER.to_vec();
        out.extend_from_slice(&member.add(Piece::deflate(bytes)));
        out.extend_from_slice(&member.end());
        out
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// Text like a list's: repetitive JSON with varying numbers.
    fn sample(len: usize, seed: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let mut x = seed;
        while out.len() < len {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            out.extend_from_slice(format!("{{\"metadata\":{{\"name\":\"load-{}\",\"uid\":\"{:016x}\"}}}},", x % 100_000, x).as_bytes());
        }
        out.truncate(len);
        out
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).expect("a valid gzip member");
        out
    }

    #[test]
    fn pieces_deflated_apart_make_one_member_of_their_bytes_in_order() {
        for (pieces, seed) in [(1usize, 1u64), (2, 2), (7, 3), (40, 4)] {
            let parts: Vec<Vec<u8>> = (0..pieces).map(|i| sample([0, 1, 2, 1000, 70_000, 1 << 20][(i + seed as usize) % 6], seed + i as u64)).collect();
            let deflated: Vec<Piece> = parts.iter().map(|p| Piece::deflate(p)).collect();
            let mut member = Member::default();
            let mut out = Member::HEADER.to_vec();
            for piece in deflated {
                out.extend_from_slice(&member.add(piece));
            }
            out.extend_from_slice(&member.end());
            let whole = parts.concat();
            assert_eq!(gunzip(&out), whole, "{pieces} pieces");
            // One member: a multi-member reader reads the same.
            let mut multi = Vec::new();
            flate2::read::MultiGzDecoder::new(&out[..]).read_to_end(&mut multi).unwrap();
            assert_eq!(multi, whole);
            if whole.len() > 100_000 {
                assert!(out.len() * 2 < whole.len(), "compressed: {} of {} bytes", out.len(), whole.len());
            }
        }
    }

    #[test]
    fn a_wrong_checksum_or_length_is_refused_by_decoders() {
        let bytes = sample(300_000, 9);
        let good = Member::whole(&bytes);
        assert_eq!(gunzip(&good), bytes);
        for at in [good.len() - 8, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            let mut out = Vec::new();
            assert!(flate2::read::GzDecoder::new(&bad[..]).read_to_end(&mut out).is_err(), "byte {at} of the trailer changed");
        }
    }

    #[test]
    fn accept_encoding_is_read_as_kube_apiserver_reads_it() {
        let accepts = |value: &str| {
            let mut headers = actix_web::http::header::HeaderMap::new();
            headers.insert(actix_web::http::header::ACCEPT_ENCODING, value.parse().unwrap());
            accepted(&headers)
        };
        assert!(accepts("gzip"));
        assert!(accepts("deflate, gzip"));
        assert!(accepts(" gzip ,br"));
        assert!(!accepts("br"));
        assert!(!accepts("gzip;q=0"));
        assert!(!accepts("x-gzip"));
        assert!(!accepted(&actix_web::http::header::HeaderMap::new()));
    }
}
