//! Request bodies (JSON and YAML objects, patches, DeleteOptions) decoded
//! off the HTTP workers, within a budget.
//!
//! A body is at most [`crate::MAX_BODY_BYTES`] long and nested at most
//! [`MAX_BODY_DEPTH`] levels (objects and arrays, YAML mappings and
//! sequences). Decoding runs on decoder threads, so a worker goes on
//! serving its other connections meanwhile; a body nested too deeply is
//! refused with 400 BadRequest naming the limit as soon as the parser
//! reaches the level past it, before any work that grows with the depth
//! (the YAML parser counts levels as it reads, [`serde_saphyr`]'s budget; a
//! JSON body's levels are counted in one pass before it is parsed). When the
//! client goes away while its body is decoded, the decoding stops at its
//! next chunk of input.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use kubefold_engine::status::Status;
use serde_json::Value;

/// Deepest nesting of a request body: kube-apiserver's decoders stop at
/// 10,000 levels; kubefold stops far earlier, since it reads the objects
/// of members with serde_json, whose limit is 128 levels, and no
/// Kubernetes object comes near either.
pub const MAX_BODY_DEPTH: usize = 100;

/// Bytes decoded between two looks at whether the client is still there.
const CHUNK_BYTES: usize = 64 << 10;

/// How often a decoding in progress looks whether its client went away.
const PEER_CHECK: Duration = Duration::from_millis(50);

/// How a body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (`application/json`, JSON and merge patches).
    Json,
    /// YAML (`application/yaml`, `application/apply-patch+yaml`); JSON is YAML too.
    Yaml,
}

impl Format {
    /// The format of a `Content-Type`: YAML when it names YAML, else JSON.
    pub fn of_content_type(content_type: &str) -> Format {
        if content_type.contains("yaml") {
            Format::Yaml
        } else {
            Format::Json
        }
    }
}

/// Why a body was not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The body is nested deeper than [`MAX_BODY_DEPTH`].
    TooDeep,
    /// The body is not valid JSON or YAML (the parser's message, with line
    /// and column, never a quote of the input).
    Invalid(String),
    /// The client went away while the body was decoded.
    Abandoned,
    /// No decoder could be started.
    Unavailable(String),
}

impl DecodeError {
    /// The Status a client gets: 400 BadRequest (503 without a decoder);
    /// `prefix` says what was being read (`invalid patch`).
    pub fn to_status(&self, prefix: &str) -> Status {
        match self {
            DecodeError::TooDeep => Status::bad_request(format!(
                "the request body is nested more than {MAX_BODY_DEPTH} levels deep, the most kubefold accepts"
            )),
            DecodeError::Invalid(reason) => Status::bad_request(format!("{prefix}: {reason}")),
            DecodeError::Abandoned => Status::bad_request(format!("{prefix}: the client went away while its body was read")),
            DecodeError::Unavailable(reason) => Status::unavailable(format!("{prefix}: cannot decode the body now: {reason}")),
        }
    }
}

/// Sets its flag when dropped: the request it belongs to ended (answered,
/// or dropped with its connection).
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Decoders running at once; more requests wait for one to finish.
static DECODERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// Stack of a decoder thread: the parsers recurse once per level, and an
/// unoptimised build takes about 25 KiB a level.
const DECODER_STACK_BYTES: usize = 16 << 20;

/// Decodes `body` on a decoder thread (at most 4 at once). `peer`, the
/// request's connection, is watched meanwhile: once its client has closed
/// it the decoding is abandoned.
pub async fn decode(body: Bytes, format: Format, peer: Option<crate::watch::ConnectionSocket>) -> Result<Value, DecodeError> {
    let abandoned = Arc::new(AtomicBool::new(false));
    let _guard = AbandonOnDrop(abandoned.clone());
    let mut acquire = Box::pin(DECODERS.acquire());
    let permit = loop {
        tokio::select! {
            permit = &mut acquire => break permit.map_err(|e| DecodeError::Unavailable(e.to_string()))?,
            _ = tokio::time::sleep(PEER_CHECK), if peer.is_some() => {
                if peer.as_ref().is_some_and(peer_closed) {
                    return Err(DecodeError::Abandoned);
                }
            }
        }
    };
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let flag = abandoned.clone();
    std::thread::Builder::new()
        .name("kubefold-decode".into())
        .stack_size(DECODER_STACK_BYTES)
        .spawn(move || {
            let _permit = permit;
            let _ = tx.send(decode_now(&body, format, &flag));
        })
        .map_err(|e| DecodeError::Unavailable(e.to_string()))?;
    loop {
        tokio::select! {
            done = &mut rx => {
                return done.unwrap_or_else(|_| Err(DecodeError::Unavailable("the decoder stopped".into())));
            }
            _ = tokio::time::sleep(PEER_CHECK), if peer.is_some() => {
                if peer.as_ref().is_some_and(peer_closed) {
                    abandoned.store(true, Ordering::Relaxed);
                    return Err(DecodeError::Abandoned);
                }
            }
        }
    }
}

/// Whether the client closed its end of the connection (or it failed).
fn peer_closed(socket: &crate::watch::ConnectionSocket) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(socket, PollFlags::RDHUP)];
    match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
        Ok(0) | Err(_) => false,
        Ok(_) => fds[0].revents().intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
    }
}

/// Decodes `body` on the calling thread; stops when `abandoned` is set.
pub fn decode_now(body: &[u8], format: Format, abandoned: &AtomicBool) -> Result<Value, DecodeError> {
    match format {
        Format::Json => {
            check_json_depth(body, abandoned)?;
            serde_json::from_slice(body).map_err(|e| DecodeError::Invalid(e.to_string()))
        }
        Format::Yaml => decode_yaml(body, abandoned),
    }
}

/// Counts the nesting of a JSON text (brackets outside strings) and
/// refuses it past [`MAX_BODY_DEPTH`]; malformed text is left to the parser.
fn check_json_depth(body: &[u8], abandoned: &AtomicBool) -> Result<(), DecodeError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for chunk in body.chunks(CHUNK_BYTES) {
        if abandoned.load(Ordering::Relaxed) {
            return Err(DecodeError::Abandoned);
        }
        for &b in chunk {
            if in_string {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_BODY_DEPTH {
                        return Err(DecodeError::TooDeep);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// A reader of a body in [`CHUNK_BYTES`] pieces that fails once the
/// request is abandoned.
struct Chunks<'a> {
    rest: &'a [u8],
    abandoned: &'a AtomicBool,
}

impl Read for Chunks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the client went away"));
        }
        let n = buf.len().min(self.rest.len()).min(CHUNK_BYTES);
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

/// The YAML decoder's settings: at most [`MAX_BODY_DEPTH`] levels, counted
/// as events arrive; no quotes of the input in its errors; as many nodes as
/// a body of [`crate::MAX_BODY_BYTES`] can hold (its size is the budget).
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_BODY_DEPTH;
    // The scanner stops at this many open flow collections (`[[[`, `{{{`)
    // before the depth of its events is counted.
    budget.flow_nesting_limit = MAX_BODY_DEPTH;
    budget.max_nodes = crate::MAX_BODY_BYTES;
    budget.max_events = 2 * crate::MAX_BODY_BYTES;
    budget.max_reader_input_bytes = Some(crate::MAX_BODY_BYTES);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.with_snippet = false;
    // As kube-apiserver's YAML decoder: a repeated key keeps its last value.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    options
}

fn decode_yaml(body: &[u8], abandoned: &AtomicBool) -> Result<Value, DecodeError> {
    let reader = Chunks { rest: body, abandoned };
    match serde_saphyr::from_reader_with_options::<_, Value>(reader, yaml_options()) {
        Ok(value) => Ok(value),
        Err(_) if abandoned.load(Ordering::Relaxed) => Err(DecodeError::Abandoned),
        Err(e) => {
            let e = e.without_snippet();
            if let serde_saphyr::Error::Budget { breach: serde_saphyr::budget::BudgetBreach::Depth { .. }, .. } = e {
                return Err(DecodeError::TooDeep);
            }
            let message = e.to_string();
            // The scanner's own nesting limits (flow and block collections).
            if message.contains("recursion limit exceeded") || message.contains("nesting limit") {
                return Err(DecodeError::TooDeep);
            }
            Err(DecodeError::Invalid(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Decodes on a thread with a decoder's stack, as [`super::decode`] does.
    fn decode(body: &str, format: Format) -> Result<Value, DecodeError> {
        let body = body.to_string();
        std::thread::Builder::new()
            .stack_size(DECODER_STACK_BYTES)
            .spawn(move || decode_now(body.as_bytes(), format, &AtomicBool::new(false)))
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn objects_decode_from_json_and_yaml() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {app: web}\ndata:\n  k: \"1\"\n  n: 2\n  list: [a, b]\n";
        let want = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"app": "web"}}, "data": {"k": "1", "n": 2, "list": ["a", "b"]}});
        assert_eq!(decode(yaml, Format::Yaml).unwrap(), want);
        assert_eq!(decode(&want.to_string(), Format::Yaml).unwrap(), want, "JSON is YAML");
        assert_eq!(decode(&want.to_string(), Format::Json).unwrap(), want);
        assert_eq!(decode("a: 1\na: 2\n", Format::Yaml).unwrap(), json!({"a": 2}));
        // Brackets inside strings do not count as levels.
        let text = json!({"s": "[[[[{{{{\\\"[[[".repeat(100)}).to_string();
        assert!(decode(&text, Format::Json).is_ok());
    }

    fn nested_json(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    fn nested_yaml_mappings(levels: usize) -> String {
        format!("{}1{}", "{a: ".repeat(levels), "}".repeat(levels))
    }

    fn nested_yaml_blocks(levels: usize) -> String {
        (0..levels).map(|i| format!("{}a:\n", " ".repeat(i))).collect::<String>() + &" ".repeat(levels) + "1\n"
    }

    #[test]
    fn nesting_up_to_the_limit_is_accepted_and_past_it_refused() {
        assert!(decode(&nested_json(MAX_BODY_DEPTH), Format::Json).is_ok());
        assert_eq!(decode(&nested_json(MAX_BODY_DEPTH + 1), Format::Json), Err(DecodeError::TooDeep));
        for format in [Format::Json, Format::Yaml] {
            assert!(decode(&nested_json(MAX_BODY_DEPTH), format).is_ok(), "{format:?}");
            assert_eq!(decode(&nested_json(MAX_BODY_DEPTH + 1), format), Err(DecodeError::TooDeep), "{format:?}");
        }
        assert!(decode(&nested_yaml_mappings(MAX_BODY_DEPTH), Format::Yaml).is_ok());
        assert_eq!(decode(&nested_yaml_mappings(MAX_BODY_DEPTH + 1), Format::Yaml), Err(DecodeError::TooDeep));
        assert!(decode(&nested_yaml_blocks(MAX_BODY_DEPTH - 1), Format::Yaml).is_ok());
        assert_eq!(decode(&nested_yaml_blocks(MAX_BODY_DEPTH + 1), Format::Yaml), Err(DecodeError::TooDeep));
        let status = DecodeError::TooDeep.to_status("invalid patch");
        assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
        assert!(status.message.contains("100 levels"), "{}", status.message);
    }

    #[test]
    fn very_deep_bodies_are_refused_without_quadratic_work() {
        // 70,000 levels took serde_yaml 14 s of CPU: refused at the 101st here.
        let started = std::time::Instant::now();
        for body in [nested_json(70_000), nested_yaml_mappings(70_000), "- ".repeat(70_000) + "1"] {
            assert_eq!(decode(&body, Format::Yaml), Err(DecodeError::TooDeep));
        }
        assert_eq!(decode(&nested_json(1_000_000), Format::Json), Err(DecodeError::TooDeep));
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_request_whose_client_closed_its_connection_is_abandoned() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let socket = crate::watch::ConnectionSocket::of(&accepted).unwrap();
        assert!(!peer_closed(&socket));
        let body = Bytes::from_static(b"{\"a\": 1}");
        assert_eq!(super::decode(body.clone(), Format::Json, Some(socket.clone())).await, Ok(json!({"a": 1})));
        // Every decoder busy: the request waits, and gives up once its client has gone.
        let busy = DECODERS.acquire_many(4).await.unwrap();
        let waiting = tokio::spawn(super::decode(body.clone(), Format::Yaml, Some(socket.clone())));
        tokio::time::sleep(PEER_CHECK * 3).await;
        assert!(!waiting.is_finished(), "the request waits for a decoder");
        drop(client);
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("abandoned promptly").unwrap();
        assert_eq!(outcome, Err(DecodeError::Abandoned));
        assert!(peer_closed(&socket));
        drop(busy);
    }

    #[test]
    fn errors_quote_no_input_and_abandoned_decoding_stops() {
        let secret = "s3cr3t-token-in-the-body";
        let body = format!("metadata:\n  name: a\n  token: {secret}\n  : : bad\n");
        let DecodeError::Invalid(message) = decode(&body, Format::Yaml).unwrap_err() else { panic!("not invalid") };
        assert!(!message.contains(secret), "{message}");
        assert!(matches!(decode("{\"a\": tru", Format::Json), Err(DecodeError::Invalid(_))));
        let gone = AtomicBool::new(true);
        assert_eq!(decode_now(b"a: 1\n", Format::Yaml, &gone), Err(DecodeError::Abandoned));
        assert_eq!(decode_now(b"{\"a\": 1}", Format::Json, &gone), Err(DecodeError::Abandoned));
    }
}
