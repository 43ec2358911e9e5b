//! A small HTTP/1.1 client over hyper's connection API (one connection per
//! [`Client`], reconnecting when the server closed it), and the "limit"
//! server: a pre-built byte buffer served from memory over loopback.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// What client-go's typed clients send: protobuf first, JSON as a fallback.
pub const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The Accept header kubectl sends for server-side printing.
pub const ACCEPT_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// One HTTP/1.1 connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    /// Sends `Accept-Encoding: gzip` (as kubectl does); bodies are counted
    /// as they arrive, not decoded.
    pub accept_gzip: bool,
}

impl Conn {
    /// Opens a connection (TCP_NODELAY, as kubectl's Go client does).
    pub async fn connect(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr).await.with_context(|| format!("connect {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn { sender, host: addr.to_string(), accept_gzip: false })
    }

    /// Whether the connection can take another request.
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    /// Sends a request; the response body is left to the caller.
    pub async fn send(&mut self, method: Method, path: &str, accept: Option<&str>, content_type: Option<&str>, body: Bytes) -> Result<Response<Incoming>> {
        let mut builder = Request::builder().method(method).uri(path).header(hyper::header::HOST, &self.host);
        builder = builder.header(hyper::header::USER_AGENT, "kubefold-bench/0.1");
        if let Some(a) = accept {
            builder = builder.header(hyper::header::ACCEPT, a);
        }
        if self.accept_gzip {
            builder = builder.header(hyper::header::ACCEPT_ENCODING, "gzip");
        }
        if let Some(c) = content_type {
            builder = builder.header(hyper::header::CONTENT_TYPE, c);
        }
        let request = builder.body(Full::new(body))?;
        self.sender.ready().await?;
        Ok(self.sender.send_request(request).await?)
    }

    /// GET, reading and counting the body without keeping it.
    pub async fn get_count(&mut self, path: &str, accept: Option<&str>) -> Result<(u16, usize)> {
        let response = self.send(Method::GET, path, accept, None, Bytes::new()).await?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut n = 0;
        while let Some(frame) = body.frame().await {
            if let Some(data) = frame?.data_ref() {
                n += data.len();
            }
        }
        Ok((status, n))
    }

    /// GET, keeping the body.
    pub async fn get_bytes(&mut self, path: &str, accept: Option<&str>) -> Result<(u16, Bytes)> {
        let response = self.send(Method::GET, path, accept, None, Bytes::new()).await?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut out = BytesMut::new();
        while let Some(frame) = body.frame().await {
            if let Some(data) = frame?.data_ref() {
                out.extend_from_slice(data);
            }
        }
        Ok((status, out.freeze()))
    }
}

/// A client of one server: one connection, reopened when closed.
pub struct Client {
    /// The server.
    pub addr: SocketAddr,
    conn: Option<Conn>,
    /// See [`Conn::accept_gzip`].
    pub accept_gzip: bool,
}

impl Client {
    /// A client of `addr` (connects lazily).
    pub fn new(addr: SocketAddr) -> Client {
        Client { addr, conn: None, accept_gzip: false }
    }

    /// Makes sure a connection is open (call before starting a timer).
    pub async fn ensure(&mut self) -> Result<&mut Conn> {
        if !self.conn.as_ref().is_some_and(Conn::is_open) {
            let mut conn = Conn::connect(self.addr).await?;
            conn.accept_gzip = self.accept_gzip;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().unwrap_or_else(|| unreachable!()))
    }

    /// GET counting bytes; on a connection error, retries once on a new connection.
    pub async fn get_count(&mut self, path: &str, accept: Option<&str>) -> Result<(u16, usize)> {
        match self.ensure().await?.get_count(path, accept).await {
            Ok(r) => Ok(r),
            Err(_) => {
                self.conn = None;
                self.ensure().await?.get_count(path, accept).await
            }
        }
    }

    /// GET keeping the body; retries once like [`Client::get_count`].
    pub async fn get_bytes(&mut self, path: &str, accept: Option<&str>) -> Result<(u16, Bytes)> {
        match self.ensure().await?.get_bytes(path, accept).await {
            Ok(r) => Ok(r),
            Err(_) => {
                self.conn = None;
                self.ensure().await?.get_bytes(path, accept).await
            }
        }
    }

    /// GET of a JSON document (status 200 required).
    pub async fn get_json(&mut self, path: &str) -> Result<serde_json::Value> {
        let (status, body) = self.get_bytes(path, None).await?;
        if status != 200 {
            return Err(anyhow!("GET {path}: {status}: {}", String::from_utf8_lossy(&body[..body.len().min(300)])));
        }
        Ok(serde_json::from_slice(&body)?)
    }

    /// A request with a body (PATCH, ...); returns status and body.
    pub async fn request(&mut self, method: Method, path: &str, content_type: &str, body: Bytes) -> Result<(u16, Bytes)> {
        let conn = self.ensure().await?;
        let response = conn.send(method, path, None, Some(content_type), body).await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((status, bytes))
    }
}

/// One GET on a fresh connection, bounded by `timeout`.
pub async fn get_once(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Bytes)> {
    tokio::time::timeout(timeout, async {
        let mut conn = Conn::connect(addr).await?;
        conn.get_bytes(path, None).await
    })
    .await
    .map_err(|_| anyhow!("GET {path} timed out"))?
}

/// Serves `body` as `application/json` to every request, from memory.
pub async fn serve_bytes(body: Bytes) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request: Request<Incoming>| {
                    let body = body.clone();
                    async move {
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header(hyper::header::CONTENT_TYPE, "application/json")
                                .body(Full::new(body))
                                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok((addr, task))
}
