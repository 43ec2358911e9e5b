//! Wiring: open the store, recover the index, start the aggregator, the
//! watchers and the HTTP server, and stop them all when `shutdown` resolves.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, Arbiter};
use anyhow::Context as _;
use kubefold_actors::aggregator::Aggregator;
use kubefold_actors::fleet::Fleet;
use kubefold_actors::resolver::{Estimators, Resolver, SetConfig};
use kubefold_actors::supervisor::{AddCluster, DropCluster, Supervisor};
use kubefold_api::{ApiConfig, ApiState};
use kubefold_store::{Options, Store};
use tracing::{error, info, warn};

use crate::config::Config;

/// Installs the Prometheus recorder once per process.
fn metrics_handle() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let seconds = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
            let sizes = [1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0];
            let builder = metrics_exporter_prometheus::PrometheusBuilder::new();
            let builder = builder
                .set_buckets_for_metric(metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()), &seconds)
                .and_then(|b| b.set_buckets_for_metric(metrics_exporter_prometheus::Matcher::Full("kubefold_commit_batch_events".into()), &sizes))
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            kubefold_api::series::describe();
            Some(handle)
        })
        .clone()
}

/// The data dir may hold member credentials (registered clusters): only
/// kubefold's user may read it (0700 for the directory, 0600 for files).
fn restrict_permissions(dir: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
                    stack.push(path);
                } else {
                    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
                }
            }
        }
    }
}

/// CPU time (user + system) the process used so far, from
/// `/proc/self/stat`; start-up is CPU bound, and on a shared machine its
/// wall time says more about the neighbours.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at `) `.
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Re-reads the config file at `path` and hands its `estimator` section to
/// the resolver (SIGHUP). A file that cannot be read, parsed or validated,
/// or an estimator section the resolver refuses, changes nothing. The other
/// sections are not reloaded: they need a restart.
async fn reload_estimator(path: &Path, resolver: &Addr<Resolver>) {
    let file = path.to_path_buf();
    let loaded = match tokio::task::spawn_blocking(move || Config::load(&file)).await {
        Ok(loaded) => loaded,
        Err(e) => Err(anyhow::anyhow!("config reader failed: {e}")),
    };
    let outcome = match loaded {
        Err(e) => Err(format!("{e:#}")),
        Ok(config) => match resolver.send(SetConfig(config.estimator)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("estimator: {e}")),
            Err(e) => Err(format!("the resolver is not running: {e}")),
        },
    };
    match outcome {
        Ok(()) => {
            info!(config = %path.display(), "Estimator configuration reloaded.");
            metrics::counter!("kubefold_config_reloads_total", "result" => "success").increment(1);
        }
        Err(e) => {
            error!(config = %path.display(), error = %e, "Config reload failed; the running configuration is unchanged.");
            metrics::counter!("kubefold_config_reloads_total", "result" => "failure").increment(1);
        }
    }
}

/// The environment variable that injects a fault into every commit, for
/// tests of storage faults: `stall:MS` (each commit waits MS milliseconds
/// first, a disk whose syncs stall) or `fail:ERRNO` (each fails with that
/// OS error: 28 no space, 30 read-only, 5 I/O error).
const INJECT_FAULT_VAR: &str = "KUBEFOLD_INJECT_STORE_FAULT";

/// The environment variable that makes the reading of the data dir at
/// start panic, as sled does on damage it does not expect: for the test that
/// kubefold then prints one line, not the panic.
const INJECT_PANIC_VAR: &str = "KUBEFOLD_INJECT_STORE_PANIC";

/// The fault [`INJECT_FAULT_VAR`] asks for, if any.
fn injected_store_fault() -> anyhow::Result<Option<kubefold_store::Fault>> {
    let Ok(value) = std::env::var(INJECT_FAULT_VAR) else { return Ok(None) };
    let bad = || anyhow::anyhow!("{INJECT_FAULT_VAR}={value:?}: expected stall:MS or fail:ERRNO");
    let (kind, n) = value.split_once(':').ok_or_else(bad)?;
    let n: u64 = n.parse().map_err(|_| bad())?;
    match kind {
        "stall" => Ok(Some(kubefold_store::Fault::Stall(Duration::from_millis(n)))),
        "fail" => Ok(Some(kubefold_store::Fault::Fail(i32::try_from(n).map_err(|_| bad())?))),
        _ => Err(bad()),
    }
}

/// Whether `e` says the data dir is damaged (not unreadable for another
/// reason: a lock held, another format, a disk that fails).
fn is_damage(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kubefold_store::Error>().is_some_and(|e| e.cause() == kubefold_store::Cause::Corrupt)
}

/// The file in a quarantine directory that says what was found damaged.
const DAMAGE_NOTE: &str = "damage.txt";

/// [`recover`]; with `store.onCorruption: repair`, a damaged data dir is
/// repaired into a new `quarantine-<unix time>/` directory inside it:
/// when only the record log is damaged ([`repair_record_log`]) the intact
/// prefix of the history is kept and the rest given up; otherwise the data
/// dir's files are moved into the quarantine directory and an empty store
/// started above the highest resourceVersion ever served (the
/// `rv-ceiling` file), with the settings of the damaged one when its sled
/// tree still opens. Either way the members are then listed again.
fn recover_or_repair(
    data_dir: &Path,
    options: &Options,
    progress: &kubefold_api::starting::StartProgress,
    on_corruption: crate::config::OnCorruption,
) -> anyhow::Result<(Store, kubefold_store::Recovered)> {
    let damage = match recover_caught(data_dir, options, progress) {
        Err(e) if is_damage(&e) && on_corruption == crate::config::OnCorruption::Repair => e,
        other => return other,
    };
    let ceiling = kubefold_store::read_ceiling(data_dir);
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut quarantine = data_dir.join(format!("quarantine-{secs}"));
    for n in 1.. {
        if !quarantine.exists() {
            break;
        }
        quarantine = data_dir.join(format!("quarantine-{secs}-{n}"));
    }
    std::fs::create_dir(&quarantine).with_context(|| format!("cannot create {}", quarantine.display()))?;
    match repair_record_log(data_dir, options, &quarantine, ceiling, &damage) {
        Ok(true) => return recover_caught(data_dir, options, progress),
        Ok(false) => {}
        Err(e) => warn!(error = %format!("{e:#}"), "The record log could not be cut to its intact part; the whole data dir is set aside."),
    }
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == kubefold_store::CEILING_FILE || name.starts_with("quarantine-") {
            continue;
        }
        let to = quarantine.join(&name);
        if to.exists() {
            // A segment copied there first: the data dir's own is kept whole.
            std::fs::rename(&to, quarantine.join(format!("{name}.damaged")))?;
        }
        std::fs::rename(entry.path(), &to).with_context(|| format!("cannot move {} into {}", entry.path().display(), quarantine.display()))?;
    }
    std::fs::write(quarantine.join(DAMAGE_NOTE), format!("{damage:#}\nthe data dir's files were moved here\n"))?;
    error!(
        data_dir = %data_dir.display(),
        quarantine = %quarantine.display(),
        damage = %format!("{damage:#}"),
        continue_above = ceiling,
        "The data dir is damaged: its files were moved into the quarantine directory (keep it for analysis, delete it when done); \
         kubefold starts an empty store above the highest resourceVersion it served and lists the members again. \
         Clients holding an older resourceVersion get 410 and list again. (store.onCorruption: refuse keeps the damaged data dir and does not start.)"
    );
    let store = Store::open(data_dir, options)?;
    let old_head = match catch_damage(|| store.salvage_settings(&quarantine)) {
        Ok((copied, head)) => {
            info!(settings = copied, "Settings copied from the damaged data dir (registered members, resource selection).");
            head
        }
        Err(e) => {
            warn!(error = %e, "The damaged data dir's settings could not be read: members registered and the resource selection set through the admin API must be set again.");
            0
        }
    };
    // The ceiling is above every resourceVersion served; the damaged
    // store's head, when readable, covers a data dir from before the ceiling.
    store.raise_head(ceiling.max(old_head))?;
    drop(store);
    recover_caught(data_dir, options, progress)
}

/// Repairs a data dir whose sled tree reads but whose record log is
/// damaged: the segment holding the first damaged record is copied into
/// `quarantine` (it may still hold intact records, so it stays), the index
/// snapshot moved there, and the history cut before that record
/// ([`Store::drop_history_from`]): events before it keep answering
/// watches and lists, the lost ones answer 410, and the store continues
/// above `ceiling`. False when the damage is not in the record log.
fn repair_record_log(data_dir: &Path, options: &Options, quarantine: &Path, ceiling: u64, damage: &anyhow::Error) -> anyhow::Result<bool> {
    let Ok(store) = catch_damage(|| Store::open(data_dir, options)) else { return Ok(false) };
    let found = match catch_damage(|| store.find_damage()) {
        Ok(Some(found)) => found,
        Ok(None) if store.damage_mark().ok().flatten().is_some() => {
            // Found damaged while running, reads now: a read error of the
            // disk that passed. Nothing is given up.
            store.clear_damage_mark()?;
            std::fs::remove_dir(quarantine)?;
            warn!("A record found damaged while kubefold ran reads again now: the record log is intact, nothing was given up.");
            return Ok(true);
        }
        _ => return Ok(false),
    };
    if let Some(segment) = &found.segment {
        let name = segment.file_name().context("a segment's file name")?;
        std::fs::copy(segment, quarantine.join(name)).with_context(|| format!("cannot copy {} into {}", segment.display(), quarantine.display()))?;
    }
    let snapshot = data_dir.join(kubefold_store::SNAPSHOT_FILE);
    if snapshot.exists() {
        std::fs::rename(&snapshot, quarantine.join(kubefold_store::SNAPSHOT_FILE))?;
    }
    std::fs::write(
        quarantine.join(DAMAGE_NOTE),
        format!("{damage:#}\nfirst damaged record: {}\nhistory given up from resourceVersion {}\n", found.what, found.rv),
    )?;
    let truncated = store.drop_history_from(found.rv, ceiling)?;
    store.flush()?;
    error!(
        data_dir = %data_dir.display(),
        quarantine = %quarantine.display(),
        damage = %format!("{damage:#}"),
        first_damaged = %found.what,
        kept_events = truncated.kept,
        dropped_events = truncated.dropped,
        lost_from = truncated.lost.0,
        continue_above = truncated.lost.1,
        "The record log is damaged: the events before the first damaged record are kept, the ones from it on given up \
         (the damaged segment and the index snapshot were copied into the quarantine directory: keep it for analysis, delete it when done); \
         kubefold continues above the highest resourceVersion it served and lists the members again. \
         Clients holding a resourceVersion from the lost history get 410 and list again. (store.onCorruption: refuse keeps the damaged data dir and does not start.)"
    );
    Ok(true)
}

thread_local! {
    /// This thread reads a data dir that may be damaged: a panic is caught
    /// and reported as damage, in one line, not printed.
    static READING_DATA_DIR: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Threads reading a data dir that may be damaged ([`READING_DATA_DIR`]).
static READING_DATA_DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Installs (once) a panic hook that keeps quiet about a panic of sled
/// meeting damage while a data dir is read at start (on the reading thread,
/// or on one of sled's own threads meanwhile): kubefold reports it as
/// damage in one line ([`catch_damage`]). Every other panic is printed as
/// before.
fn quiet_damage_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_sled_thread = std::thread::current().name().is_some_and(|n| n.starts_with("sled"));
            let reading = READING_DATA_DIR.with(|r| r.get());
            if reading || (on_sled_thread && READING_DATA_DIRS.load(std::sync::atomic::Ordering::Acquire) > 0) {
                return;
            }
            previous(info);
        }));
    });
}

/// Runs `f`, a panic in it (sled meeting damage it does not expect) made a
/// damage error; the panic is not printed ([`quiet_damage_panics`]).
fn catch_damage<T, E: From<kubefold_store::Error>>(f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    quiet_damage_panics();
    READING_DATA_DIRS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    let was = READING_DATA_DIR.with(|r| r.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    READING_DATA_DIR.with(|r| r.set(was));
    READING_DATA_DIRS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    result.unwrap_or_else(|panic| {
        let what = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
        Err(kubefold_store::Error::Corrupt { what: format!("sled failed reading the data dir: {what}") }.into())
    })
}

/// [`recover`], a panic in it (sled meeting damage) made a damage error.
fn recover_caught(
    data_dir: &Path,
    options: &Options,
    progress: &kubefold_api::starting::StartProgress,
) -> anyhow::Result<(Store, kubefold_store::Recovered)> {
    catch_damage(|| recover(data_dir, options, progress))
}

/// A replica's data dir that cannot be used as the log's copy (`why`) is
/// moved aside into `stale-<unix time>/` inside it (kept, never deleted),
/// and an empty store started, with the settings of the old one (members
/// registered and the resource selection set through the admin API), to be
/// filled from the log.
fn rebuild_copy(
    data_dir: &Path,
    options: &Options,
    progress: &kubefold_api::starting::StartProgress,
    why: &str,
    identity: &str,
) -> anyhow::Result<(Store, kubefold_store::Recovered)> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let aside = data_dir.join(format!("stale-{secs}"));
    std::fs::create_dir(&aside).with_context(|| format!("cannot create {}", aside.display()))?;
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("quarantine-") || name.starts_with("stale-") {
            continue;
        }
        std::fs::rename(entry.path(), aside.join(&name)).with_context(|| format!("cannot move {} into {}", entry.path().display(), aside.display()))?;
    }
    warn!(
        data_dir = %data_dir.display(),
        moved_to = %aside.display(),
        reason = why,
        "The data dir cannot be used as this replica's copy of the etcd log: its files were moved aside (delete them when done); the copy is rebuilt from etcd."
    );
    let store = Store::open(data_dir, options)?;
    if let Err(e) = store.salvage_settings(&aside) {
        warn!(error = %e, "The old data dir's settings could not be read: members registered and the resource selection set through the admin API must be set again.");
    }
    store.put_meta(crate::etcd::SHARED_LOG_META, identity.as_bytes())?;
    drop(store);
    recover(data_dir, options, progress)
}

/// Opens the store in `data_dir` and recovers its index, saying how far it
/// is in the log every 2 s and in `progress` (which `/readyz` shows).
fn recover(
    data_dir: &Path,
    options: &Options,
    progress: &kubefold_api::starting::StartProgress,
) -> anyhow::Result<(Store, kubefold_store::Recovered)> {
    let opening = std::time::Instant::now();
    let store = Store::open(data_dir, options)?;
    if std::env::var_os(INJECT_PANIC_VAR).is_some() {
        panic!("injected ({INJECT_PANIC_VAR}): a page of the data dir does not decode");
    }
    restrict_permissions(data_dir);
    let opened = opening.elapsed().as_secs_f64();
    progress.set("replaying the event log");
    let replaying = std::time::Instant::now();
    let mut last_report = replaying;
    let recovered = store.recover_with_progress(&mut |p| {
        if p.at_rv >= p.head_rv {
            return;
        }
        let elapsed = replaying.elapsed();
        let percent = format!("{:.0}", p.fraction() * 100.0);
        let seconds_left = p.time_left(elapsed).map(|d| d.as_secs()).unwrap_or(0);
        progress.set(format!(
            "replaying the event log: {percent}% (resourceVersion {} of {}, about {seconds_left} s left)",
            p.at_rv, p.head_rv
        ));
        // A long replay says how far it is, every 2 s.
        if last_report.elapsed() >= Duration::from_secs(2) {
            last_report = std::time::Instant::now();
            info!(rv = p.at_rv, head_rv = p.head_rv, events = p.replayed, percent, seconds_left, "Replaying the event log.");
        }
    })?;
    info!(
        data_dir = %data_dir.display(),
        head_rv = recovered.index.head_rv(),
        objects = recovered.index.total(),
        recovery = %recovered.path,
        open_seconds = opened,
        recover_seconds = opening.elapsed().as_secs_f64() - opened,
        cpu_seconds = process_cpu_seconds().unwrap_or(f64::NAN),
        "Store opened."
    );
    progress.set("starting the aggregator");
    Ok((store, recovered))
}

/// Runs kubefold until `shutdown` resolves; `on_listening` is told the
/// address once the API listens. With `config_file`, SIGHUP reloads the
/// file's `estimator` section.
pub fn run(
    config: Config,
    config_file: Option<PathBuf>,
    shutdown: impl Future<Output = ()> + 'static,
    on_listening: impl FnOnce(SocketAddr) + 'static,
) -> anyhow::Result<()> {
    let system = actix::System::new();
    let stopped = system.block_on(async move {
        let options = Options {
            durability: config.durability,
            flush_every_ms: config.flush_every_ms,
            ..Options::default()
        };
        // The listener is bound first and answers health checks while the
        // store is opened and replayed (a liveness probe must not restart a
        // long replay); the API takes the same socket over afterwards.
        let listener = kubefold_api::starting::bind(config.listen).context("cannot start the API listener")?;
        let progress = kubefold_api::starting::StartProgress::default();
        let starting = kubefold_api::starting::StartingServer::start(&listener, config.tls.as_ref(), progress.clone())
            .context("cannot start the API listener")?;
        info!(listen = %listener.local_addr()?, "Answering health checks while the store is read.");
        // A replica over etcd: connected first, its data dir is checked against the log.
        let replica = config.etcd.as_ref().map(crate::etcd::connect).transpose()?;
        let (store, recovered) = {
            let data_dir = config.data_dir.clone();
            let (options, progress) = (options.clone(), progress.clone());
            let on_corruption = config.store.on_corruption;
            actix_web::rt::task::spawn_blocking(move || recover_or_repair(&data_dir, &options, &progress, on_corruption))
                .await
                .context("the store's recovery ended abnormally")??
        };
        let (store, recovered) = match &replica {
            Some(replica) => match crate::etcd::check_copy(replica, &store, recovered.index.head_rv())? {
                None => (store, recovered),
                Some(why) => {
                    drop(store);
                    let data_dir = config.data_dir.clone();
                    let identity = replica.identity();
                    let (options, progress) = (options.clone(), progress.clone());
                    actix_web::rt::task::spawn_blocking(move || rebuild_copy(&data_dir, &options, &progress, &why, &identity))
                        .await
                        .context("the rebuild of the data dir ended abnormally")??
                }
            },
            None if store.meta(crate::etcd::SHARED_LOG_META)?.is_some() => anyhow::bail!(
                "the data dir {} is a replica's copy of an etcd log (its resourceVersions are etcd's): start kubefold with the same --etcd-servers, or with another data dir",
                config.data_dir.display()
            ),
            None => (store, recovered),
        };
        starting.stop().await;
        if let Some(fault) = injected_store_fault()? {
            warn!(fault = ?fault, "Store fault injected ({INJECT_FAULT_VAR}): for tests of storage faults only.");
            store.inject_fault(Some(fault));
        }
        let mut recovered = recovered;
        let min_rv = config.min_resource_version;
        if store.raise_head(min_rv)? {
            // A data dir behind what clients may hold: continue above it;
            // their older resourceVersions answer 410 and they list again.
            warn!(
                from_rv = recovered.index.head_rv(),
                min_resource_version = min_rv,
                objects = recovered.index.total(),
                "The data dir's head resourceVersion is below --min-resource-version: raised; older resourceVersions answer 410."
            );
            recovered.index.set_head_rv(min_rv);
            recovered.compacted_rv = recovered.compacted_rv.max(min_rv);
        }
        let secret = store.meta_or_init("token-secret", || rand::random::<[u8; 32]>().to_vec())?;
        // The types known: built in, and those discovered from members before
        // (their objects are served from the store before any member answers).
        let mut known = kubefold_engine::resources::builtin();
        known.extend(kubefold_actors::fleet::discovered_types(&store));
        let fleet = Fleet::new(known, config.name_style, store.clone(), recovered.index, recovered.compacted_rv);
        if let Some(replica) = &replica {
            replica.attach(&fleet);
        }
        let selection = match kubefold_api::admin::read_selection(&store).map_err(|s| anyhow::anyhow!(s.message))? {
            Some(selection) => {
                if config.resources.is_some() {
                    warn!("The resource selection set through the admin API wins over the configuration's `resources`.");
                }
                selection
            }
            None => config.resource_selection(),
        };
        // The fleet's writers: the aggregator publishes, the supervisor
        // (seeded here first) keeps the members and the selection.
        let publisher = fleet.take_publisher().context("the fleet's publisher is taken")?;
        let supervision = fleet.take_supervision().context("the fleet's supervision is taken")?;
        supervision.set_selection(selection);
        let aggregator_arbiter = Arbiter::new();
        let retention = config.retention;
        let aggregator = Aggregator::start_in_arbiter(&aggregator_arbiter.handle(), move |_| Aggregator::new(publisher, retention));
        if let Some(replica) = &replica {
            replica.follow(aggregator.clone());
        }
        // Bounds for many members: lists at once, members with series of their own.
        kubefold_actors::relists::configure(config.relist_concurrency, config.initial_list_concurrency);
        kubefold_actors::cluster_series::configure(config.metrics_cluster_series);
        // Members: the configured ones and those registered through the admin API.
        let mut clusters = config.clusters.clone();
        for spec in kubefold_api::admin::read_registry(&store).map_err(|s| anyhow::anyhow!(s.message))? {
            if clusters.iter().any(|c| c.name == spec.name) {
                warn!(cluster = %spec.name, "Cluster is both configured and registered; the configuration wins.");
            } else {
                clusters.push(spec);
            }
        }
        // readyz lists every member (Connecting) before any is contacted
        // (over etcd, until the first round of ownership leaves those
        // owned by other replicas to them).
        for cluster in &clusters {
            supervision.set_member(cluster.clone());
            for type_ref in fleet.selection().plan(&cluster.name, &cluster.labels).keys() {
                let Some(resource) = fleet.known_type(type_ref).filter(|r| r.is_builtin()) else { continue };
                let checkpoint = recovered.checkpoints.get(&(cluster.name.clone(), resource.key())).cloned();
                supervision.update_status(&cluster.name, &resource.key(), |s| s.checkpoint = checkpoint);
            }
        }
        let configured: std::collections::BTreeSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        let removed: std::collections::BTreeSet<String> = recovered
            .checkpoints
            .keys()
            .map(|(cluster, _)| cluster.clone())
            .filter(|c| !configured.contains(c.as_str()))
            // Over etcd, other replicas' members have checkpoints here too.
            .filter(|_| replica.is_none())
            .collect();
        let supervisor =
            Supervisor::new(supervision, aggregator.clone(), config.watcher_threads, recovered.checkpoints).start();
        // Objects lost to storage damage while serving are rebuilt by lists of their members.
        aggregator.do_send(kubefold_actors::aggregator::SetRelister(supervisor.clone().recipient()));
        for cluster in removed {
            // A cluster that left the configuration is removed: its objects become DELETED events.
            warn!(cluster = %cluster, "Cluster is no longer configured; removing its objects.");
            supervisor.do_send(DropCluster(cluster));
        }

        let api_config = ApiConfig {
            listen: config.listen,
            workers: config.http_workers,
            bookmark_interval: Duration::from_secs(config.bookmark_interval_seconds.max(1)),
            watch_flush_interval: Duration::from_millis(config.watch_flush_interval_ms),
            min_watch_timeout: Duration::from_secs(config.min_request_timeout_seconds.max(1)),
            write_wait: Duration::from_secs(config.write_wait_seconds),
            client_stall_timeout: Some(Duration::from_secs(config.client_stall_timeout_seconds)).filter(|t| !t.is_zero()),
            compress_lists: config.compress_lists,
            openapi_refresh: Duration::from_secs(config.openapi_refresh_seconds.max(1)),
            stream_idle_timeout: Duration::from_secs(config.stream_idle_timeout_seconds.max(1)),
            auth: config.auth.clone(),
            audit: config.audit.clone(),
            tls: config.tls.clone(),
            placement: config.placement.clone(),
            file_descriptor_reserve: config.file_descriptor_reserve,
            kubeconfig_dirs: config.admin.kubeconfig_dirs(&config.clusters),
            ..ApiConfig::default()
        };
        let estimators = Estimators::new();
        let member_names: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
        let resolver = Resolver::new(config.estimator.clone(), member_names, estimators.clone(), fleet.clone())?.start();
        // Installed before the API listens: a SIGHUP sent once kubefold
        // says it listens is never the default action (exit).
        let reloader = match config_file {
            #[cfg(unix)]
            Some(path) => {
                let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                    .context("cannot install the SIGHUP handler")?;
                let resolver = resolver.clone();
                Some(actix::spawn(async move {
                    while hangup.recv().await.is_some() {
                        reload_estimator(&path, &resolver).await;
                    }
                }))
            }
            _ => None,
        };
        let mut state = ApiState::new(fleet.clone(), api_config, secret, metrics_handle());
        state.estimators = estimators;
        state.control = Some(kubefold_api::admin::Control {
            supervisor: supervisor.clone(),
            aggregator: aggregator.clone(),
            resolver: Some(resolver.clone()),
        });
        let state = Arc::new(state);
        let (server, addrs) = kubefold_api::server(state, Some(listener)).context("cannot start the API listener")?;
        let addr = addrs.first().copied().context("the API listener has no address")?;
        // The server runs once polled: spawned before the members are
        // added, whose watchers start on this thread (at 1,000 members
        // that took seconds, while connections waited in the backlog).
        let handle = server.handle();
        let server_task = actix::spawn(server);
        info!(listen = %addr, "Serving the Kubernetes API.");
        on_listening(addr);
        // Members are contacted only after reads are served from the store;
        // over etcd, those this replica owns through its lease.
        match &replica {
            Some(replica) => replica.own_members(clusters.clone(), addr, fleet.clone(), supervisor.clone(), aggregator.clone()),
            None => {
                // A few at a time: the supervisor starts each member's
                // watchers on this thread, and the server, polled between
                // them, finishes starting meanwhile.
                for some in clusters.chunks(8) {
                    for cluster in some {
                        supervisor.do_send(AddCluster(cluster.clone()));
                    }
                    tokio::task::yield_now().await;
                }
            }
        }
        let karmada = config.karmada.clone().map(|karmada| {
            let configured = clusters.iter().map(|c| c.name.clone()).collect();
            actix::spawn(crate::karmada::run(karmada, configured, supervisor.clone(), resolver.clone(), fleet.clone()))
        });
        shutdown.await;
        info!("Shutting down.");
        if let Some(replica) = &replica {
            replica.resign().await;
        }
        handle.stop(true).await;
        let _ = server_task.await;
        if let Some(reloader) = reloader {
            reloader.abort();
        }
        if let Some(karmada) = karmada {
            karmada.abort();
        }
        drop(resolver);
        drop(supervisor);
        aggregator_arbiter.stop();
        drop(replica);
        store.flush()?;
        // The next start loads this snapshot instead of replaying the whole log.
        let index = fleet.snapshot();
        match store.write_snapshot(&index) {
            Ok(Some(stats)) => info!(rv = stats.rv, objects = stats.objects, bytes = stats.bytes, "Index snapshot written."),
            Ok(None) => {}
            Err(e) => warn!(error = %e, "Index snapshot at shutdown failed; the next start replays the whole log."),
        }
        info!("Stopped.");
        Ok::<_, anyhow::Error>(())
    });
    // Dropping the runtime would wait for every blocking task still running
    // on it, and an estimator probe's name lookup (getaddrinfo, on tokio's
    // blocking threads) waits for the resolver's own timeout: at 1,000
    // members the process outlived "Stopped." by 4.8 s. Everything kept is
    // on disk by now (store flushed, snapshot written), and the process
    // ends right after this returns.
    std::mem::forget(system);
    stopped
}
