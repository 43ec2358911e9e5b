//! The `ClusterWatcher` actor: one per (member cluster, resource type). It owns
//! the connection to the member for that type and its [`Machine`]; it performs
//! the list and watch requests the machine asks for, turns what the member
//! sends into [`Change`]s, and hands them to the aggregator with backpressure
//! (`send(..).await`: it reads the member no faster than commits complete).
//!
//! A selected type that is not built in (a custom resource, or any other
//! type the member serves) is first discovered from the member: its
//! discovery document gives the plural, scope, verbs, short names and
//! categories, and its CustomResourceDefinition, when the member shows it,
//! the printer columns.

use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Recipient, WrapFuture};
use futures::{AsyncBufRead, AsyncBufReadExt, FutureExt};
use kube::api::{ListParams, WatchParams};
use kube::core::Request as KubeRequest;
use kubefold_engine::event::Change;
use kubefold_engine::check::{check, split_canonical_watch_line, split_watch_line};
use kubefold_engine::object::{ingest_checked, ingest_unchecked, Ingested};
use kubefold_engine::resources::{ResourceType, TypeRef};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use crate::cluster::ClusterSpec;
use crate::fleet::{SyncState, WatcherReport};
use crate::machine::{Input, Machine, Request};
use crate::messages::{Ingest, IngestError, Queued, Stop, WatchBatch};

/// Page size of the watcher's lists.
const LIST_PAGE: u32 = 500;
/// Server-side timeout of each watch request (below kube's 295 s read timeout).
const WATCH_TIMEOUT_SECS: u32 = 290;
/// Most watch lines gathered into one commit.
const MAX_BATCH: usize = 1000;
/// Longest watch line read; a longer one ends the stream as broken (etcd's
/// default request limit is 1.5 MiB, so no real object comes near it).
const MAX_LINE: usize = 64 << 20;
/// How long a streaming list may stay silent before its
/// `k8s.io/initial-events-end` bookmark: kube-apiserver sends the initial
/// events from its watch cache at once and the bookmark right after them,
/// so a member that stays silent this long did not take the request as a
/// streaming list (a server before 1.27 ignores `sendInitialEvents`).
const INITIAL_EVENTS_SILENCE: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest pause between two attempts to discover a type the member does not serve (yet).
const MAX_DISCOVERY_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// What a watcher watches.
#[derive(Debug, Clone)]
pub enum WatchTarget {
    /// A type whose details kubefold has (the built-in ones).
    Known(ResourceType),
    /// A selected type to discover from the member before watching it.
    Discover(TypeRef),
}

/// Why a batch was not committed.
#[derive(Debug, thiserror::Error)]
enum CommitError {
    /// The sink stopped.
    #[error("event sink unavailable: {0}")]
    SinkUnavailable(#[source] actix::MailboxError),
    /// The sink refused the batch.
    #[error(transparent)]
    Refused(#[from] IngestError),
}

/// The watcher actor.
pub struct ClusterWatcher {
    spec: ClusterSpec,
    target: WatchTarget,
    sink: Recipient<Ingest>,
    /// Its status row, its member's restores, the types it discovers.
    report: WatcherReport,
    /// The resource key and member RV to resume from.
    checkpoint: Option<(String, String)>,
    namespace: Option<String>,
}

impl ClusterWatcher {
    /// A watcher of `resource` in the member `spec`, resuming from
    /// `checkpoint`, handing batches to `sink` (the aggregator, or the
    /// resolver for the control plane's Services), reporting through `report`.
    pub fn new(
        spec: ClusterSpec,
        resource: ResourceType,
        sink: Recipient<Ingest>,
        report: WatcherReport,
        checkpoint: Option<String>,
    ) -> ClusterWatcher {
        let checkpoint = checkpoint.map(|rv| (resource.key(), rv));
        ClusterWatcher { spec, target: WatchTarget::Known(resource), sink, report, checkpoint, namespace: None }
    }

    /// A watcher the resource selection asks for: `target` in the member
    /// `spec`, in `namespace` only when set, identified by the ticket of
    /// its `report`, resuming from `checkpoint` (resource key and member
    /// RV) when the type's key is still that one.
    pub fn selected(
        spec: ClusterSpec,
        target: WatchTarget,
        namespace: Option<String>,
        sink: Recipient<Ingest>,
        report: WatcherReport,
        checkpoint: Option<(String, String)>,
    ) -> ClusterWatcher {
        ClusterWatcher { spec, target, sink, report, checkpoint, namespace }
    }
}

impl Actor for ClusterWatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let (spec, target, sink, report) = (self.spec.clone(), self.target.clone(), self.sink.clone(), self.report.clone());
        let (namespace, checkpoint) = (self.namespace.clone(), self.checkpoint.clone());
        let watch = async move {
            let seed = (spec.name.len() as u64) << 32 ^ std::process::id() as u64;
            let mut machine = Machine::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let resource = match &target {
                WatchTarget::Known(resource) => resource.clone(),
                WatchTarget::Discover(type_ref) => {
                    let client = connect(&spec, &mut machine, |e| warn!(cluster = %spec.name, resource = %type_ref, error = e, "Member request failed.")).await;
                    discover(&client, &spec.name, type_ref, &report).await
                }
            };
            let checkpoint = checkpoint.filter(|(key, _)| *key == resource.key()).map(|(_, rv)| rv);
            let run = Run {
                key: resource.key(),
                spec,
                resource,
                sink,
                report,
                namespace,
                heal_at: std::cell::Cell::new(None),
                heals: std::cell::Cell::new(0),
                relist_permit: std::cell::Cell::new(None),
            };
            if !matches!(target, WatchTarget::Known(_)) {
                // Discovered types report from now on (readiness does not
                // wait for a type a member may never serve).
                run.update_status(|s| s.checkpoint = checkpoint.clone());
            }
            run.run(machine, checkpoint).await
        };
        ctx.spawn(watch.into_actor(self).map(|_, _, ctx| ctx.stop()));
    }
}

/// The member's client (shared by this thread's watchers of the member),
/// retrying with the machine's backoff.
async fn connect(spec: &ClusterSpec, machine: &mut Machine, report: impl Fn(&str)) -> kube::Client {
    loop {
        match spec.shared_client().await {
            Ok(client) => return client,
            Err(e) => {
                report(&e.to_string());
                let retry = machine.step(Input::Failed { retry_after: None });
                tokio::time::sleep(retry.delay).await;
            }
        }
    }
}

/// Discovers `type_ref` from the member until it serves it (a CRD may be
/// installed later), records it in the fleet's catalog, and returns it.
async fn discover(client: &kube::Client, cluster: &str, type_ref: &TypeRef, report: &WatcherReport) -> ResourceType {
    let mut delay = std::time::Duration::from_secs(1);
    let mut reported = false;
    loop {
        match discover_once(client, type_ref).await {
            Ok(resource) => {
                info!(cluster, resource = %resource.key(), kind = %type_ref, printer_columns = resource.printer_columns.len(), "Resource type discovered.");
                report.learn_type(resource.clone());
                return resource;
            }
            Err(error) if !reported => {
                warn!(cluster, resource = %type_ref, error, "Selected resource type not discovered; retrying.");
                reported = true;
            }
            Err(error) => debug!(cluster, resource = %type_ref, error, "Selected resource type still not discovered."),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_DISCOVERY_RETRY);
    }
}

/// One discovery of `type_ref`: the member's document of its group version,
/// then (for a group other than the core one) its CustomResourceDefinition,
/// which may be absent or forbidden (then the type has no printer columns).
async fn discover_once(client: &kube::Client, type_ref: &TypeRef) -> Result<ResourceType, String> {
    let get = |path: String| async move {
        let request = http::Request::get(path).body(Vec::new()).map_err(|e| e.to_string())?;
        let text = client.request_text(request).await.map_err(|e| e.to_string())?;
        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
    };
    let (group, version) = type_ref.group_version();
    let path = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    let list = get(path.clone()).await.map_err(|e| format!("GET {path}: {e}"))?;
    let bare = kubefold_engine::resources::from_discovery(type_ref, &list, None)?;
    if group.is_empty() {
        return Ok(bare);
    }
    let crd = get(format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}.{group}", bare.plural)).await.ok();
    kubefold_engine::resources::from_discovery(type_ref, &list, crd.as_ref())
}

impl Handler<Stop> for ClusterWatcher {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// What one watch line says.
#[derive(Deserialize)]
struct WatchLine<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// A watch event as read: its type and the text of its object.
struct Event<'a> {
    event_type: &'a str,
    /// JSON, except that the object of an event that changes an object
    /// (`ADDED`, `MODIFIED`, `DELETED`) is checked by its ingest
    /// ([`ingest_unchecked`], in the walk that reads it).
    object: &'a [u8],
    /// The line, when it was read in the form Kubernetes writes
    /// (`split_canonical_watch_line`): an object that does not ingest is
    /// then read again from the line as any event is.
    canonical: Option<&'a [u8]>,
}

/// Whether a watch event's object is ingested (and checked then).
fn changes_an_object(event_type: &str) -> bool {
    matches!(event_type, "ADDED" | "MODIFIED" | "DELETED")
}

/// Reads a watch event line without serde_json: as Kubernetes writes one
/// when it is in that form (the object's text is not read then), else
/// exactly ([`read_event_exactly`]).
fn read_event(line: &[u8]) -> Result<Event<'_>, serde_json::Error> {
    if let Some((event_type, object)) = split_canonical_watch_line(line) {
        if changes_an_object(event_type) || check(object) {
            return Ok(Event { event_type, object, canonical: Some(line) });
        }
    }
    read_event_exactly(line)
}

/// Reads a watch event line as serde_json reads it into a [`WatchLine`]:
/// checked by [`split_watch_line`] when it can, else by serde_json, which
/// tells why a line is refused.
fn read_event_exactly(line: &[u8]) -> Result<Event<'_>, serde_json::Error> {
    if let Some((event_type, object)) = split_watch_line(line) {
        if changes_an_object(event_type) || check(object.as_bytes()) {
            return Ok(Event { event_type, object: object.as_bytes(), canonical: None });
        }
    }
    serde_json::from_slice::<WatchLine<'_>>(line).map(|l| Event { event_type: l.event_type, object: l.object.get().as_bytes(), canonical: None })
}

#[derive(Deserialize)]
struct ListPage {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

#[derive(Deserialize)]
struct ObjectRv<'a> {
    #[serde(borrow)]
    metadata: RvMeta<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RvMeta<'a> {
    #[serde(default)]
    resource_version: Option<&'a str>,
}

#[derive(Deserialize)]
struct Bookmark<'a> {
    #[serde(borrow)]
    metadata: BookmarkMeta<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta<'a> {
    #[serde(default)]
    resource_version: &'a str,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct StatusBody {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

/// A member's restore signal ([`WatcherReport::member_restored`]).
type Restores = tokio::sync::watch::Receiver<u64>;

/// The watcher's running loop (the I/O half of the machine).
struct Run {
    spec: ClusterSpec,
    resource: ResourceType,
    key: String,
    sink: Recipient<Ingest>,
    report: WatcherReport,
    namespace: Option<String>,
    /// Set when a member object was skipped (bad data): a relist at this
    /// time recovers the change that was lost with it.
    heal_at: std::cell::Cell<Option<tokio::time::Instant>>,
    /// Healing relists since one that met no bad object (doubles the wait).
    heals: std::cell::Cell<u32>,
    /// This watcher's turn to list ([`crate::relists`]), held while it lists.
    relist_permit: std::cell::Cell<Option<tokio::sync::OwnedSemaphorePermit>>,
}

/// First wait before a relist that recovers skipped member objects; it
/// doubles while the member keeps sending bad data, up to [`MAX_HEAL_DELAY`].
const HEAL_DELAY: std::time::Duration = std::time::Duration::from_secs(15);
/// Longest wait before a healing relist.
const MAX_HEAL_DELAY: std::time::Duration = std::time::Duration::from_secs(600);


/// Objects of one list committed in parts (`WatchBatch::RelistPart`)
/// instead of one batch: at most this many per part. Smaller parts reach
/// the aggregator sooner after a sync starts and leave it less to commit
/// alone at the end: 10 members syncing 100,000 pods took 2.46 / 2.48 /
/// 2.44 s with 1,000 per part against 2.66 / 2.56 / 2.58 s with 2,000
/// (1,000,000 pods: 26.7 / 25.5 s against 27.7 / 26.4 s); 500 was no
/// better than 1,000.
const RELIST_PART_OBJECTS: usize = 1000;

/// The parts of a list sent so far.
#[derive(Default)]
struct RelistParts {
    /// Objects sent in parts.
    sent: usize,
    /// Parts sent.
    count: usize,
    /// Events the parts made.
    events: usize,
}

impl RelistParts {
    /// Commits `objects` (emptied) as the next part.
    async fn send(&mut self, run: &Run, objects: &mut Vec<Ingested>) -> Result<usize, CommitError> {
        let part = std::mem::take(objects);
        let len = part.len();
        // A part moves no checkpoint (the aggregator writes none for it).
        let events = run.commit(WatchBatch::RelistPart { first: self.count == 0, objects: part }, String::new()).await?;
        self.sent += len;
        self.count += 1;
        self.events += events;
        Ok(events)
    }

    /// The batch that ends the list: the whole list when nothing was sent in parts.
    fn last(&self, objects: Vec<Ingested>) -> WatchBatch {
        if self.count == 0 {
            WatchBatch::Relist(objects)
        } else {
            WatchBatch::RelistEnd(objects)
        }
    }
}

impl Run {
    /// Whether a healing relist is due.
    fn heal_due(&self) -> bool {
        self.heal_at.get().is_some_and(|at| tokio::time::Instant::now() >= at)
    }

    /// Waits until a healing relist is due (forever when none is planned).
    async fn heal_timer(&self) {
        match self.heal_at.get() {
            Some(at) => tokio::time::sleep_until(at).await,
            None => futures::future::pending().await,
        }
    }

    /// A list starts: whatever it skips plans the next healing relist.
    fn list_started(&self) {
        if self.heal_at.take().is_none() {
            self.heals.set(0);
        }
    }

    async fn run(self, mut machine: Machine, checkpoint: Option<String>) {
        // Nothing of this member's type in the store: its first list is an
        // initial sync, which takes its turn among more (see `relists`).
        let mut initial = checkpoint.is_none();
        let mut action = machine.step(Input::Start { checkpoint });
        // Streaming lists until the member shows it does not serve them.
        let streaming = std::cell::Cell::new(true);
        let client = connect(&self.spec, &mut machine, |e| self.fail(e)).await;
        let mut restores = self.report.restores();
        loop {
            if !action.delay.is_zero() {
                tokio::time::sleep(action.delay).await;
            }
            if action.request == Request::List {
                // Many members back at once: their lists take turns.
                let limit = if std::mem::take(&mut initial) { crate::relists::initial() } else { crate::relists::global() };
                let permit = limit.permit().await;
                self.relist_permit.set(permit);
                // A list from now on sees the member as restored.
                restores.borrow_and_update();
                self.list_started();
            }
            let input = match action.request {
                Request::Watch { .. } if restores.has_changed().unwrap_or(false) => Input::RvWentBack,
                Request::Watch { .. } if self.heal_due() => Input::Expired,
                Request::List if streaming.get() => match self.watch_list(&client, &mut machine, restores.clone()).await {
                    Some(input) => input,
                    None => {
                        streaming.set(false);
                        self.list(&client).await
                    }
                },
                Request::List => self.list(&client).await,
                Request::Watch { rv } => self.watch(&client, &rv, &mut machine, restores.clone()).await,
                Request::None => Input::WatchEnded,
            };
            // The list is over (a streaming list gave its turn back when its initial events ended).
            drop(self.relist_permit.take());
            action = machine.step(input);
        }
    }

    /// Updates this watcher's status, unless the selection stopped it.
    fn update_status(&self, f: impl FnOnce(&mut crate::fleet::WatcherStatus)) {
        self.report.update_status(&self.key, f);
    }

    fn fail(&self, error: &str) {
        warn!(cluster = %self.spec.name, resource = %self.key, error, "Member request failed.");
        metrics::counter!("kubefold_member_errors_total", "cluster" => crate::cluster_series::label(&self.spec.name)).increment(1);
        self.update_status(|s| {
            s.last_error = Some(error.to_string());
            if s.state == SyncState::Synced {
                s.state = SyncState::Stale;
            }
        });
    }

    fn classify(&self, error: kube::Error) -> Input {
        match &error {
            kube::Error::Api(status) if status.code == 410 => Input::Expired,
            kube::Error::Api(status) => {
                self.fail(&error.to_string());
                // kube-apiserver states its Retry-After (429, and 5xx while
                // starting) in the Status too, as details.retryAfterSeconds.
                let secs = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
                let retry_after = (secs > 0).then(|| std::time::Duration::from_secs(u64::from(secs.min(600))));
                Input::Failed { retry_after }
            }
            _ => {
                self.fail(&error.to_string());
                Input::Failed { retry_after: None }
            }
        }
    }

    /// A member object (or watch event) that cannot be taken: logged,
    /// counted, and a relist planned, since the change it carried is lost
    /// until the object changes again.
    fn bad_object(&self, reason: &str) {
        warn!(cluster = %self.spec.name, resource = %self.key, error = reason, "Member object skipped.");
        metrics::counter!("kubefold_member_bad_objects_total", "cluster" => crate::cluster_series::label(&self.spec.name)).increment(1);
        if self.heal_at.get().is_none() {
            let delay = HEAL_DELAY.saturating_mul(1 << self.heals.get().min(10)).min(MAX_HEAL_DELAY);
            self.heal_at.set(Some(tokio::time::Instant::now() + delay));
            self.heals.set(self.heals.get().saturating_add(1));
        }
    }

    /// Ingests a list item's text (JSON: serde_json read it as a raw value).
    fn ingest_text(&self, text: &str) -> Option<Ingested> {
        self.ingested(ingest_checked(&self.resource, &self.spec.name, text.as_bytes()))
    }

    /// Ingests the object of a watch event that changes one (not checked
    /// yet: see [`Event`]).
    fn ingest_event(&self, event: &Event<'_>) -> Option<Ingested> {
        let ingested = ingest_unchecked(&self.resource, &self.spec.name, event.object);
        match (ingested, event.canonical) {
            // Members after the object, or a line that is not JSON: read exactly.
            (Err(_), Some(line)) => match read_event_exactly(line) {
                Ok(exact) => self.ingested(ingest_unchecked(&self.resource, &self.spec.name, exact.object)),
                Err(e) => {
                    self.bad_object(&format!("unreadable watch event: {e}"));
                    None
                }
            },
            (ingested, _) => self.ingested(ingested),
        }
    }

    /// The object ingested, or `None` after counting it as bad.
    fn ingested(&self, result: Result<Ingested, kubefold_engine::object::Error>) -> Option<Ingested> {
        match result {
            Ok(i) => Some(i),
            Err(e) => {
                self.bad_object(&e.to_string());
                None
            }
        }
    }

    async fn commit(&self, batch: WatchBatch, checkpoint: String) -> Result<usize, CommitError> {
        let msg = Ingest { cluster: self.spec.name.clone(), resource: self.key.clone(), batch, checkpoint, scope: self.report.ticket().cloned(), queued: Queued::new() };
        Ok(self.sink.send(msg).await.map_err(CommitError::SinkUnavailable)??)
    }

    async fn list(&self, client: &kube::Client) -> Input {
        let path = self.resource.collection_path(self.namespace.as_deref());
        let mut objects = Vec::new();
        let mut parts = RelistParts::default();
        let mut list_rv = String::new();
        let mut continue_token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(LIST_PAGE);
            if let Some(token) = &continue_token {
                params = params.continue_token(token);
            }
            let request = match KubeRequest::new(&path).list(&params) {
                Ok(r) => r,
                Err(e) => {
                    self.fail(&e.to_string());
                    return Input::Failed { retry_after: None };
                }
            };
            let text = match client.request_text(request).await {
                Ok(t) => t,
                Err(e) => return self.classify(e),
            };
            let page: ListPage = match serde_json::from_str(&text) {
                Ok(p) => p,
                Err(e) => {
                    self.fail(&format!("list response is not a list: {e}"));
                    return Input::Failed { retry_after: None };
                }
            };
            if list_rv.is_empty() {
                list_rv = page.metadata.resource_version.clone();
            }
            objects.extend(page.items.iter().filter_map(|raw| self.ingest_text(raw.get())));
            match page.metadata.continue_token {
                Some(t) if !t.is_empty() => continue_token = Some(t),
                _ => break,
            }
            if objects.len() >= RELIST_PART_OBJECTS {
                if let Err(e) = parts.send(self, &mut objects).await {
                    self.fail(&e.to_string());
                    return Input::Failed { retry_after: None };
                }
            }
        }
        let count = parts.sent + objects.len();
        match self.commit(parts.last(objects), list_rv.clone()).await {
            Ok(events) => {
                let events = events + parts.events;
                info!(cluster = %self.spec.name, resource = %self.key, objects = count, events, rv = %list_rv, "Initial list applied.");
                metrics::counter!("kubefold_member_relists_total", "cluster" => crate::cluster_series::label(&self.spec.name)).increment(1);
                self.update_status(|s| {
                    s.state = SyncState::Synced;
                    s.relists += 1;
                    s.last_error = None;
                    s.checkpoint = Some(list_rv.clone());
                });
                Input::Listed { rv: list_rv }
            }
            Err(e) => {
                self.fail(&e.to_string());
                Input::Failed { retry_after: None }
            }
        }
    }

    async fn watch(&self, client: &kube::Client, rv: &str, machine: &mut Machine, restores: Restores) -> Input {
        if let Some(input) = self.member_went_back(client, rv).await {
            return input;
        }
        let path = self.resource.collection_path(self.namespace.as_deref());
        let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        let request = match KubeRequest::new(&path).watch(&params, rv) {
            Ok(r) => r,
            Err(e) => {
                self.fail(&e.to_string());
                return Input::Failed { retry_after: None };
            }
        };
        let reader = match client.request_stream(request).await {
            Ok(r) => r,
            Err(e) => return self.classify(e),
        };
        self.update_status(|s| {
            s.state = SyncState::Synced;
            s.reconnects += 1;
            s.last_error = None;
        });
        debug!(cluster = %self.spec.name, resource = %self.key, rv, "Watch started.");
        self.follow(Frames::new(reader), rv, machine, restores).await
    }

    /// Before resuming a watch from `rv`: is the member's current RV below
    /// it? A member restored from an etcd backup numbers its changes again
    /// from an older revision, and a watch from an RV it has not reached yet
    /// stays silent (kube-apiserver filters out events at or below the
    /// requested RV), so kubefold would miss every change until the member
    /// passed `rv`. Kubernetes asks clients to relist after such a restore
    /// ("Restoring an etcd cluster",
    /// <https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster>);
    /// a list of one object (`limit=1`, read from the member's storage) tells.
    /// RVs are compared as integers, as kube-apiserver's are (etcd revisions).
    async fn member_went_back(&self, client: &kube::Client, rv: &str) -> Option<Input> {
        let ours: u64 = rv.parse().ok()?;
        let path = self.resource.collection_path(self.namespace.as_deref());
        let request = match KubeRequest::new(&path).list(&ListParams::default().limit(1)) {
            Ok(r) => r,
            Err(e) => {
                self.fail(&e.to_string());
                return Some(Input::Failed { retry_after: None });
            }
        };
        let text = match client.request_text(request).await {
            Ok(t) => t,
            Err(e) => return Some(self.classify(e)),
        };
        let current = serde_json::from_str::<ListPage>(&text).ok()?.metadata.resource_version.parse::<u64>().ok()?;
        if current < ours {
            warn!(cluster = %self.spec.name, resource = %self.key, checkpoint = ours, member = current, "Member resourceVersion went back (restored from a backup?); relisting.");
            self.report.member_restored();
            return Some(Input::RvWentBack);
        }
        None
    }

    /// A streaming list ("Streaming lists", Kubernetes API Concepts): one
    /// watch with `sendInitialEvents=true` delivers the state, a bookmark
    /// annotated `k8s.io/initial-events-end`, then live events, with no gap
    /// between list and watch, so a busy member cannot expire the list's RV
    /// before the watch starts. `None` when the member does not support it.
    /// <https://kubernetes.io/docs/reference/using-api/api-concepts/#streaming-lists>
    async fn watch_list(&self, client: &kube::Client, machine: &mut Machine, restores: Restores) -> Option<Input> {
        let path = self.resource.collection_path(self.namespace.as_deref());
        let params = WatchParams::streaming_lists().timeout(WATCH_TIMEOUT_SECS);
        let request = KubeRequest::new(&path).watch(&params, "").ok()?;
        let reader = match client.request_stream(request).await {
            Ok(r) => r,
            Err(kube::Error::Api(status)) if (400..500).contains(&status.code) && status.code != 410 && status.code != 429 => {
                info!(cluster = %self.spec.name, resource = %self.key, code = status.code, "Member does not serve streaming lists; using paged lists.");
                return None;
            }
            Err(e) => return Some(self.classify(e)),
        };
        let mut lines = Frames::new(reader);
        // By (namespace, name): one object per key (the last ADDED of a
        // key wins), and each part committed in kubefold's list order, so
        // that the records of neighbouring list items lie next to each
        // other in the record log (a list reads them together). A member
        // may send its initial events in any order: kube-apiserver's watch
        // cache does not promise one.
        let mut objects: std::collections::BTreeMap<(String, String), Ingested> = std::collections::BTreeMap::new();
        let mut parts = RelistParts::default();
        // A member that ignores `sendInitialEvents` (before 1.27) answers as
        // for a watch without resourceVersion: ADDED for the state, then live
        // events and plain bookmarks, never the initial-events-end bookmark.
        let not_streaming = |why: &str| {
            info!(cluster = %self.spec.name, resource = %self.key, why, "Member ignored sendInitialEvents; using paged lists.");
            None
        };
        let end_rv = loop {
            let line = match tokio::time::timeout(INITIAL_EVENTS_SILENCE, lines.next()).await {
                Err(_) => return not_streaming("silent without the initial-events-end bookmark"),
                Ok(Some(Ok(line))) => line,
                Ok(Some(Err(e))) => {
                    self.fail(&format!("streaming list broke: {e}"));
                    return Some(Input::Failed { retry_after: None });
                }
                Ok(None) => {
                    self.fail("streaming list ended before its initial-events-end bookmark");
                    return Some(Input::Failed { retry_after: None });
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let event = match read_event(&line) {
                Ok(event) => event,
                Err(e) => {
                    self.bad_object(&format!("unreadable watch event: {e}"));
                    continue;
                }
            };
            match event.event_type {
                "ADDED" => {
                    if let Some(i) = self.ingest_event(&event) {
                        objects.insert((i.namespace.clone(), i.name.clone()), i);
                    }
                    if objects.len() >= RELIST_PART_OBJECTS {
                        let mut part: Vec<Ingested> = std::mem::take(&mut objects).into_values().collect();
                        if let Err(e) = parts.send(self, &mut part).await {
                            self.fail(&e.to_string());
                            return Some(Input::Failed { retry_after: None });
                        }
                    }
                }
                "MODIFIED" | "DELETED" => return not_streaming("a change before the initial-events-end bookmark"),
                "BOOKMARK" => {
                    let Ok(b) = serde_json::from_slice::<Bookmark<'_>>(event.object) else { continue };
                    if b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str) == Some("true") {
                        break b.metadata.resource_version.to_string();
                    }
                    return not_streaming("a bookmark before the initial-events-end bookmark");
                }
                _ => {
                    let status: StatusBody = serde_json::from_slice(event.object).unwrap_or(StatusBody { code: 0, message: String::new() });
                    if status.code == 410 {
                        return Some(Input::Expired);
                    }
                    info!(cluster = %self.spec.name, resource = %self.key, code = status.code, "Member refused a streaming list; using paged lists.");
                    return None;
                }
            }
        };
        let objects: Vec<Ingested> = objects.into_values().collect();
        let count = parts.sent + objects.len();
        match self.commit(parts.last(objects), end_rv.clone()).await {
            Ok(events) => {
                let events = events + parts.events;
                info!(cluster = %self.spec.name, resource = %self.key, objects = count, events, rv = %end_rv, "Initial streaming list applied.");
                metrics::counter!("kubefold_member_relists_total", "cluster" => crate::cluster_series::label(&self.spec.name)).increment(1);
                self.update_status(|s| {
                    s.state = SyncState::Synced;
                    s.relists += 1;
                    s.last_error = None;
                    s.checkpoint = Some(end_rv.clone());
                });
            }
            Err(e) => {
                self.fail(&e.to_string());
                return Some(Input::Failed { retry_after: None });
            }
        }
        // The machine now watches from the list's RV; the same stream goes on.
        drop(self.relist_permit.take());
        machine.step(Input::Listed { rv: end_rv.clone() });
        Some(self.follow(lines, &end_rv, machine, restores).await)
    }

    /// Follows an open watch stream from member RV `rv`.
    async fn follow<R: AsyncBufRead + Unpin>(&self, mut lines: Frames<R>, rv: &str, machine: &mut Machine, mut restores: Restores) -> Input {
        let start_rv: Option<u64> = rv.parse().ok();
        let mut current = rv.to_string();
        loop {
            let next = tokio::select! {
                next = lines.next() => next,
                Ok(()) = restores.changed() => {
                    info!(cluster = %self.spec.name, resource = %self.key, "Member restored from a backup; relisting.");
                    return Input::RvWentBack;
                }
                () = self.heal_timer() => {
                    info!(cluster = %self.spec.name, resource = %self.key, "Relisting to recover changes carried by skipped member objects.");
                    return Input::Expired;
                }
            };
            let first = match next {
                Some(Ok(line)) => line,
                Some(Err(e)) => {
                    self.fail(&format!("watch stream broke: {e}"));
                    return Input::Failed { retry_after: None };
                }
                None => return Input::WatchEnded,
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match lines.next().now_or_never() {
                    Some(Some(Ok(line))) => batch.push(line),
                    _ => break,
                }
            }
            let mut changes = Vec::with_capacity(batch.len());
            for line in &batch {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                // One unreadable event (not JSON, not UTF-8) is skipped and
                // counted; the stream goes on with the next one. Treating it
                // as a broken stream would resume from before it and meet it
                // again, forever.
                let event = match read_event(line) {
                    Ok(e) => e,
                    Err(e) => {
                        self.bad_object(&format!("unreadable watch event: {e}"));
                        continue;
                    }
                };
                if event.event_type == "ERROR" {
                    let status: StatusBody = serde_json::from_slice(event.object)
                        .unwrap_or_else(|_| StatusBody { code: 0, message: String::from_utf8_lossy(event.object).into_owned() });
                    if !changes.is_empty() {
                        let _ = self.commit(WatchBatch::Changes(std::mem::take(&mut changes)), current.clone()).await;
                    }
                    if status.code == 410 {
                        info!(cluster = %self.spec.name, resource = %self.key, message = %status.message, "Watch expired; relisting.");
                        return Input::Expired;
                    }
                    self.fail(&format!("watch error {}: {}", status.code, status.message));
                    return Input::Failed { retry_after: None };
                }
                // The object's RV, read by its ingest when it has one.
                let ingested = if changes_an_object(event.event_type) { self.ingest_event(&event) } else { None };
                let event_rv = match &ingested {
                    Some(i) => Some(i.member_rv.as_str()).filter(|rv| !rv.is_empty()),
                    None => serde_json::from_slice::<ObjectRv<'_>>(event.object).ok().and_then(|o| o.metadata.resource_version),
                };
                if let Some(event_rv) = event_rv {
                    if let (Some(start), Ok(n)) = (start_rv, event_rv.parse::<u64>()) {
                        if n < start && event.event_type != "BOOKMARK" {
                            warn!(cluster = %self.spec.name, resource = %self.key, start, got = n, "Member resourceVersion went back; relisting.");
                            self.report.member_restored();
                            return Input::RvWentBack;
                        }
                    }
                    current = event_rv.to_string();
                }
                match event.event_type {
                    "ADDED" | "MODIFIED" => changes.extend(ingested.map(Change::Upsert)),
                    "DELETED" => changes.extend(ingested.map(Change::Delete)),
                    _ => {} // BOOKMARK: only the RV moves
                }
            }
            let n = changes.len();
            let batch = if changes.is_empty() { WatchBatch::Bookmark } else { WatchBatch::Changes(changes) };
            if let Err(e) = self.commit(batch, current.clone()).await {
                self.fail(&e.to_string());
                return Input::Failed { retry_after: None };
            }
            self.update_status(|s| {
                s.events += n as u64;
                s.checkpoint = Some(current.clone());
            });
            machine.step(Input::Progress { rv: current.clone() });
        }
    }
}

/// The newline-delimited frames of a watch stream, as bytes: a line that is
/// not UTF-8 is one bad event, not a broken stream (as a `String` reader
/// would make it). Cancel-safe: a partly read line stays in `buf` for the
/// next call, so `next().now_or_never()` loses nothing.
struct Frames<R> {
    reader: R,
    buf: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> Frames<R> {
    fn new(reader: R) -> Frames<R> {
        Frames { reader, buf: Vec::new() }
    }

    async fn next(&mut self) -> Option<std::io::Result<Vec<u8>>> {
        loop {
            let available = match self.reader.fill_buf().await {
                Ok(available) => available,
                Err(e) => return Some(Err(e)),
            };
            if available.is_empty() {
                return (!self.buf.is_empty()).then(|| Ok(std::mem::take(&mut self.buf)));
            }
            // No await from here on: what is consumed is in `buf`.
            let (taken, line_end) = match memchr::memchr(b'\n', available) {
                Some(i) => (i + 1, Some(i)),
                None => (available.len(), None),
            };
            self.buf.extend_from_slice(&available[..line_end.unwrap_or(taken)]);
            self.reader.consume_unpin(taken);
            if line_end.is_some() {
                return Some(Ok(std::mem::take(&mut self.buf)));
            }
            if self.buf.len() > MAX_LINE {
                self.buf = Vec::new();
                return Some(Err(std::io::Error::other(format!("a watch line over {MAX_LINE} bytes"))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_keep_invalid_utf8_lines_and_partial_reads() {
        let data: &[u8] = b"{\"a\":1}\n\xff\xfe\n\n{\"b\":2}";
        let mut frames = Frames::new(futures::io::BufReader::with_capacity(3, data));
        let mut got = Vec::new();
        while let Some(line) = frames.next().await {
            got.push(line.unwrap());
        }
        assert_eq!(got, vec![b"{\"a\":1}".to_vec(), vec![0xff, 0xfe], Vec::new(), b"{\"b\":2}".to_vec()]);
    }
}
