//! kubefold's and the simulator's HTTP listeners: an actix-web app
//! served by actix-server and actix-http (what actix-web's `HttpServer` is
//! built on) over connections that also let SPDY/3.1 upgrades through.
//!
//! kubectl 1.27 to 1.29 open exec, attach and cp streams, and kubectl up
//! to 1.30 port-forward streams, by upgrading HTTP/1.1 to SPDY/3.1
//! (`Connection: Upgrade`, `Upgrade: SPDY/3.1`; Kubernetes'
//! `k8s.io/apimachinery/pkg/util/httpstream/spdy`). actix-http hands the
//! bytes after a handshake on as the request's payload only for
//! `Upgrade: websocket`; after any other upgrade it reads them as the next
//! request. client-go dials a new connection for each SPDY upgrade, so the
//! upgrade is that connection's first request: [`UpgradeAware`] reads the
//! head of the first request of each connection, and when it asks for
//! SPDY/3.1, shows actix-http `Upgrade: websocket` instead and records the
//! real protocol with the connection ([`is_spdy_upgrade`]), where no header
//! a client sends can set it. Everything after that head, and every other
//! connection's bytes after their first head, pass through untouched.
//!
//! - [`UpgradeAware`]: the connection wrapper.
//! - [`listen`]: serves an app on a listener, plain or TLS, with the
//!   settings of [`Options`].
//! - [`is_spdy_upgrade`]: whether a request is a SPDY/3.1 upgrade.

use std::any::Any;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use actix_http::body::MessageBody;
use actix_http::{HttpService, Protocol, Request, Response};
use actix_server::ServerBuilder;
use actix_service::{fn_service, map_config, IntoServiceFactory, Service, ServiceFactory, ServiceFactoryExt as _};
use actix_tls::accept::rustls_0_23::{reexports::ServerConfig, Acceptor, TlsStream};
use actix_tls::accept::TlsError;
use actix_web::dev::{AppConfig, Extensions};
use actix_web::rt::net::TcpStream;
use actix_web::HttpRequest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The server [`listen`] adds listeners to (`Server::build()`).
pub use actix_server::Server;

/// The protocol of the upgrades let through.
pub const SPDY: &str = "SPDY/3.1";

/// Largest first request head looked at; a longer one passes as it is
/// (actix-http refuses it anyway).
const MAX_HEAD: usize = 64 * 1024;

/// Marks a connection whose first request was a SPDY/3.1 upgrade; kept in
/// the connection data ([`HttpRequest::conn_data`]).
#[derive(Debug, Clone, Default)]
pub struct SpdyUpgrade(Arc<AtomicBool>);

impl SpdyUpgrade {
    /// Whether the connection's first request asked for SPDY/3.1.
    pub fn asked(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Whether `req` is a SPDY/3.1 upgrade (then actix-web shows it with
/// `Upgrade: websocket`, and its payload is the client's SPDY bytes).
pub fn is_spdy_upgrade(req: &HttpRequest) -> bool {
    req.conn_data::<SpdyUpgrade>().is_some_and(SpdyUpgrade::asked)
}

/// Where a connection is in its first request head.
enum Head {
    /// Reading it (the bytes so far).
    Reading(Vec<u8>),
    /// Handing it (perhaps rewritten) and the bytes read with it to the reader.
    Releasing(Vec<u8>, usize),
    /// Past it: bytes pass straight through.
    Passed,
}

/// A connection whose first request head, when it asks for SPDY/3.1, is
/// shown as asking for WebSocket (see the crate docs). Writes pass through.
pub struct UpgradeAware<T> {
    io: T,
    head: Head,
    spdy: SpdyUpgrade,
}

impl<T> UpgradeAware<T> {
    /// Wraps an accepted connection.
    pub fn new(io: T) -> UpgradeAware<T> {
        UpgradeAware { io, head: Head::Reading(Vec::new()), spdy: SpdyUpgrade::default() }
    }

    /// Wraps a connection that speaks `protocol`: an HTTP/2 one has no
    /// upgrades, and its bytes pass straight through.
    fn speaking(io: T, protocol: Protocol) -> UpgradeAware<T> {
        match protocol {
            Protocol::Http2 => UpgradeAware { io, head: Head::Passed, spdy: SpdyUpgrade::default() },
            _ => UpgradeAware::new(io),
        }
    }

    /// The connection underneath.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// The connection's marker, set once its first head asked for SPDY/3.1.
    pub fn spdy(&self) -> SpdyUpgrade {
        self.spdy.clone()
    }
}

/// The end of the first request head in `bytes` (after its empty line).
fn head_end(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(n) = bytes[at..].iter().position(|b| *b == b'\n') {
        let line = &bytes[at..at + n];
        at += n + 1;
        if line.is_empty() || line == b"\r" {
            return Some(at);
        }
    }
    None
}

/// The first request head `head` with its `Upgrade: SPDY/3.1` header made
/// `Upgrade: websocket`; `None` when it asks for no SPDY upgrade.
pub fn rewrite_head(head: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    while let Some(n) = head[at..].iter().position(|b| *b == b'\n') {
        let line = &head[at..at + n];
        if let Some(colon) = line.iter().position(|b| *b == b':') {
            let name = std::str::from_utf8(&line[..colon]).unwrap_or_default();
            let value = std::str::from_utf8(&line[colon + 1..]).unwrap_or_default();
            if name.trim().eq_ignore_ascii_case("upgrade") && value.trim().eq_ignore_ascii_case(SPDY) {
                let mut out = Vec::with_capacity(head.len() + 1);
                out.extend_from_slice(&head[..at]);
                out.extend_from_slice(b"Upgrade: websocket\r");
                out.extend_from_slice(&head[at + n..]);
                return Some(out);
            }
        }
        at += n + 1;
    }
    None
}

impl<T: AsyncRead + Unpin> AsyncRead for UpgradeAware<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            match &mut this.head {
                Head::Passed => return Pin::new(&mut this.io).poll_read(cx, buf),
                Head::Releasing(bytes, at) => {
                    let n = buf.remaining().min(bytes.len() - *at);
                    buf.put_slice(&bytes[*at..*at + n]);
                    *at += n;
                    if *at == bytes.len() {
                        this.head = Head::Passed;
                    }
                    return Poll::Ready(Ok(()));
                }
                Head::Reading(bytes) => {
                    let mut chunk = [0u8; 4096];
                    let mut read = ReadBuf::new(&mut chunk);
                    ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
                    let eof = read.filled().is_empty();
                    bytes.extend_from_slice(read.filled());
                    let end = head_end(bytes);
                    if end.is_none() && !eof && bytes.len() <= MAX_HEAD {
                        continue;
                    }
                    let mut bytes = std::mem::take(bytes);
                    if let Some(end) = end {
                        if let Some(mut rewritten) = rewrite_head(&bytes[..end]) {
                            rewritten.extend_from_slice(&bytes[end..]);
                            bytes = rewritten;
                            this.spdy.0.store(true, Ordering::Release);
                        }
                    }
                    this.head = if bytes.is_empty() { Head::Passed } else { Head::Releasing(bytes, 0) };
                    if eof && matches!(this.head, Head::Passed) {
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for UpgradeAware<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A hook called with each accepted connection (the `TcpStream`, or the
/// rustls `TlsStream<TcpStream>`) and its connection data, as
/// `HttpServer::on_connect`.
pub type OnConnect = Arc<dyn Fn(&dyn Any, &mut Extensions) + Send + Sync>;

/// How connections are served (`HttpServer`'s settings of the same names).
#[derive(Clone, Default)]
pub struct Options {
    /// How long an idle kept-alive connection stays open (actix's 5 s when `None`).
    pub keep_alive: Option<Duration>,
    /// `TCP_NODELAY` on accepted sockets.
    pub tcp_nodelay: bool,
    /// The connection's write buffer (actix's default when `None`).
    pub h1_write_buffer_size: Option<usize>,
    /// TLS: the rustls configuration and the handshake timeout.
    pub tls: Option<(ServerConfig, Duration)>,
    /// Serve HTTP/2 as well: over TLS to clients that ask for it through
    /// ALPN (`h2`, offered before `http/1.1`, as kube-apiserver does), and
    /// on plain connections to clients that start with the HTTP/2 preface
    /// (prior knowledge, RFC 9113 §3.3). HTTP/2 connections carry no
    /// upgrades (exec and port-forward clients dial HTTP/1.1 for those).
    pub http2: bool,
    /// Called with each accepted connection.
    pub on_connect: Option<OnConnect>,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("keep_alive", &self.keep_alive)
            .field("tcp_nodelay", &self.tcp_nodelay)
            .field("h1_write_buffer_size", &self.h1_write_buffer_size)
            .field("tls", &self.tls.as_ref().map(|(_, timeout)| timeout))
            .field("http2", &self.http2)
            .finish_non_exhaustive()
    }
}

/// The HTTP/1.1 service of one connection type, with `HttpServer`'s
/// defaults (5 s to read a request head, 1 s for a client to disconnect).
fn http_service<T, F, I, S, B>(
    options: &Options,
    addr: SocketAddr,
    factory: &F,
) -> impl ServiceFactory<(UpgradeAware<T>, Protocol, Option<SocketAddr>), Config = (), Response = (), Error = actix_http::error::DispatchError, InitError = ()>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    F: Fn() -> I,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let mut builder = HttpService::build()
        .client_request_timeout(Duration::from_secs(5))
        .client_disconnect_timeout(Duration::from_secs(1))
        .local_addr(addr);
    if let Some(keep_alive) = options.keep_alive {
        builder = builder.keep_alive(keep_alive);
    }
    if let Some(size) = options.h1_write_buffer_size {
        builder = builder.h1_write_buffer_size(size);
    }
    let on_connect = options.on_connect.clone();
    let builder = builder.on_connect_ext(move |io: &UpgradeAware<T>, data: &mut Extensions| {
        data.insert(io.spdy());
        if let Some(hook) = &on_connect {
            hook(io.get_ref() as &dyn Any, data);
        }
    });
    let secure = options.tls.is_some();
    let app = factory().into_factory().map_err(|e| Into::<actix_web::Error>::into(e).error_response());
    // `AppConfig`'s constructor is crate-private in actix-web; this is the
    // one its own test server uses, with the values `HttpServer` gives.
    builder.finish(map_config(app, move |_| AppConfig::__priv_test_new(secure, addr.to_string(), addr)))
}

/// Serves the app `factory` builds (one per worker, as `HttpServer::new`)
/// on `listener` with `options`: HTTP/1.1, and HTTP/2 when
/// [`Options::http2`] is set, over TLS when configured (ALPN).
pub fn listen<F, I, S, B>(builder: ServerBuilder, listener: std::net::TcpListener, options: Options, factory: F) -> io::Result<ServerBuilder>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let addr = listener.local_addr()?;
    let nodelay = options.tcp_nodelay;
    let http2 = options.http2;
    match options.tls.clone() {
        None => builder.listen(format!("kubefold-http-{addr}"), listener, move || {
            fn_service(move |io: TcpStream| async move {
                if nodelay {
                    let _ = io.set_nodelay(true);
                }
                let peer = io.peer_addr().ok();
                let protocol = if http2 { plain_protocol(&io).await } else { Protocol::Http1 };
                Ok::<_, actix_http::error::DispatchError>((UpgradeAware::speaking(io, protocol), protocol, peer))
            })
            .and_then(http_service(&options, addr, &factory))
        }),
        Some((mut config, handshake_timeout)) => {
            let mut protocols = if http2 { vec![b"h2".to_vec()] } else { Vec::new() };
            protocols.push(b"http/1.1".to_vec());
            protocols.extend_from_slice(&config.alpn_protocols);
            config.alpn_protocols = protocols;
            builder.listen(format!("kubefold-https-{addr}"), listener, move || {
                let mut acceptor = Acceptor::new(config.clone());
                acceptor.set_handshake_timeout(handshake_timeout);
                acceptor
                    .map_init_err(|_| ())
                    .map_err(TlsError::into_service_error)
                    .and_then(move |io: TlsStream<TcpStream>| async move {
                        if nodelay {
                            let _ = io.get_ref().0.set_nodelay(true);
                        }
                        let peer = io.get_ref().0.peer_addr().ok();
                        let protocol = match io.get_ref().1.alpn_protocol() {
                            Some(b"h2") => Protocol::Http2,
                            _ => Protocol::Http1,
                        };
                        Ok((UpgradeAware::speaking(io, protocol), protocol, peer))
                    })
                    .and_then(http_service(&options, addr, &factory).map_err(TlsError::Service))
            })
        }
    }
}

/// The start of the HTTP/2 connection preface (RFC 9113 §3.4) that tells
/// a client speaking HTTP/2 with prior knowledge from an HTTP/1.1 one.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2";

/// The protocol of a plain connection by its first bytes: HTTP/2 when they
/// are the preface, HTTP/1.1 otherwise, or when they do not come within
/// the time allowed for a request head (HTTP/1.1's dispatcher then ends the
/// connection as it ends any that sends no request).
async fn plain_protocol(io: &TcpStream) -> Protocol {
    let mut first = [0u8; H2_PREFACE.len()];
    let mut seen = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    // `peek` returns what has arrived: a preface split over segments comes
    // in more than one. (`timeout_at` polls the peek first, which is ready
    // at once while any bytes wait, so the deadline is checked apart.)
    while seen < first.len() && first[..seen] == H2_PREFACE[..seen] && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, io.peek(&mut first)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) if n > seen => seen = n,
            Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
    if seen == first.len() && first == H2_PREFACE {
        Protocol::Http2
    } else {
        Protocol::Http1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_a_spdy_upgrade_is_rewritten() {
        let head = b"POST /api/v1/namespaces/a/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
        let rewritten = String::from_utf8(rewrite_head(head).unwrap()).unwrap();
        assert_eq!(rewritten, String::from_utf8_lossy(head).replace("Upgrade: SPDY/3.1", "Upgrade: websocket"));
        assert_eq!(rewrite_head(b"GET / HTTP/1.1\r\nupgrade:spdy/3.1\r\n\r\n").unwrap(), b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n");
        assert!(rewrite_head(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n").is_none());
        assert!(rewrite_head(b"GET / HTTP/1.1\r\nX-Upgrade: SPDY/3.1\r\n\r\n").is_none());
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    /// What the reader gets from `chunks` written one at a time.
    async fn read_through(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let (mut client, server) = tokio::io::duplex(64);
        let mut wrapped = UpgradeAware::new(server);
        let spdy = wrapped.spdy();
        let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for chunk in chunks {
                client.write_all(&chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut out = Vec::new();
        wrapped.read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        (out, spdy.asked())
    }

    #[tokio::test]
    async fn the_first_head_is_read_whole_and_later_bytes_pass_unchanged() {
        // A head split mid-header, then SPDY frames that look like a header.
        let (out, spdy) = read_through(&[b"GET /x HTTP/1.1\r\nUpg", b"rade: SPDY/3.1\r\n\r\n\x80\x03\x00\x01", b"Upgrade: SPDY/3.1\r\n\r\n"]).await;
        assert!(spdy);
        assert_eq!(out, b"GET /x HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x80\x03\x00\x01Upgrade: SPDY/3.1\r\n\r\n");
        // A plain request and a second request asking for SPDY: untouched.
        let plain: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nUpgrade: SPDY/3.1\r\n\r\n";
        assert_eq!(read_through(&[plain]).await, (plain.to_vec(), false));
        // A connection closed mid-head hands on what came.
        assert_eq!(read_through(&[b"GET / HT"]).await, (b"GET / HT".to_vec(), false));
        assert_eq!(read_through(&[]).await, (Vec::new(), false));
    }

    /// The protocol [`plain_protocol`] sees on a connection whose client
    /// writes `chunks` (with a pause between them) and then closes.
    async fn protocol_of(chunks: &'static [&'static [u8]]) -> Protocol {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            for chunk in chunks {
                stream.write_all(chunk).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let (io, _) = listener.accept().await.unwrap();
        let protocol = plain_protocol(&io).await;
        client.await.unwrap();
        protocol
    }

    #[tokio::test]
    async fn a_plain_connection_is_http2_only_when_it_opens_with_the_preface() {
        const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(protocol_of(&[PREFACE]).await, Protocol::Http2);
        // A preface split over segments is still one.
        assert_eq!(protocol_of(&[b"PRI * H", b"TTP/2.0\r\n\r\nSM\r\n\r\n"]).await, Protocol::Http2);
        assert_eq!(protocol_of(&[b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n"]).await, Protocol::Http1);
        // A request that happens to start like the preface, one that stops
        // short of it, and a client that closes at once: HTTP/1.1 (whose
        // dispatcher answers or ends them).
        assert_eq!(protocol_of(&[b"PRI * HTTP/1.1\r\n\r\n"]).await, Protocol::Http1);
        assert_eq!(protocol_of(&[b"PRI * HT"]).await, Protocol::Http1);
        assert_eq!(protocol_of(&[]).await, Protocol::Http1);
    }
}
