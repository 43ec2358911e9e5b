//! Member faults, injected into the simulators of a running kubefold
//! (`kubefold_testdata::sim::faults`): latency, 5xx, 429 with Retry-After,
//! connection resets mid-list and mid-watch, watch streams closed early,
//! 410 storms, bookmarks never sent, a member offline (refused or hanging),
//! a member restored from a backup with its RVs reset, a member clock far in
//! the future, and member-side bad data (objects without names, over
//! 1.5 MB, invalid UTF-8, duplicate events, out-of-order RVs).
//!
//! For each: kubefold keeps serving list, get and watch within seconds
//! while the fault lasts, the member's status shows it, and once it is
//! cleared kubefold converges to the member's own state; watch clients that
//! ran throughout saw strictly increasing RVs and reconstruct kubefold's list.

mod chaos;
mod common;

use std::time::{Duration, Instant};

use chaos::*;
use common::*;
use kubefold_testdata::sim::faults::{Corruption, CorruptionKind, Faults, Offline, OfflineMode};
use serde_json::{json, Value};

/// What a fault must make visible in the member's status or metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shows {
    /// `kubefold_member_errors_total{cluster}` grows.
    Errors,
    /// Phase `Stale`, with a `lastError`.
    Stale,
    /// `reconnects` grows.
    Reconnects,
    /// `relists` grows.
    Relists,
    /// Nothing kubefold can see (a hanging member), only that reads go on.
    Nothing,
}

/// Counters of one member before a fault.
struct Before {
    errors: f64,
    reconnects: u64,
    relists: u64,
}

fn before(kf: &Kubefold, cluster: &str) -> Before {
    Before {
        errors: metric(kf, "kubefold_member_errors_total", &[("cluster", cluster)]),
        reconnects: status_count(kf, cluster, "reconnects"),
        relists: status_count(kf, cluster, "relists"),
    }
}

/// Waits (at most 15 s) until kubefold shows the fault as `shows` says.
fn wait_shown(kf: &Kubefold, cluster: &str, shows: Shows, was: &Before, fault: &str) {
    let check = || match shows {
        Shows::Errors => metric(kf, "kubefold_member_errors_total", &[("cluster", cluster)]) > was.errors,
        Shows::Stale => {
            let s = status(kf, cluster);
            s["phase"] == "Stale" && s["lastError"].is_string()
        }
        Shows::Reconnects => status_count(kf, cluster, "reconnects") > was.reconnects,
        Shows::Relists => status_count(kf, cluster, "relists") > was.relists,
        Shows::Nothing => true,
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "{fault}: {cluster}'s status does not show it ({shows:?}): {}", status(kf, cluster));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops churn, lets the members settle, and checks that kubefold holds
/// exactly their pods and events, then the harness's invariant checker,
/// then every watch client.
fn assert_fully_converged(fleet: &Fleet, clients: &[WatchClient]) {
    for (_, sim) in &fleet.members {
        sim.set_churn(0.0);
    }
    for (name, sim) in &fleet.members {
        wait_member_quiet(sim, Duration::from_millis(500));
        assert_same_objects(&fleet.kf, name, sim, "/api/v1/pods", Duration::from_secs(60));
        assert_same_objects(&fleet.kf, name, sim, "/api/v1/events", Duration::from_secs(30));
    }
    // (Exactly the quiet members' objects, each at its member's
    // resourceVersion: stronger than `assert_converged`, whose wait for
    // the type's checkpoint lasts until a bookmark where the last events
    // came out of order.)
    for (i, client) in clients.iter().enumerate() {
        assert_watch_client_agrees(&fleet.kf, client, &format!("watch client {i}"));
        let seen = client.seen();
        assert!(seen.events > 0, "watch client {i} saw no event: {seen:?}");
    }
}

fn faults(f: impl FnOnce(&mut Faults)) -> Faults {
    let mut faults = Faults::default();
    f(&mut faults);
    faults
}

/// A fault of one member: its name, the faults, what kubefold's status
/// shows of it, and how long it lasts at least.
type Transient = (&'static str, Faults, Shows, Duration);

/// Transient faults of the member's answers (latency, errors, throttling,
/// expired watches), one after the other over one fleet (two members with
/// churn, two watch clients throughout).
#[test]
fn transient_answer_faults_never_block_reads_and_converge() {
    transient_faults_never_block_reads_and_converge(vec![
        ("fixed latency of 400 ms", faults(|f| {
            f.latency_ms = 400;
            f.watch_close_after_ms = Some(1000);
        }), Shows::Reconnects, Duration::from_secs(3)),
        ("random latency up to 1.5 s", faults(|f| {
            f.latency_jitter_ms = 1500;
            f.watch_close_after_ms = Some(1000);
        }), Shows::Reconnects, Duration::from_secs(3)),
        ("70% of requests 500 InternalError", faults(|f| {
            f.error_rate = 0.7;
            f.watch_close_after_ms = Some(500);
        }), Shows::Errors, Duration::from_secs(3)),
        // 503 and 429 are the watcher's to retry (kube's own retries are off): each one counts.
        ("70% of requests 503 ServiceUnavailable", faults(|f| {
            f.error_rate = 0.7;
            f.error_code = 503;
            f.watch_close_after_ms = Some(500);
        }), Shows::Errors, Duration::from_secs(3)),
        ("half of the requests 429 with Retry-After: 1", faults(|f| {
            f.throttle_rate = 0.5;
            f.retry_after_secs = 1;
            f.watch_close_after_ms = Some(1000);
        }), Shows::Errors, Duration::from_secs(3)),
        ("a 410 storm", faults(|f| f.expire_watches = true), Shows::Relists, Duration::from_secs(3)),
    ]);
}

/// Transient faults of the member's connections (lists and watches broken
/// off, the member offline), one after the other over one fleet, as above.
#[test]
fn transient_connection_faults_never_block_reads_and_converge() {
    transient_faults_never_block_reads_and_converge(vec![
        ("streaming lists reset mid-body under a 410 storm", faults(|f| {
            f.list_reset_rate = 1.0;
            f.expire_watches = true;
        }), Shows::Stale, Duration::from_secs(3)),
        // From here on kubefold uses paged lists with member1 (it remembers the 422).
        ("paged lists reset mid-body under a 410 storm, no streaming lists", faults(|f| {
            f.no_streaming_lists = true;
            f.list_reset_rate = 1.0;
            f.expire_watches = true;
        }), Shows::Stale, Duration::from_secs(3)),
        ("watch connections reset after 2 events", faults(|f| f.watch_reset_after_events = Some(2)), Shows::Errors, Duration::from_secs(3)),
        ("watch streams closed after 3 events", faults(|f| f.watch_close_after_events = Some(3)), Shows::Reconnects, Duration::from_secs(3)),
        ("offline, connections refused", faults(|f| f.offline = Some(Offline { mode: OfflineMode::Refuse, for_ms: None })), Shows::Stale, Duration::from_secs(8)),
        ("offline, connections hang", faults(|f| f.offline = Some(Offline { mode: OfflineMode::Hang, for_ms: None })), Shows::Nothing, Duration::from_secs(5)),
    ]);
}

/// Applies each fault of `table` to member1 in turn (two members with
/// churn, two watch clients throughout): kubefold shows it, serves reads
/// during it, keeps its watches alive, and converges after it.
fn transient_faults_never_block_reads_and_converge(table: Vec<Transient>) {
    let fleet = Fleet::start(2, 10.0, |_| {});
    let kf = &fleet.kf;
    let member1 = fleet.sim("member1");
    let clients = [WatchClient::start(&kf.url), WatchClient::start(&kf.url)];
    for (name, fault, shows, dwell) in table {
        let started = Instant::now();
        let was = before(kf, "member1");
        member1.set_faults(fault);
        wait_shown(kf, "member1", shows, &was, name);
        assert_reads_served(kf, "member1", name);
        std::thread::sleep(dwell.saturating_sub(started.elapsed()));
        assert_reads_served(kf, "member1", name);
        for (i, client) in clients.iter().enumerate() {
            let seen = client.seen();
            let silence = seen.last_heard.map_or(Duration::ZERO, |t| t.elapsed());
            assert!(silence < Duration::from_secs(5), "{name}: watch client {i} heard nothing for {silence:?}: {seen:?}");
        }
        member1.set_faults(Faults::default());
        assert_converged(kf, &fleet.members, "/api/v1/pods", "v1/pods");
        eprintln!("{name}: ok after {:?}", started.elapsed());
    }
    assert_fully_converged(&fleet, &clients);
    for (i, client) in clients.into_iter().enumerate() {
        let seen = client.finish();
        assert!(seen.longest_silence < Duration::from_secs(5), "watch client {i} was silent for {:?}", seen.longest_silence);
    }
}

/// A member that answers every request 503 ServiceUnavailable, or 429
/// TooManyRequests, is failing as surely as one answering 500: its status
/// must say so (Stale, lastError) within seconds, not only after the kube
/// client's own retries (15, from 5 ms doubling: minutes) give up.
#[test]
fn a_member_answering_only_503_or_429_shows_stale_within_seconds() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    for (code, name) in [(503, "every request 503"), (429, "every request 429 with Retry-After: 1")] {
        let was = before(kf, "member1");
        sim.set_faults(faults(|f| {
            if code == 503 {
                f.error_rate = 1.0;
                f.error_code = 503;
            } else {
                f.throttle_rate = 1.0;
                f.retry_after_secs = 1;
            }
            f.watch_close_after_ms = Some(300);
        }));
        wait_shown(kf, "member1", Shows::Stale, &was, name);
        assert!(metric(kf, "kubefold_member_errors_total", &[("cluster", "member1")]) > was.errors, "{name}: member errors counted");
        assert_reads_served(kf, "member1", name);
        sim.set_faults(Faults::default());
        wait_for(Duration::from_secs(30), "member1 synced again", || status(kf, "member1")["phase"] == "Synced");
    }
    assert_same_objects(kf, "member1", sim, "/api/v1/pods", Duration::from_secs(30));
}

/// A member answering 429 with `Retry-After: 3` is not asked again sooner.
#[test]
fn a_throttled_member_is_retried_no_sooner_than_retry_after() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let sim = fleet.sim("member1");
    let retry_after = 3;
    sim.set_faults(faults(|f| {
        f.throttle_rate = 1.0;
        f.retry_after_secs = retry_after;
        f.watch_close_after_ms = Some(200);
    }));
    let set_at = sim.requests().last().map_or(0, |r| r.elapsed_ms);
    std::thread::sleep(Duration::from_secs(10));
    assert_reads_served(&fleet.kf, "member1", "429s");
    sim.set_faults(Faults::default());
    let requests = sim.requests();
    let mut by_path: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for r in requests.iter().filter(|r| r.elapsed_ms > set_at + 1000) {
        by_path.entry(r.path.clone()).or_default().push(r.elapsed_ms);
    }
    let mut too_soon = Vec::new();
    for (path, times) in &by_path {
        for pair in times.windows(2) {
            // Every request in the window was answered 429 (the first after the last watch closed).
            if pair[1] - pair[0] < retry_after * 1000 * 9 / 10 {
                too_soon.push(format!("{path}: {} ms after the previous 429", pair[1] - pair[0]));
            }
        }
    }
    assert!(!by_path.is_empty(), "kubefold retried nothing in 10 s");
    assert!(too_soon.is_empty(), "requests sooner than Retry-After: {retry_after} s: {:?} (of {} requests)", &too_soon[..too_soon.len().min(8)], requests.len());
    assert_same_objects(&fleet.kf, "member1", sim, "/api/v1/pods", Duration::from_secs(30));
}

/// A 410 storm at a member without streaming lists: every watch from an RV
/// is answered 410 Expired, so each paged relist is followed by a watch
/// that fails at once. kubefold relists (its status counts them) but backs
/// off rather than relisting in a hot loop, keeps serving, and converges
/// when the storm ends.
#[test]
fn a_410_storm_relists_with_backoff_and_converges() {
    let fleet = Fleet::start(1, 5.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    let relists = status_count(kf, "member1", "relists");
    sim.set_faults(faults(|f| {
        f.expire_watches = true;
        f.no_streaming_lists = true;
    }));
    let storm = Duration::from_secs(8);
    std::thread::sleep(storm);
    assert_reads_served(kf, "member1", "410 storm");
    let during = status_count(kf, "member1", "relists") - relists;
    sim.set_faults(Faults::default());
    let types = status(kf, "member1")["resources"].as_object().unwrap().len() as u64;
    assert!(during >= types, "every type relisted after its 410: {during} relists of {types} types");
    // With a backoff from 0.5 s doubling, a type relists at most ~5 times in 8 s.
    assert!(during <= types * 6, "{during} relists of {types} types in {storm:?}: relisting in a hot loop");
    assert_fully_converged(&fleet, &[client]);
}

/// Without bookmarks, the RV a quiet type resumes from falls out of the
/// member's history: kubefold must relist it (and with bookmarks it must
/// not need to).
#[test]
fn bookmarks_keep_quiet_types_fresh_and_without_them_kubefold_relists() {
    let fleet = Fleet::start(1, 40.0, |c| {
        c.history = 100;
        c.bookmark_interval = Duration::from_millis(300);
    });
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    // With bookmarks: watches restarting every second resume from fresh RVs.
    let relists = status_count(kf, "member1", "relists");
    sim.set_faults(faults(|f| f.watch_close_after_ms = Some(1000)));
    std::thread::sleep(Duration::from_secs(6));
    let with_bookmarks = status_count(kf, "member1", "relists") - relists;
    assert_eq!(with_bookmarks, 0, "bookmarks keep every type's RV within the member's history");
    // Without: quiet types resume from RVs more than 100 changes old.
    let relists = status_count(kf, "member1", "relists");
    sim.set_faults(faults(|f| {
        f.no_bookmarks = true;
        f.watch_close_after_ms = Some(1000);
    }));
    wait_for(Duration::from_secs(20), "relists of quiet types without bookmarks", || {
        status_count(kf, "member1", "relists") > relists
    });
    assert_reads_served(kf, "member1", "no bookmarks");
    sim.set_faults(Faults::default());
    assert_fully_converged(&fleet, &[client]);
}

/// A member restored from an etcd backup: its objects are renumbered with
/// RVs below those kubefold saw, and later changes get RVs kubefold has
/// already passed. kubefold must notice and relist, not hold the old
/// versions and miss every change until the member's RV passes its
/// checkpoint.
#[test]
fn a_member_restored_with_its_resource_versions_reset_is_relisted() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    for i in 0..40 {
        label_pod(sim, "default", "web-0", "round", &i.to_string());
    }
    assert_same_objects(kf, "member1", sim, "/api/v1/pods", Duration::from_secs(20));
    let relists = status_count(kf, "member1", "relists");
    let (before, after) = sim.restore(None);
    assert!(after + 40 <= before, "the member's RV went back: {before} -> {after}");
    // Changes after the restore, below kubefold's checkpoint.
    label_pod(sim, "default", "web-1", "after", "restore");
    label_pod(sim, "default", "web-2", "after", "restore");
    assert_reads_served(kf, "member1", "restore");
    assert_same_objects(kf, "member1", sim, "/api/v1/pods", Duration::from_secs(30));
    assert!(status_count(kf, "member1", "relists") > relists, "kubefold relisted the restored member: {}", status(kf, "member1"));
    let web1 = kf.get_json("/api/v1/namespaces/default/pods/web-1_member1");
    assert_eq!(web1["metadata"]["labels"]["after"], "restore");
    assert_fully_converged(&fleet, &[client]);
}

/// A member whose clock is 50 years ahead: its timestamps are in the
/// future. kubefold serves them as they are (AGE `<invalid>` in Tables,
/// as kubectl prints it) and keeps working.
#[test]
fn a_member_clock_far_in_the_future_changes_nothing_but_its_timestamps() {
    let fleet = Fleet::start(1, 10.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    let skew = 50 * 365 * 86_400;
    sim.set_faults(faults(|f| f.clock_skew_secs = skew));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "from-the-future", "namespace": "default"},
                     "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
    let created = member_request(reqwest::Method::POST, &format!("{}/api/v1/namespaces/default/pods", sim.url()), "application/json", pod);
    let stamp = created["metadata"]["creationTimestamp"].as_str().unwrap().to_string();
    assert!(stamp.as_str() > "2070", "the member stamped {stamp}");
    wait_for(Duration::from_secs(20), "the future pod in kubefold", || {
        kf.get("/api/v1/namespaces/default/pods/from-the-future_member1").0 == 200
    });
    let mine = kf.get_json("/api/v1/namespaces/default/pods/from-the-future_member1");
    assert_eq!(mine["metadata"]["creationTimestamp"], stamp.as_str());
    let table: Value = client_json(&format!("{}/api/v1/namespaces/default/pods/from-the-future_member1", kf.url), "application/json;as=Table;v=v1;g=meta.k8s.io");
    let columns: Vec<&str> = table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    let age = columns.iter().position(|c| *c == "Age").expect("an Age column");
    assert_eq!(table["rows"][0]["cells"][age], "<invalid>", "{table}");
    std::thread::sleep(Duration::from_secs(2));
    assert_reads_served(kf, "member1", "clock skew");
    sim.set_faults(Faults::default());
    assert_fully_converged(&fleet, &[client]);
}

fn client_json(url: &str, accept: &str) -> Value {
    let response = client(READ_TIMEOUT).get(url).header("Accept", accept).send().unwrap();
    assert_eq!(response.status(), 200, "{url}");
    response.json().unwrap()
}

/// Member-side bad data in watch events: objects without names, objects
/// over 1.5 MB, duplicate events, out-of-order RVs of different objects.
/// Each is logged and skipped (bad objects counted), kubefold keeps
/// following the member past it, its index holds no bad entry and no stale
/// version, and watch clients see a clean history.
#[test]
fn member_side_bad_data_is_skipped_without_corrupting_the_index() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    for (round, kind) in [CorruptionKind::NoName, CorruptionKind::Huge, CorruptionKind::Duplicate, CorruptionKind::OutOfOrder].into_iter().enumerate() {
        corrupt_one_change(kf, sim, kind, round);
    }
    let logs = kf.logs();
    assert!(logs.contains("Member object skipped"), "bad objects are logged");
    assert_fully_converged(&fleet, &[client]);
}

/// Invalid UTF-8 in one watch event: kubefold must skip that event (log,
/// count) and go on with the next, not treat the stream as broken and
/// resume from before the bad event, meeting it again, forever.
#[test]
fn invalid_utf8_in_a_watch_event_is_skipped_not_retried_forever() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    corrupt_one_change(kf, sim, CorruptionKind::InvalidUtf8, 0);
    assert_fully_converged(&fleet, &[client]);
}

/// A skipped bad event loses the change it carried; kubefold must get it
/// back by itself (a relist a little later), not only when the object
/// happens to change again.
#[test]
fn a_change_lost_with_a_bad_event_is_recovered_by_a_relist() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    wait_member_quiet(sim, Duration::from_millis(300));
    let relists = status_count(kf, "member1", "relists");
    let bad = || metric(kf, "kubefold_member_bad_objects_total", &[("cluster", "member1")]);
    let bad_before = bad();
    let next = sim.resource_version() + 1;
    sim.set_faults(faults(|f| f.corrupt_events = Some(Corruption { kind: CorruptionKind::NoName, every: next })));
    let victim = label_pod(sim, "default", "web-0", "lost", "yes");
    assert_eq!(victim, next, "the corrupted change is the labelling of web-0");
    // The member corrupts an event as its watch sends it: the fault stays
    // until kubefold has met the corrupted event (on a busy machine the
    // watch may send it after the edit has been answered).
    wait_for(Duration::from_secs(30), "kubefold skipping the corrupted event", || bad() > bad_before);
    sim.set_faults(Faults::default());
    // No further change of web-0: only a relist can bring its label.
    wait_for(Duration::from_secs(60), "web-0's lost change recovered", || {
        kubefold_objects(kf, "member1", "/api/v1/pods").get("default/web-0") == Some(&victim)
    });
    assert!(status_count(kf, "member1", "relists") > relists, "recovered by a relist: {}", status(kf, "member1"));
    let web0 = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    assert_eq!(web0["metadata"]["labels"]["lost"], "yes");
    assert_fully_converged(&fleet, &[client]);
}

/// Corrupts (as `kind` says) the event of one change of `web-0`, followed
/// by a good change of `web-1`: kubefold must take the second, skip (and
/// count) the first when it is bad, serve reads, and converge exactly once
/// the fault is gone and `web-0` changes again.
fn corrupt_one_change(kf: &Kubefold, sim: &kubefold_testdata::SimHandle, kind: CorruptionKind, round: usize) {
    let name = format!("{kind:?}");
    let skipped = matches!(kind, CorruptionKind::NoName | CorruptionKind::Huge | CorruptionKind::InvalidUtf8);
    let bad = |kf: &Kubefold| metric(kf, "kubefold_member_bad_objects_total", &[("cluster", "member1")]);
    let bad_before = bad(kf);
    wait_member_quiet(sim, Duration::from_millis(300));
    // Corrupt exactly the next change (the only event whose RV is a multiple of its own RV),
    // or, for duplicates and reordering, every event.
    let next = sim.resource_version() + 1;
    let every = if skipped { next } else { 1 };
    sim.set_faults(faults(|f| f.corrupt_events = Some(Corruption { kind, every })));
    let victim_rv = label_pod(sim, "default", "web-0", "round", &round.to_string());
    if skipped {
        assert_eq!(victim_rv, next, "{name}: the corrupted change is the labelling of web-0");
    }
    let witness_rv = label_pod(sim, "default", "web-1", "round", &round.to_string());
    wait_for(Duration::from_secs(15), &format!("{name}: kubefold follows the member past the bad event"), || {
        kubefold_objects(kf, "member1", "/api/v1/pods").get("default/web-1") == Some(&witness_rv)
    });
    assert_reads_served(kf, "member1", &name);
    if skipped {
        assert!(bad(kf) > bad_before, "{name}: kubefold_member_bad_objects_total counts the bad object");
        let web0 = kubefold_objects(kf, "member1", "/api/v1/pods")["default/web-0"];
        assert!(web0 < victim_rv, "{name}: the bad version of web-0 was skipped, kubefold holds {web0}");
    }
    sim.set_faults(Faults::default());
    label_pod(sim, "default", "web-0", "fixed", &round.to_string());
    wait_member_quiet(sim, Duration::from_millis(300));
    assert_same_objects(kf, "member1", sim, "/api/v1/pods", Duration::from_secs(15));
    eprintln!("{name}: ok");
}

/// The out-of-order case alone, where it bites: two changes of one object
/// arrive newer first. kubefold must not end up holding the older version.
#[test]
fn out_of_order_events_of_one_object_never_regress_it() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    let client = WatchClient::start(&kf.url);
    wait_member_quiet(sim, Duration::from_millis(300));
    sim.set_faults(faults(|f| f.corrupt_events = Some(Corruption { kind: CorruptionKind::OutOfOrder, every: 1 })));
    label_pod(sim, "default", "web-0", "step", "one");
    let newest = label_pod(sim, "default", "web-0", "step", "two");
    std::thread::sleep(Duration::from_secs(2));
    sim.set_faults(Faults::default());
    wait_member_quiet(sim, Duration::from_millis(300));
    let held = kubefold_objects(kf, "member1", "/api/v1/pods")["default/web-0"];
    assert_eq!(held, newest, "kubefold holds web-0 at member RV {held}, the member at {newest}");
    let web0 = kf.get_json("/api/v1/namespaces/default/pods/web-0_member1");
    assert_eq!(web0["metadata"]["labels"]["step"], "two");
    assert_fully_converged(&fleet, &[client]);
}

/// A change and then the deletion of one object, arriving deletion first:
/// the late change must not bring the deleted object back (kubefold keeps
/// the member RV of recent deletions and skips older changes of the same
/// object, as it does for objects it holds).
#[test]
fn a_late_change_of_a_deleted_object_does_not_resurrect_it() {
    let fleet = Fleet::start(1, 0.0, |_| {});
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    wait_member_quiet(sim, Duration::from_millis(300));
    let victim = kubefold_objects(kf, "member1", "/api/v1/pods")
        .into_keys()
        .find(|k| !k.contains("/web-"))
        .expect("a pod other than web-*");
    let (namespace, name) = victim.split_once('/').unwrap();
    let relists = status_count(kf, "member1", "relists");
    sim.set_faults(faults(|f| f.corrupt_events = Some(Corruption { kind: CorruptionKind::OutOfOrder, every: 1 })));
    label_pod(sim, namespace, name, "last", "change");
    let url = format!("{}/api/v1/namespaces/{namespace}/pods/{name}", sim.url());
    let deleted = member_request(reqwest::Method::DELETE, &url, "application/json", serde_json::json!({"gracePeriodSeconds": 0}));
    assert_eq!(deleted["metadata"]["name"], name, "the member deleted {victim}");
    // A change after both, in the same watch stream: once kubefold holds it,
    // it has applied the two before it.
    sim.set_faults(Faults::default());
    let sentinel = label_pod(sim, "default", "web-0", "after", "both");
    wait_for(Duration::from_secs(30), "kubefold at the change after both", || {
        kubefold_objects(kf, "member1", "/api/v1/pods").get("default/web-0") == Some(&sentinel)
    });
    assert_eq!(status_count(kf, "member1", "relists"), relists, "no relist corrected it behind the test's back");
    let held = kubefold_objects(kf, "member1", "/api/v1/pods");
    assert!(!held.contains_key(&victim), "{victim} was deleted in the member but kubefold holds it again at member RV {:?}", held.get(&victim));
}

/// A member whose kube-apiserver predates streaming lists (before 1.27)
/// ignores `sendInitialEvents`: it answers with the state as ADDED events
/// and then live events, never with the initial-events-end bookmark.
/// kubefold must notice and use paged lists, and become ready.
#[test]
fn a_member_that_ignores_send_initial_events_is_synced_with_paged_lists() {
    let fleet = Fleet::launch(1, 2.0, |c| c.faults.ignore_send_initial_events = true, &[]);
    let kf = &fleet.kf;
    let sim = fleet.sim("member1");
    wait_for(Duration::from_secs(60), "kubefold listening", || kf.get("/livez").0 == 200);
    let synced = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        status(kf, "member1")["phase"] == "Synced"
    });
    assert!(synced, "member1 synced within 30 s: {}", status(kf, "member1"));
    kf.wait_ready();
    assert_converged(kf, &fleet.members, "/api/v1/pods", "v1/pods");
    sim.set_churn(0.0);
    wait_member_quiet(sim, Duration::from_millis(500));
    assert_same_objects(kf, "member1", sim, "/api/v1/pods", Duration::from_secs(30));
}

/// `SimHandle::set_faults` returns once an offline mode is in force: the
/// port refuses at once after `refuse`, and answers at once after the fault
/// is cleared (the server is listening again), so a test's next request
/// sees the state it set, not a server still stopping or starting.
#[test]
fn set_faults_returns_once_the_member_is_offline_or_back() {
    let sim = kubefold_testdata::start(kubefold_testdata::SimConfig::default()).unwrap();
    // A new connection each request: a kept-alive one belongs to the server
    // `refuse` stopped, and a client reusing it races its close (reset by
    // peer), which is the client's pool, not what this test is about.
    let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).pool_max_idle_per_host(0).build().unwrap();
    let pods = format!("{}/api/v1/pods", sim.url());
    for round in 0..5 {
        sim.set_faults(faults(|f| f.offline = Some(Offline { mode: OfflineMode::Refuse, for_ms: None })));
        assert!(std::net::TcpStream::connect(sim.addr()).is_err(), "round {round}: the port refuses once set_faults returned");
        sim.set_faults(Faults::default());
        let answer = http.get(&pods).send();
        assert!(answer.as_ref().is_ok_and(|r| r.status() == 200), "round {round}: answered once set_faults returned: {answer:?}");
    }
}

/// The simulator's fault endpoint itself, over HTTP, as `kubefold sim` users drive it.
#[test]
fn the_fault_endpoint_switches_faults_at_runtime() {
    let sim = kubefold_testdata::start(kubefold_testdata::SimConfig::default()).unwrap();
    let http = client(Duration::from_secs(10));
    let url = format!("{}/sim/faults", sim.url());
    let put = |body: Value| http.put(&url).body(body.to_string()).send().unwrap();
    assert_eq!(put(json!({"errorRate": 1.0, "errorCode": 503})).status(), 200);
    assert_eq!(sim.faults().error_code, 503);
    let answer = http.get(format!("{}/api/v1/pods", sim.url())).send().unwrap();
    assert_eq!(answer.status(), 503);
    let got: Value = http.get(&url).send().unwrap().json().unwrap();
    assert_eq!(got["errorRate"], 1.0);
    assert_eq!(put(json!({"errorRate": 3})).status(), 400);
    assert_eq!(put(json!({"bogus": 1})).status(), 400);
    assert_eq!(put(json!({"throttleRate": 1.0, "retryAfterSecs": 7})).status(), 200);
    let throttled = http.get(format!("{}/api/v1/pods", sim.url())).send().unwrap();
    assert_eq!(throttled.status(), 429);
    assert_eq!(throttled.headers()["retry-after"], "7");
    assert_eq!(put(json!({})).status(), 200);
    assert_eq!(http.get(format!("{}/api/v1/pods", sim.url())).send().unwrap().status(), 200);
    // Offline for a while: refused, then back by itself.
    sim.set_faults(faults(|f| f.offline = Some(Offline { mode: OfflineMode::Refuse, for_ms: Some(1500) })));
    std::thread::sleep(Duration::from_millis(300));
    assert!(http.get(format!("{}/api/v1/pods", sim.url())).send().is_err(), "connections are refused");
    wait_for(Duration::from_secs(10), "the member back online", || {
        http.get(format!("{}/api/v1/pods", sim.url())).send().is_ok_and(|r| r.status() == 200)
    });
    assert_eq!(sim.faults(), Faults::default());
    // Churn on and off.
    let churn = format!("{}/sim/churn", sim.url());
    assert_eq!(http.put(&churn).body(r#"{"perSecond": 50}"#).send().unwrap().status(), 200);
    let rv = sim.resource_version();
    wait_for(Duration::from_secs(10), "churn", || sim.resource_version() > rv + 20);
    sim.set_churn(0.0);
    std::thread::sleep(Duration::from_millis(200));
    let rv = sim.resource_version();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sim.resource_version(), rv, "churn stopped");
    // Restore and burst.
    let restored: Value = http.post(format!("{}/sim/restore", sim.url())).send().unwrap().json().unwrap();
    let (before, after): (u64, u64) = (restored["before"].as_str().unwrap().parse().unwrap(), restored["after"].as_str().unwrap().parse().unwrap());
    assert!(after < before, "{restored}");
    let burst: Value = http.post(format!("{}/sim/burst", sim.url())).body(r#"{"pods": 2000}"#).send().unwrap().json().unwrap();
    assert_eq!(burst["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap(), after + 2000 + 10, "2,000 pods and 10 namespaces");
}
