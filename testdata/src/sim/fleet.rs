//! Many member clusters in one process (`kubefold sim --clusters N`): each
//! member is the same simulated API server as a simulator of its own (its
//! own store, resource version sequence, history, watch streams, discovery,
//! faults and churn) on its own loopback port, but
//!
//! - one HTTP server listens on every member's port with a fixed number of
//!   worker threads, and answers each request as the member whose port it
//!   came in on: N members are not N runtimes nor N thread pools;
//! - the members' load pods are compact ([`SimConfig::compact`]): about 100
//!   bytes each, their bodies rendered from the template when served, so
//!   that millions of pods fit in a few hundred MB;
//! - the members keep no request log, and refuse the `offline` fault (one
//!   member's port cannot be closed alone).

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use kubefold_engine::resources::ResourceType;

use super::sim_listen_options;
use super::status::ApiError;
use super::{churn, controllers, server, Shared, SimArgs, SimConfig};

/// Configuration of a fleet of simulated members.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Number of members.
    pub clusters: usize,
    /// The members' names are this prefix and `1..=clusters`.
    pub name_prefix: String,
    /// The address members listen on: port 0 gives each a free port, port
    /// P gives them P to P+N-1.
    pub listen: SocketAddr,
    /// Load pods over the whole fleet, spread evenly (the first members get
    /// one more when it does not divide).
    pub pods: usize,
    /// Background changes per second over the whole fleet, spread evenly.
    pub churn_per_sec: f64,
    /// HTTP worker threads shared by every member.
    pub workers: usize,
    /// The configuration every member starts from (name, pods, churn,
    /// listen and seed are set per member: the seed is this one plus the
    /// member's number).
    pub member: SimConfig,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            clusters: 3,
            name_prefix: "member".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            pods: 0,
            churn_per_sec: 0.0,
            workers: 2,
            member: SimConfig::default(),
        }
    }
}

impl FleetConfig {
    /// The configuration of member `i` (0-based).
    fn member(&self, i: usize) -> SimConfig {
        let n = self.clusters.max(1);
        let pods = self.pods / n + usize::from(i < self.pods % n);
        SimConfig {
            name: format!("{}{}", self.name_prefix, i + 1),
            listen: self.listen,
            pods,
            churn_per_sec: self.churn_per_sec / n as f64,
            seed: self.member.seed.wrapping_add(i as u64),
            compact: true,
            fleet_member: true,
            // The fleet's shared server serves plain HTTP.
            tls: None,
            ..self.member.clone()
        }
    }
}

/// One member of a running fleet.
pub struct FleetMember {
    /// Its name.
    pub name: String,
    /// The address it listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FleetMember {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its head resource version.
    pub fn resource_version(&self) -> u64 {
        self.shared.read().map(|s| s.rv()).unwrap_or_default()
    }

    /// A restore of its etcd from a backup (also `POST /sim/restore` on its
    /// port): see [`super::SimHandle::restore`]. Its open watches end and
    /// its old resource versions are gone: a client must relist.
    pub fn restore(&self, first: Option<u64>) -> (u64, u64) {
        super::restore(&self.shared, first)
    }

    /// Its churn rate (changes per second; 0 stops it).
    pub fn set_churn(&self, per_second: f64) {
        self.shared.churn_rate.send_replace(if per_second.is_finite() { per_second.max(0.0) } else { 0.0 });
    }

    /// Its number of objects of every type.
    pub fn objects(&self) -> usize {
        self.shared.read().map(|s| (0..s.catalog().len()).map(|i| s.count(i)).sum()).unwrap_or_default()
    }
}

/// A running fleet. Dropping it stops it.
pub struct FleetHandle {
    members: Vec<FleetMember>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FleetHandle {
    /// The members, in the order of their numbers.
    pub fn members(&self) -> &[FleetMember] {
        &self.members
    }

    /// `(name, url)` of every member.
    pub fn urls(&self) -> Vec<(String, String)> {
        self.members.iter().map(|m| (m.name.clone(), m.url())).collect()
    }

    /// The `NAME=URL` lines of every member, each ending in a newline: what
    /// `kubefold serve --cluster` and `--clusters-file` accept.
    pub fn url_lines(&self) -> String {
        self.members.iter().map(|m| format!("{}={}\n", m.name, m.url())).collect()
    }

    /// Stops every member (open watches end) and joins the server's thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for FleetHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The members by the address their requests come in on.
type Members = HashMap<SocketAddr, Arc<Shared>>;

/// Starts a fleet: builds every member's store (on up to 4 threads), binds
/// every member's port, and returns once all listen.
pub fn start(config: FleetConfig) -> io::Result<FleetHandle> {
    if config.clusters == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a fleet needs at least one cluster"));
    }
    if let Err(e) = config.member.faults.validate() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("invalid faults: {e}")));
    }
    if config.member.faults.offline.is_some() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the offline fault needs a simulator of its own"));
    }
    let started = Instant::now();
    let catalog = super::catalog(&config.member);
    let configs: Vec<SimConfig> = (0..config.clusters).map(|i| config.member(i)).collect();
    let stores = build_stores(&configs, &catalog);
    tracing::info!(
        clusters = config.clusters, pods = config.pods,
        elapsed_ms = started.elapsed().as_millis() as u64, "Fleet members built."
    );
    let mut members = Vec::with_capacity(configs.len());
    let mut listeners = Vec::with_capacity(configs.len());
    let mut tasks = Vec::with_capacity(configs.len());
    for (i, (member, store)) in configs.into_iter().zip(stores).enumerate() {
        let port = match config.listen.port() {
            0 => 0,
            base => base.checked_add(i as u16).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "ports past 65535"))?,
        };
        let listener = TcpListener::bind(SocketAddr::new(config.listen.ip(), port))?;
        let addr = listener.local_addr()?;
        let (shared, tasks_rx) = super::new_shared(member, store, started, None, None);
        members.push(FleetMember { name: shared.config.name.clone(), addr, shared });
        listeners.push(listener);
        tasks.push(tasks_rx);
    }
    let by_addr: Arc<Members> = Arc::new(members.iter().map(|m| (m.addr, m.shared.clone())).collect());
    let shareds: Vec<Arc<Shared>> = members.iter().map(|m| m.shared.clone()).collect();
    let workers = config.workers.max(1);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name("sim-fleet".into()).spawn(move || {
        let system = actix_web::rt::System::new();
        system.block_on(serve(by_addr, shareds, tasks, listeners, workers, ready_tx, stop_rx));
    })?;
    match ready_rx.recv() {
        Ok(Ok(())) => {
            tracing::info!(
                clusters = members.len(), startup_ms = started.elapsed().as_millis() as u64,
                "Simulated fleet listening."
            );
            Ok(FleetHandle { members, stop: Some(stop_tx), thread: Some(thread) })
        }
        Ok(Err(error)) => {
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(io::Error::other("the fleet's thread ended before listening"))
        }
    }
}

/// Builds the members' stores on up to 4 threads (compact load pods cost
/// little each; the members' small workloads are most of it).
fn build_stores(configs: &[SimConfig], catalog: &Arc<[ResourceType]>) -> Vec<super::Store> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 4);
    let chunk = configs.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(|c| super::build_store_in(c, catalog.clone())).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

async fn serve(
    by_addr: Arc<Members>,
    shareds: Vec<Arc<Shared>>,
    tasks: Vec<tokio::sync::mpsc::UnboundedReceiver<controllers::Task>>,
    listeners: Vec<TcpListener>,
    workers: usize,
    ready: std::sync::mpsc::Sender<io::Result<()>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let data = web::Data::new(by_addr);
    let app = move || App::new().app_data(data.clone()).default_service(web::to(dispatch));
    let mut server = kubefold_listen::Server::build().workers(workers).disable_signals().shutdown_timeout(2);
    for listener in listeners {
        server = match kubefold_listen::listen(server, listener, sim_listen_options(), app.clone()) {
            Ok(server) => server,
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
    }
    let server = server.run();
    let handle = server.handle();
    let task = actix_web::rt::spawn(server);
    for (shared, tasks) in shareds.iter().zip(tasks) {
        actix_web::rt::spawn(controllers::run(shared.clone(), tasks));
        actix_web::rt::spawn(churn::run(shared.clone()));
    }
    let _ = ready.send(Ok(()));
    let _ = stop.await;
    for shared in &shareds {
        shared.shutdown.cancel();
    }
    handle.stop(true).await;
    let _ = task.await;
    tracing::info!(clusters = shareds.len(), "Simulated fleet stopped.");
}

/// Answers a request as the member whose port it came in on.
async fn dispatch(req: HttpRequest, payload: web::Payload, members: web::Data<Arc<Members>>) -> HttpResponse {
    let Some(shared) = members.get(&req.app_config().local_addr()).cloned() else {
        return ApiError::PathNotFound.error_response();
    };
    req.extensions_mut().insert(shared.clone());
    server::serve_member(req, payload, shared).await
}

/// Writes `text` to `path` whole: into a temporary file beside it, then renamed.
fn write_whole(path: &Path, text: &str) -> io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "urls".into());
    let temporary = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// Runs `kubefold sim --clusters N` in the foreground until Ctrl-C or SIGTERM.
pub fn run_cli(args: SimArgs) -> io::Result<()> {
    let clusters = args.clusters.unwrap_or(1) as usize;
    let urls_file = args.urls_file.clone();
    let name_prefix = args.name_prefix.clone();
    let workers = args.workers;
    let listen = args.listen;
    let pods = args.pods;
    let churn_per_sec = args.churn_per_sec;
    let member = SimConfig::from(args);
    let config = FleetConfig { clusters, name_prefix, listen, pods, churn_per_sec, workers, member };
    let fleet = start(config)?;
    let lines = fleet.url_lines();
    if let Some(path) = &urls_file {
        write_whole(path, &lines)?;
    }
    let mut stdout = io::stdout().lock();
    stdout.write_all(lines.as_bytes())?;
    stdout.flush()?;
    drop(stdout);
    eprintln!("kubefold sim: {clusters} member clusters listening");
    super::wait_for_signal()?;
    tracing::info!(clusters, "Stopping.");
    fleet.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Workload;

    #[test]
    fn members_split_pods_and_churn_and_get_their_own_names_and_seeds() {
        let config = FleetConfig { clusters: 3, pods: 10, churn_per_sec: 6.0, ..FleetConfig::default() };
        let members: Vec<SimConfig> = (0..3).map(|i| config.member(i)).collect();
        assert_eq!(members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["member1", "member2", "member3"]);
        assert_eq!(members.iter().map(|m| m.pods).collect::<Vec<_>>(), [4, 3, 3]);
        assert!(members.iter().all(|m| m.churn_per_sec == 2.0 && m.compact && m.fleet_member));
        assert_eq!(members.iter().map(|m| m.seed).collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[test]
    fn compact_load_pods_serve_exactly_what_stored_ones_do() {
        let full = SimConfig { name: "east".into(), workload: Workload::Empty, pods: 300, seed: 7, ..SimConfig::default() };
        let compact = SimConfig { compact: true, ..full.clone() };
        // Both render timestamps from the clock at build time: build them within one second.
        let created = |store: &super::super::Store| {
            let pods = store.resource_index("", "v1", "pods").unwrap();
            store.range(pods, "").next().map(|(_, o)| o.value()["metadata"]["creationTimestamp"].clone())
        };
        let (full, compact) = (0..5)
            .map(|_| (super::super::build_store(&full), super::super::build_store(&compact)))
            .find(|(a, b)| created(a) == created(b))
            .expect("two stores built within one second");
        assert_eq!(full.rv(), compact.rv());
        let pods = full.resource_index("", "v1", "pods").unwrap();
        let a: Vec<_> = full.range(pods, "").collect();
        let b: Vec<_> = compact.range(pods, "").collect();
        assert_eq!(a.len(), 300);
        assert_eq!(a.len(), b.len());
        for ((ka, oa), (kb, ob)) in a.iter().zip(&b) {
            assert_eq!(ka, kb);
            assert!(ob.is_generated() && !oa.is_generated());
            assert_eq!(oa.rv, ob.rv);
            assert_eq!(oa.bytes(), ob.bytes(), "{ka}");
            let (mut ia, mut ib) = (bytes::BytesMut::new(), bytes::BytesMut::new());
            oa.write_list_item(&mut ia);
            ob.write_list_item(&mut ib);
            assert_eq!(ia, ib, "{ka}");
            assert_eq!(oa.uid(), ob.uid());
            assert_eq!(oa.labels(), ob.labels());
            assert_eq!(oa.fields(), ob.fields());
        }
    }

    #[test]
    fn a_restore_renumbers_compact_pods_without_storing_them_whole() {
        let config = SimConfig { workload: Workload::Empty, pods: 50, compact: true, ..SimConfig::default() };
        let mut store = super::super::build_store(&config);
        let pods = store.resource_index("", "v1", "pods").unwrap();
        store.restore_versions(10);
        let (key, pod) = store.range(pods, "").next().map(|(k, o)| (k.clone(), o.clone())).unwrap();
        assert!(pod.is_generated(), "{key} is still rendered from the template");
        assert_eq!(pod.value()["metadata"]["resourceVersion"], serde_json::json!(pod.rv.to_string()));
    }
}
