//! Turning results into HTTP responses: Kubernetes `Status` errors and JSON.

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::HttpResponse;
use kubefold_engine::status::Status;

/// The content type of JSON responses.
pub const JSON: &str = "application/json";

/// A Kubernetes Status error as an HTTP response.
pub fn status(status: &Status) -> HttpResponse {
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(code);
    response.content_type(JSON);
    if let Some(retry) = status.details.as_ref().and_then(|d| d.retry_after_seconds) {
        response.insert_header(("Retry-After", retry.to_string()));
    }
    response.body(status.to_json().to_string())
}

/// A JSON body with 200 OK.
pub fn json_bytes(body: impl Into<Bytes>) -> HttpResponse {
    HttpResponse::Ok().content_type(JSON).body(sized(body.into()))
}

/// Largest piece of a response body handed to actix-http at a time.
///
/// actix-http copies every body chunk into the connection's write buffer
/// (it has no path that writes a chunk as it is), fills that buffer up to
/// [`WRITE_BUFFER_BYTES`] and then writes it to the socket. A list chunk of
/// 1 MiB was copied whole into a buffer of over 1 MiB, which the kernel
/// then read back out of cache. In pieces of 16 KiB into a buffer of
/// 112 KiB, the buffer stays in the core's cache and is reused, never
/// grown. 100k pods (366 MB), 40 lists alternating with 1 MiB chunks
/// into a 1 MiB buffer, over curl: 94.0 vs 111.1 ms median, CPU 117 vs
/// 126 ms per list against 32 KiB pieces into 96 KiB, and 109.2 vs 119.8
/// ms, CPU 117 vs 149 ms against 1 MiB chunks into 1 MiB (8 KiB pieces into
/// 120 KiB and 64 KiB into 64 KiB were slower; BENCHMARKS.md).
pub const PIECE_BYTES: usize = 16 * 1024;

/// The connection's write buffer (actix-http's `h1_write_buffer_size`):
/// a whole number of [`PIECE_BYTES`] pieces short of actix-http's 128 KiB
/// floor, above which a buffer that grew is dropped and made anew once
/// written out. It is also what a slow client can hold here beyond its
/// watch's queue.
pub const WRITE_BUFFER_BYTES: usize = 7 * PIECE_BYTES;

/// `body` as a response body of its length (`Content-Length`), handed to
/// actix-http in pieces of at most [`PIECE_BYTES`].
pub fn sized(body: Bytes) -> BoxBody {
    if body.len() <= PIECE_BYTES {
        return BoxBody::new(body);
    }
    BoxBody::new(Pieces(body))
}

/// A body of known length that yields itself in pieces, see [`sized`].
struct Pieces(Bytes);

impl MessageBody for Pieces {
    type Error = std::convert::Infallible;

    fn size(&self) -> BodySize {
        BodySize::Sized(self.0.len() as u64)
    }

    fn poll_next(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<Bytes, Self::Error>>> {
        let n = self.0.len().min(PIECE_BYTES);
        std::task::Poll::Ready((n > 0).then(|| Ok(self.0.split_to(n))))
    }
}

/// `chunks` in pieces of at most [`PIECE_BYTES`] (no copy: each piece is a
/// slice of its chunk), for a streamed response body. An empty chunk is
/// skipped: actix-http would write it as the chunked body's end.
pub fn in_pieces<E: 'static>(chunks: impl futures::Stream<Item = Result<Bytes, E>> + 'static) -> impl futures::Stream<Item = Result<Bytes, E>> + 'static {
    use futures::StreamExt;
    let mut chunks = Box::pin(chunks);
    let mut rest = Bytes::new();
    futures::stream::poll_fn(move |cx| {
        while rest.is_empty() {
            match std::task::ready!(chunks.poll_next_unpin(cx)) {
                Some(Ok(chunk)) => rest = chunk,
                other => return std::task::Poll::Ready(other),
            }
        }
        let n = rest.len().min(PIECE_BYTES);
        std::task::Poll::Ready(Some(Ok(rest.split_to(n))))
    })
}

/// A JSON value with 200 OK.
pub fn json(value: &serde_json::Value) -> HttpResponse {
    json_bytes(value.to_string().into_bytes())
}

/// An aggregated discovery document with its Content-Type.
pub fn aggregated(value: &serde_json::Value) -> HttpResponse {
    HttpResponse::Ok().content_type(crate::discovery::AGGREGATED_CONTENT_TYPE).body(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn body_of(len: usize) -> Bytes {
        (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
    }

    /// The pieces of a sized body, as actix-http takes them.
    fn pieces_of(mut body: BoxBody) -> Vec<Bytes> {
        let mut pieces = Vec::new();
        while let Some(piece) = futures::executor::block_on(futures::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_next(cx))) {
            pieces.push(piece.expect("a piece"));
        }
        pieces
    }

    #[test]
    fn a_sized_body_keeps_its_length_and_comes_in_pieces() {
        for len in [0, 1, PIECE_BYTES, PIECE_BYTES + 1, 5 * PIECE_BYTES + 17] {
            let bytes = body_of(len);
            let body = sized(bytes.clone());
            assert_eq!(body.size(), BodySize::Sized(len as u64), "length {len}");
            let pieces = pieces_of(body);
            assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= PIECE_BYTES), "length {len}: {:?}", pieces.iter().map(|p| p.len()).collect::<Vec<_>>());
            assert_eq!(pieces.len(), len.div_ceil(PIECE_BYTES));
            assert_eq!(pieces.concat(), bytes.to_vec(), "length {len}");
        }
    }

    #[test]
    fn a_stream_comes_in_non_empty_pieces_of_its_bytes() {
        let chunks = vec![body_of(3 * PIECE_BYTES + 5), Bytes::new(), body_of(10), body_of(PIECE_BYTES)];
        let expected: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, ()>));
        let pieces: Vec<Bytes> = futures::executor::block_on(in_pieces(stream).map(|p| p.expect("a piece")).collect());
        assert_eq!(pieces.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![PIECE_BYTES, PIECE_BYTES, PIECE_BYTES, 5, 10, PIECE_BYTES]);
        assert_eq!(pieces.concat(), expected);
        // An error ends the stream as it came.
        let failing = futures::stream::iter(vec![Ok(body_of(PIECE_BYTES + 1)), Err("gone")]);
        let items: Vec<_> = futures::executor::block_on(in_pieces(failing).collect());
        assert_eq!(items.iter().map(|i| i.as_ref().map(|p| p.len())).collect::<Vec<_>>(), vec![Ok(PIECE_BYTES), Ok(1), Err(&"gone")]);
    }
}
