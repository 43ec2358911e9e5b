//! `kubefold demo`: the embedded default. Three simulated member clusters
//! (`member1..3`) with a realistic workload and mild churn, and kubefold
//! serving them.

use std::net::SocketAddr;
use std::path::PathBuf;

use kubefold_actors::cluster::ClusterSpec;
use kubefold_testdata::{SimConfig, Workload};

use crate::config::Config;

/// Flags of `kubefold demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Address of kubefold's API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Directory of the store.
    #[arg(long, default_value = "kubefold-data")]
    data_dir: PathBuf,
    /// Number of simulated member clusters.
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Changes per second in each member.
    #[arg(long, default_value_t = 0.5)]
    churn_per_sec: f64,
    /// Extra pods per member.
    #[arg(long, default_value_t = 0)]
    pods: usize,
}

/// Runs the demo until Ctrl-C.
pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut sims = Vec::new();
    let mut config = Config { listen: args.listen, data_dir: args.data_dir.clone(), ..Config::default() };
    for i in 1..=args.members {
        let name = format!("member{i}");
        let sim = kubefold_testdata::start(SimConfig {
            name: name.clone(),
            workload: Workload::Demo,
            pods: args.pods,
            churn_per_sec: args.churn_per_sec,
            seed: i as u64,
            // The members also serve the custom resource widgets.example.com
            // (not aggregated until selected: `kubefold admin resources set`).
            crds: true,
            ..SimConfig::default()
        })?;
        println!("member cluster {name}: {}", sim.url());
        config.clusters.push(ClusterSpec::from_url(&name, &sim.url()));
        sims.push(sim);
    }
    // The control plane holding the estimator Services (not a member).
    let control_plane = kubefold_testdata::start(SimConfig { name: "karmada".into(), workload: Workload::Empty, ..SimConfig::default() })?;
    let estimators = crate::resolve::demo_control_plane(&control_plane.url())?;
    config.estimator = estimators.config.clone();
    let cp_url = control_plane.url();
    println!("control plane karmada: {cp_url} (estimator stand-in of member1 on {})", estimators.stand_in.addr());
    let urls: Vec<String> = sims.iter().map(|s| s.url()).collect();
    let result = crate::serve::run(config, None, crate::shutdown_signal(), move |addr| {
        println!("kubefold demo: {} member clusters, data in {}", urls.len(), args.data_dir.display());
        println!("kubefold listening on http://{addr}");
        println!("web console: http://{addr}/ui");
        println!("try:");
        println!("  kubectl --server http://{addr} get pods -A");
        println!("  kubectl --server http://{addr} get pods -A -l kubefold.io/cluster=member1");
        println!("  kubectl --server http://{addr} get pods -A -w");
        println!("  kubectl --server {} get pods -A    # one member directly", urls[0]);
        println!("  curl http://{addr}/admin/v1/estimators");
        println!("  kubectl --server {cp_url} -n karmada-system edit service karmada-scheduler-estimator-member1");
    });
    drop(estimators);
    control_plane.stop();
    for sim in sims {
        sim.stop();
    }
    result
}
