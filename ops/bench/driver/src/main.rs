//! kubefold's benchmark driver (`ops/bench/run`): starts simulated member
//! clusters and kubefold as separate processes on loopback, generates the
//! load, and measures every figure side by side with its reference in the
//! same run (kubefold vs the members serving the same objects directly;
//! kubefold vs the limit: the same bytes streamed from memory, the same
//! records batch-inserted into a raw sled tree). Prints one table and
//! writes it as JSON.
//!
//! - [`fleet`]: `--fleet`, kubefold over many members of one simulator;
//!   [`fleet_watch`]: its watch fan-out under churn.
//! - [`procs`]: child processes, /proc measurements, cleanup.
//! - [`http`]: the HTTP/1.1 client and the in-memory "limit" server.
//! - [`load`]: open- and closed-loop gets, watch clients, marker writes.
//! - [`phases`]: the benchmark phases (sync, lists, gets, watch, restart, sled).
//! - [`report`]: figures, the table and the JSON file.
//! - [`sledref`]: the raw-sled reference, in child processes.
//! - [`stats`]: percentiles of samples.
//! - [`watch`]: the watch clients' latency and delivery measures.
//! - [`streams`]: `--streams`, exec and port-forward streams through
//!   kubefold against the member directly.
//! - [`replicas`], [`etcdproc`]: `--etcd`, kubefold replicas on etcd against
//!   sled, a raw etcd load, one replica, and the lease TTL.

mod etcdproc;
mod fleet;
mod fleet_watch;
mod http;
mod load;
mod phases;
mod procs;
mod replicas;
mod report;
mod sledref;
mod stats;
mod streams;
mod watch;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Sizes and durations of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// Simulated member clusters per step.
    pub sims: usize,
    /// Pod counts of the size steps (spread over the members).
    pub sizes: Vec<usize>,
    /// Open-loop get rate.
    pub get_rate: f64,
    /// Seconds of each open-loop get run.
    pub get_secs: f64,
    /// Connections of the saturation run.
    pub saturation_connections: usize,
    /// Seconds of each saturation run.
    pub saturation_secs: f64,
    /// Watch clients per case.
    pub watchers: usize,
    /// Seconds each watch case is measured.
    pub watch_secs: f64,
    /// Seconds between the last watch client connecting and the window.
    pub watch_settle_secs: f64,
    /// Load pods per member in the watch phase.
    pub watch_pods_per_sim: usize,
    /// Churn across the fleet in the watch phase (events/s, `--churn-per-sec` split over members).
    pub churn_per_sec: f64,
    /// Marker patches per second (their write time is known).
    pub marker_rate: f64,
    /// Largest size at which Table lists are measured.
    pub table_max: usize,
    /// Whether the watch phase runs.
    pub watch: bool,
    /// Whether the warm restart runs (at the largest size).
    pub restart: bool,
    /// Seconds the whole driver may take.
    pub budget_secs: f64,
    /// Milliseconds kubefold is stopped (SIGSTOP) in the middle of the
    /// all-pods watch window; 0 = not stopped.
    pub watch_pause_ms: f64,
    /// Which processes that pause stops: kubefold, members, driver or all.
    pub watch_pause_of: String,
    /// `--fleet`: the fleet run instead of the size steps and the watch phase.
    pub fleet: Option<fleet::FleetPlan>,
    /// `--streams`: only the streams phase ([`streams`]).
    pub streams: bool,
    /// `--etcd`: the replicas-on-etcd run ([`replicas`]) instead of the size steps.
    pub etcd: Option<replicas::EtcdPlan>,
}

impl Plan {
    fn quick() -> Plan {
        Plan {
            quick: true,
            sims: 2,
            sizes: vec![10_000],
            get_rate: 1000.0,
            get_secs: 3.0,
            saturation_connections: 16,
            saturation_secs: 3.0,
            watchers: 100,
            watch_secs: 5.0,
            watch_settle_secs: 1.0,
            watch_pods_per_sim: 1_000,
            churn_per_sec: 200.0,
            marker_rate: 10.0,
            table_max: 100_000,
            watch: true,
            restart: true,
            budget_secs: 110.0,
            watch_pause_ms: 0.0,
            watch_pause_of: "kubefold".into(),
            fleet: None,
            streams: false,
            etcd: None,
        }
    }

    fn full() -> Plan {
        Plan {
            quick: false,
            sims: 10,
            sizes: vec![10_000, 100_000, 1_000_000],
            get_rate: 1000.0,
            get_secs: 8.0,
            saturation_connections: 64,
            saturation_secs: 5.0,
            watchers: 1000,
            watch_secs: 12.0,
            watch_settle_secs: 1.0,
            watch_pods_per_sim: 1_000,
            churn_per_sec: 200.0,
            marker_rate: 10.0,
            table_max: 100_000,
            watch: true,
            restart: true,
            budget_secs: 840.0,
            watch_pause_ms: 0.0,
            watch_pause_of: "kubefold".into(),
            fleet: None,
            streams: false,
            etcd: None,
        }
    }

    /// Timed repetitions of a full list at `size`.
    pub fn list_reps(&self, size: usize) -> usize {
        match size {
            0..=20_000 => 15,
            20_001..=150_000 => 11,
            _ => 3,
        }
    }

    /// Timed repetitions of a Table list at `size`.
    pub fn table_reps(&self, size: usize) -> usize {
        match size {
            0..=20_000 => 5,
            _ => 3,
        }
    }
}

/// What every phase needs.
pub struct Ctx {
    /// The plan.
    pub plan: Plan,
    /// The kubefold binary.
    pub kubefold: PathBuf,
    /// Per-run scratch directory (data dirs, sled reference); removed at the end.
    pub scratch: PathBuf,
    /// Where logs of the children go.
    pub logs: PathBuf,
    /// Where results go.
    pub out: PathBuf,
    /// When the driver started.
    pub started: Instant,
}

impl Ctx {
    /// Seconds left in the budget.
    pub fn remaining(&self) -> f64 {
        self.plan.budget_secs - self.started.elapsed().as_secs_f64()
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: kubefold-bench --kubefold PATH [--quick] [--out DIR] [--budget-secs S] [--sizes N,N,..] [--sims N]\n\
         \x20                     [--watchers N] [--watch-settle-secs S] [--no-watch] [--only-watch] [--no-restart] [--command TEXT]\n\
         \x20                     [--watch-pause-ms MS [--watch-pause-of kubefold|members|driver|all]]\n\
         \x20                     [--fleet [--fleet-members N] [--fleet-pods N] [--fleet-http1] [--fleet-watch-clients N]] [--streams] [--etcd]"
    );
    std::process::exit(2)
}

struct Args {
    plan: Plan,
    kubefold: PathBuf,
    out: PathBuf,
    command: String,
}

fn argv_has(flag: &str) -> bool {
    std::env::args().any(|a| a == flag)
}

fn parse_args() -> Result<Args> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let quick = argv.iter().any(|a| a == "--quick");
    let mut plan = if quick { Plan::quick() } else { Plan::full() };
    let mut kubefold = None;
    let mut out = PathBuf::from("ops/bench/results");
    let mut command = String::from("ops/bench/run");
    let (mut fleet_members, mut fleet_pods): (Option<usize>, Option<usize>) = (None, None);
    let mut fleet_http1 = false;
    let mut fleet_watch_clients: Option<usize> = None;
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--quick" => {}
            "--kubefold" => kubefold = Some(PathBuf::from(value())),
            "--out" => out = PathBuf::from(value()),
            "--budget-secs" => plan.budget_secs = value().parse().context("--budget-secs")?,
            "--sizes" => {
                plan.sizes = value().split(',').map(|s| s.trim().replace('_', "").parse()).collect::<Result<_, _>>().context("--sizes")?
            }
            "--sims" => plan.sims = value().parse().context("--sims")?,
            "--watchers" => plan.watchers = value().parse().context("--watchers")?,
            "--watch-settle-secs" => plan.watch_settle_secs = value().parse().context("--watch-settle-secs")?,
            "--watch-pause-ms" => plan.watch_pause_ms = value().parse().context("--watch-pause-ms")?,
            "--watch-pause-of" => {
                plan.watch_pause_of = value();
                if !matches!(plan.watch_pause_of.as_str(), "kubefold" | "members" | "driver" | "all") {
                    bail!("--watch-pause-of: kubefold, members, driver or all");
                }
            }
            "--no-watch" => plan.watch = false,
            "--only-watch" => plan.sizes.clear(),
            "--no-restart" => plan.restart = false,
            "--fleet" => {
                plan.fleet = Some(if quick { fleet::FleetPlan::quick() } else { fleet::FleetPlan::full() });
            }
            "--fleet-members" => fleet_members = Some(value().parse().context("--fleet-members")?),
            "--fleet-pods" => fleet_pods = Some(value().replace('_', "").parse().context("--fleet-pods")?),
            "--fleet-http1" => fleet_http1 = true,
            "--fleet-watch-clients" => fleet_watch_clients = Some(value().parse().context("--fleet-watch-clients")?),
            "--streams" => plan.streams = true,
            "--etcd" => plan.etcd = Some(if quick { replicas::EtcdPlan::quick() } else { replicas::EtcdPlan::full() }),
            "--command" => command = value(),
            "-h" | "--help" => usage(),
            other => bail!("unknown argument {other:?}"),
        }
    }
    let Some(kubefold) = kubefold else { usage() };
    if let Some(fleet) = plan.fleet.as_mut() {
        if let Some(m) = fleet_members {
            fleet.members = m.max(1);
            fleet.restored = fleet.restored.min(fleet.members).max(1);
        }
        if let Some(p) = fleet_pods {
            fleet.pods = p;
        }
        fleet.http1 = fleet_http1;
        if let Some(c) = fleet_watch_clients {
            fleet.watch_clients = c.max(1);
        }
        if fleet.pods < fleet.members {
            bail!("--fleet-pods must be at least --fleet-members");
        }
    } else if fleet_members.is_some() || fleet_pods.is_some() || fleet_http1 || fleet_watch_clients.is_some() {
        bail!("--fleet-members, --fleet-pods, --fleet-http1 and --fleet-watch-clients go with --fleet");
    }
    if let Some(etcd) = plan.etcd.as_mut() {
        // --sizes and --sims size the etcd run too.
        if argv_has("--sizes") {
            etcd.sizes = plan.sizes.clone();
        }
        if argv_has("--sims") {
            etcd.members = plan.sims;
        }
        if etcd.sizes.iter().any(|&n| n < etcd.members) {
            bail!("--etcd: every size must be at least the number of members");
        }
    }
    if plan.sims == 0 || plan.sims > 99 {
        bail!("--sims must be 1..99");
    }
    Ok(Args { plan, kubefold, out, command })
}

/// `kubefold-bench get ADDR PATH [N]`: N (default 1) GETs of PATH on one
/// connection with the suite's client, on a runtime like the suite's; prints
/// each one's milliseconds and bytes. For side-by-side runs of two builds
/// (ops/bench/ab) measured by the client the suite measures with.
fn timed_gets(argv: &[String]) -> Result<()> {
    let [addr, path, rest @ ..] = argv else { bail!("usage: kubefold-bench get ADDR PATH [N]") };
    let addr: std::net::SocketAddr = addr.parse().context("ADDR")?;
    let n: usize = rest.first().map(|n| n.parse()).transpose().context("N")?.unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let mut client = http::Client::new(addr);
        for _ in 0..n {
            let (ms, bytes) = phases::timed_get(&mut client, path, None).await?;
            println!("{ms:.3} {bytes}");
        }
        Ok(())
    })
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("sled-reference") {
        return sledref::child_main(&argv[1..]);
    }
    if argv.first().map(String::as_str) == Some("get") {
        return timed_gets(&argv[1..]);
    }
    let args = parse_args()?;
    let started = Instant::now();
    let scratch = std::env::temp_dir().join(format!("kubefold-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let logs = args.out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let ctx = Ctx { plan: args.plan.clone(), kubefold: args.kubefold.clone(), scratch: scratch.clone(), logs, out: args.out.clone(), started };

    // Last resort: past the budget (plus grace) the driver exits; the kernel
    // kills every child (PR_SET_PDEATHSIG) and the scratch dir is removed.
    let hard_limit = Duration::from_secs_f64(args.plan.budget_secs + 45.0);
    let watchdog_scratch = scratch.clone();
    std::thread::spawn(move || {
        std::thread::sleep(hard_limit);
        eprintln!("kubefold-bench: over the time budget ({hard_limit:?}); stopping everything.");
        let _ = std::fs::remove_dir_all(&watchdog_scratch);
        std::process::exit(3);
    });

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut report = report::Report::new(&ctx, &args.command);
    // The phases run on this (the main) thread: children are spawned from it.
    let outcome = match ctx.plan.fleet.clone() {
        Some(fleet) => runtime.block_on(fleet::run(&ctx, &mut report, &fleet)),
        None if ctx.plan.etcd.is_some() => {
            let plan = ctx.plan.etcd.clone().unwrap_or_else(replicas::EtcdPlan::quick);
            runtime.block_on(replicas::run(&ctx, &mut report, &plan))
        }
        None if ctx.plan.streams => runtime.block_on(streams::run(&ctx, &mut report)),
        None => runtime.block_on(phases::run(&ctx, &mut report)),
    };
    if let Err(e) = &outcome {
        report.note(format!("run stopped early: {e:#}"));
    }
    report.finish(&ctx);
    report.print();
    let path = args.out.join("latest.json");
    report.write(&path)?;
    println!("\nresults: {}  (logs of the children: {})", path.display(), ctx.logs.display());
    let _ = std::fs::remove_dir_all(&scratch);
    runtime.shutdown_timeout(Duration::from_secs(2));
    outcome?;
    if report.failures > 0 {
        // A phase that could not run is a broken suite (CI must see it);
        // a missed target is a figure, never a failure.
        eprintln!("kubefold-bench: {} phase(s) failed; see the notes above", report.failures);
        std::process::exit(1);
    }
    Ok(())
}
