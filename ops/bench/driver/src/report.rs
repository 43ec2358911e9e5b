//! Figures with their references and ratios: the printed table and the JSON
//! file (`ops/bench/results/latest.json`).

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};

use crate::Ctx;

/// One measured figure and what it is compared with.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// ingest, list, get, watch, restart, memory, disk.
    pub section: String,
    /// What was measured.
    pub name: String,
    /// Pods in the fleet when it was measured.
    pub objects: Option<usize>,
    /// Unit of `kubefold` and `reference_value`.
    pub unit: String,
    /// kubefold's value.
    pub kubefold: f64,
    /// What it is compared with.
    pub reference: Option<String>,
    /// The reference's value, measured in the same run.
    pub reference_value: Option<f64>,
    /// kubefold / reference.
    pub ratio: Option<f64>,
    /// The target of issue 8, when one applies.
    pub target: Option<String>,
    /// Whether the target was met.
    pub met: Option<bool>,
    /// Anything needed to read the figure.
    pub note: Option<String>,
}

impl Figure {
    /// A figure without reference or target.
    pub fn new(section: &str, name: &str, objects: Option<usize>, unit: &str, kubefold: f64) -> Figure {
        Figure {
            section: section.into(),
            name: name.into(),
            objects,
            unit: unit.into(),
            kubefold,
            reference: None,
            reference_value: None,
            ratio: None,
            target: None,
            met: None,
            note: None,
        }
    }

    /// Compared with `value` of `what`.
    pub fn reference(mut self, what: &str, value: f64) -> Figure {
        self.reference = Some(what.into());
        self.reference_value = Some(value);
        self.ratio = (value != 0.0 && value.is_finite()).then(|| self.kubefold / value);
        self
    }

    /// With a target and whether it was met.
    pub fn target(mut self, text: &str, met: bool) -> Figure {
        self.target = Some(text.into());
        self.met = Some(met);
        self
    }

    /// With a note.
    pub fn note(mut self, text: impl Into<String>) -> Figure {
        self.note = Some(text.into());
        self
    }

    /// With `text` added to its note.
    pub fn note_more(mut self, text: &str) -> Figure {
        self.note = Some(match self.note.take() {
            Some(note) => format!("{note}; {text}"),
            None => text.to_string(),
        });
        self
    }
}

/// The whole report.
pub struct Report {
    /// Phases that failed (the driver then exits non-zero; missed targets never do).
    pub failures: usize,
    doc: serde_json::Map<String, Value>,
    figures: Vec<Figure>,
    notes: Vec<String>,
    raw: serde_json::Map<String, Value>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The machine: CPU model, cores, memory, kernel, load.
pub fn machine() -> Value {
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).unwrap_or("").trim().to_string();
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    json!({
        "cpuModel": model,
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memoryGiB": (mem_kb as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "loadAverageAtStart": read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    })
}

fn now_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Report {
    /// An empty report for this run.
    pub fn new(ctx: &Ctx, command: &str) -> Report {
        let mut doc = serde_json::Map::new();
        doc.insert("startedAt".into(), json!(now_utc()));
        doc.insert("command".into(), json!(command));
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        doc.insert("commit".into(), json!(git(&["rev-parse", "--short", "HEAD"])));
        doc.insert(
            "uncommittedFiles".into(),
            json!(git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| s.lines().count())),
        );
        doc.insert("mode".into(), json!(if ctx.plan.quick { "quick" } else { "full" }));
        doc.insert("machine".into(), machine());
        doc.insert("plan".into(), serde_json::to_value(&ctx.plan).unwrap_or(Value::Null));
        Report { failures: 0, doc, figures: Vec::new(), notes: Vec::new(), raw: serde_json::Map::new() }
    }

    /// Adds a figure (and prints it as it comes).
    pub fn add(&mut self, figure: Figure) {
        eprintln!("  {}", row(&figure));
        self.figures.push(figure);
    }

    /// Keeps raw measurements under `key`.
    pub fn raw(&mut self, key: &str, value: Value) {
        self.raw.insert(key.into(), value);
    }

    /// Adds a note (skipped phases, anomalies).
    pub fn note(&mut self, text: impl Into<String>) {
        let text = text.into();
        eprintln!("  note: {text}");
        self.notes.push(text);
    }

    /// Stamps the end of the run.
    pub fn finish(&mut self, ctx: &Ctx) {
        self.doc.insert("finishedAt".into(), json!(now_utc()));
        self.doc.insert("elapsedSeconds".into(), json!((ctx.started.elapsed().as_secs_f64() * 10.0).round() / 10.0));
        self.doc.insert("loadAverageAtEnd".into(), json!(read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" ")));
    }

    fn document(&self) -> Value {
        let mut doc = self.doc.clone();
        doc.insert("figures".into(), serde_json::to_value(&self.figures).unwrap_or(Value::Null));
        let met = self.figures.iter().filter(|f| f.met == Some(true)).count();
        let missed: Vec<String> = self
            .figures
            .iter()
            .filter(|f| f.met == Some(false))
            .map(|f| format!("{} @ {} pods", f.name, f.objects.map_or("-".into(), |n| n.to_string())))
            .collect();
        doc.insert("targets".into(), json!({"met": met, "missed": missed}));
        doc.insert("notes".into(), json!(self.notes));
        doc.insert("failedPhases".into(), json!(self.failures));
        doc.insert("raw".into(), Value::Object(self.raw.clone()));
        Value::Object(doc)
    }

    /// Writes the JSON file (also after each phase, so a stopped run leaves its figures).
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_vec_pretty(&self.document())?)?;
        Ok(())
    }

    /// Prints the table.
    pub fn print(&self) {
        println!();
        println!("kubefold benchmark ({}), {}", self.doc.get("mode").and_then(Value::as_str).unwrap_or(""), self.doc.get("machine").map(|m| m.to_string()).unwrap_or_default());
        println!("{}", header());
        println!("{}", "-".repeat(header().len()));
        for f in &self.figures {
            println!("{}", row(f));
        }
        let met = self.figures.iter().filter(|f| f.met == Some(true)).count();
        let missed = self.figures.iter().filter(|f| f.met == Some(false)).count();
        println!("\ntargets met: {met}, missed: {missed}");
        for n in &self.notes {
            println!("note: {n}");
        }
    }
}

/// A number in a short form.
pub fn fmt(v: f64) -> String {
    if v.is_infinite() {
        return "inf".into();
    }
    if v.is_nan() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn header() -> String {
    format!(
        "{:<44} {:>7} {:>9} {:>10} {:<30} {:>9} {:>6}  {:<18} {}",
        "figure", "pods", "kubefold", "unit", "reference", "ref", "ratio", "target", "met"
    )
}

fn row(f: &Figure) -> String {
    let objects = f.objects.map_or("-".into(), |n| if n >= 1000 { format!("{}k", n / 1000) } else { n.to_string() });
    format!(
        "{:<44} {:>7} {:>9} {:>10} {:<30} {:>9} {:>6}  {:<18} {}",
        f.name,
        objects,
        fmt(f.kubefold),
        f.unit,
        f.reference.as_deref().unwrap_or("-"),
        f.reference_value.map_or("-".into(), fmt),
        f.ratio.map_or("-".into(), |r| format!("{r:.2}x")),
        f.target.as_deref().unwrap_or("-"),
        match f.met {
            Some(true) => "yes",
            Some(false) => "MISSED",
            None => "",
        }
    )
}
