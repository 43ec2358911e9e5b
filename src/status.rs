//! `kubefold status`: the fleet at a glance in kubectl's table style, once or
//! redrawn (`--watch`): each member with its phase, synced types, objects
//! and lag; the store's head and compacted resourceVersions; the
//! scheduler-estimator endpoints. It reads the admin API, so it needs a
//! credential of `kubefold:admins` where authentication is on.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Args;

use crate::admin_cli::{estimators_table, stats_table, table, AdminApi, ClusterList, Connection, EstimatorRow, Stats};

/// Flags of `kubefold status`.
#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    connection: Connection,
    /// Redraw the status every `--interval` until interrupted.
    #[arg(long, short = 'w')]
    watch: bool,
    /// Seconds between two redraws with `--watch`.
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    interval: f64,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!("{text:?} is not a positive number of seconds")),
    }
}

/// Runs `kubefold status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let api = AdminApi::new(&args.connection)?;
    let mut stdout = std::io::stdout().lock();
    if !args.watch {
        write!(stdout, "{}", render(&api)?)?;
        return Ok(stdout.flush()?);
    }
    let terminal = std::io::stdout().is_terminal();
    loop {
        // A failed read is shown and retried: kubefold may be restarting.
        let frame = render(&api).unwrap_or_else(|e| format!("error: {e:#}\n"));
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
        if terminal {
            // Home and clear, as watch(1) redraws.
            write!(stdout, "\x1b[H\x1b[2J")?;
        }
        write!(stdout, "Every {}s: kubefold status    {now}\n\n{frame}", args.interval)?;
        if !terminal {
            writeln!(stdout)?;
        }
        stdout.flush()?;
        std::thread::sleep(Duration::from_secs_f64(args.interval));
    }
}

/// One status page: members, store, estimators.
fn render(api: &AdminApi) -> anyhow::Result<String> {
    let clusters: ClusterList = api.get(&["clusters"])?;
    let stats: Stats = api.get(&["stats"])?;
    let estimators: Vec<EstimatorRow> = api.get(&["estimators"])?;
    let mut out = members_table(&clusters);
    out.push('\n');
    out.push_str(&stats_table(&stats));
    if !estimators.is_empty() {
        out.push('\n');
        out.push_str(&estimators_table(&estimators));
    }
    Ok(out)
}

fn members_table(list: &ClusterList) -> String {
    let rows: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|c| {
            let resources = &c.status.resources;
            let synced = resources.values().filter(|w| w.state == "synced").count();
            let objects: u64 = resources.values().map(|w| w.objects).sum();
            vec![
                c.spec.name.clone(),
                c.status.phase.clone(),
                format!("{synced}/{}", resources.len()),
                objects.to_string(),
                human_duration(Duration::from_secs_f64(c.status.lag_seconds.max(0.0))),
                c.status.relists.to_string(),
                c.status.last_error.clone().unwrap_or_else(|| "<none>".to_string()),
            ]
        })
        .collect();
    table(&["MEMBER", "PHASE", "SYNCED", "OBJECTS", "LAG", "RELISTS", "LAST-ERROR"], &rows)
}

/// A duration as kubectl prints ages: `0s`, `45s`, `3m12s`, `2h5m`, `3d4h`.
fn human_duration(duration: Duration) -> String {
    let s = duration.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_kubectl_ages() {
        let d = Duration::from_secs;
        assert_eq!(human_duration(d(0)), "0s");
        assert_eq!(human_duration(d(59)), "59s");
        assert_eq!(human_duration(d(192)), "3m12s");
        assert_eq!(human_duration(d(7500)), "2h5m");
        assert_eq!(human_duration(d(273_600)), "3d4h");
    }

    #[test]
    fn members_show_synced_types_objects_and_lag() {
        let list: ClusterList = serde_json::from_value(serde_json::json!({"items": [
            {"spec": {"name": "member1"}, "source": "config", "status": {"phase": "Synced", "lastError": null, "reconnects": 1, "relists": 2, "lagSeconds": 0.0,
                "resources": {"v1/pods": {"objects": 10, "state": "synced"}, "v1/nodes": {"objects": 2, "state": "synced"}}}},
            {"spec": {"name": "member2"}, "source": "api", "status": {"phase": "Stale", "lastError": "connection refused", "reconnects": 3, "relists": 1, "lagSeconds": 75.2,
                "resources": {"v1/pods": {"objects": 4, "state": "stale"}, "v1/nodes": {"objects": 1, "state": "synced"}}}}
        ]}))
        .unwrap();
        let text = members_table(&list);
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["MEMBER", "PHASE", "SYNCED", "OBJECTS", "LAG", "RELISTS", "LAST-ERROR"]);
        assert_eq!(lines[1], ["member1", "Synced", "2/2", "12", "0s", "2", "<none>"]);
        assert_eq!(lines[2], ["member2", "Stale", "1/2", "5", "1m15s", "1", "connection", "refused"]);
    }

    #[test]
    fn the_interval_is_a_positive_number_of_seconds() {
        assert_eq!(positive_seconds("0.5"), Ok(0.5));
        assert!(positive_seconds("0").is_err());
        assert!(positive_seconds("-1").is_err());
        assert!(positive_seconds("soon").is_err());
    }
}
