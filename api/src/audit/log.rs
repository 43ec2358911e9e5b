//! The audit log file: one JSON event per line, rotated by size as
//! kube-apiserver's (`--audit-log-maxsize`, `--audit-log-maxbackup`), and
//! what is taken out of objects before they are written.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

/// The open audit log. Writes are serialised by a mutex; each event is one
/// `write` of a whole line.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    /// Bytes before the file is rotated; 0: never.
    max_bytes: u64,
    /// Rotated files kept; 0: all.
    max_backups: usize,
    file: Mutex<(File, u64)>,
}

impl LogFile {
    /// Opens (appending to) `path`, `-` for standard output is not supported:
    /// the log is a file.
    pub fn open(path: &Path, max_megabytes: u64, max_backups: usize) -> std::io::Result<LogFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(LogFile { path: path.into(), max_bytes: max_megabytes.saturating_mul(1 << 20), max_backups, file: Mutex::new((file, size)) })
    }

    /// Appends one line (the event and a newline), rotating first when the
    /// file would grow past its size.
    pub fn append(&self, event: &Value) {
        let mut line = event.to_string().into_bytes();
        line.push(b'\n');
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if self.max_bytes > 0 && guard.1 > 0 && guard.1 + line.len() as u64 > self.max_bytes {
            match self.rotate() {
                Ok(file) => *guard = (file, 0),
                Err(error) => tracing::warn!(path = %self.path.display(), %error, "Cannot rotate the audit log."),
            }
        }
        match guard.0.write_all(&line) {
            Ok(()) => guard.1 += line.len() as u64,
            Err(error) => {
                metrics::counter!("kubefold_audit_event_errors_total").increment(1);
                tracing::warn!(path = %self.path.display(), %error, "Cannot write to the audit log.");
            }
        }
    }

    /// Renames the current file to `NAME-TIMESTAMP.EXT` (as kube-apiserver's
    /// rotation names it), removes the oldest backups beyond the limit and
    /// opens a new file.
    fn rotate(&self) -> std::io::Result<File> {
        let (stem, ext) = self.name_parts();
        let stamp = chrono::Utc::now().format("%Y-%m-%dT%H-%M-%S%.3f");
        let backup = self.path.with_file_name(format!("{stem}-{stamp}{ext}"));
        std::fs::rename(&self.path, &backup)?;
        if self.max_backups > 0 {
            let mut backups = self.backups()?;
            backups.sort();
            let excess = backups.len().saturating_sub(self.max_backups);
            for old in &backups[..excess] {
                let _ = std::fs::remove_file(old);
            }
        }
        open_append(&self.path)
    }

    fn name_parts(&self) -> (String, String) {
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match name.rfind('.').filter(|&i| i > 0) {
            Some(i) => (name[..i].to_string(), name[i..].to_string()),
            None => (name, String::new()),
        }
    }

    /// The rotated files of this log.
    pub fn backups(&self) -> std::io::Result<Vec<PathBuf>> {
        let (stem, ext) = self.name_parts();
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let prefix = format!("{stem}-");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name.ends_with(&ext) && name.len() == prefix.len() + "2006-01-02T15-04-05.000".len() + ext.len() {
                found.push(dir.join(name));
            }
        }
        Ok(found)
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// The annotation `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Takes out of an object to be written what must never be: the contents
/// of Secrets (`data`, `stringData`, the last applied configuration),
/// token reviews' tokens and token requests' tokens, in lists too.
/// `resource` is the request's resource, for bodies without a kind (a
/// patch of a Secret, which then keeps nothing but its shape's keys).
pub fn redact(object: &mut Value, resource: &str) {
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            redact(item, resource);
        }
    }
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    match kind.as_str() {
        "Secret" => redact_secret(object),
        "TokenReview" => {
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("token");
            }
        }
        "TokenRequest" => {
            if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
                status.remove("token");
            }
        }
        "" | "Patch" if resource == "secrets" => match object {
            Value::Object(_) => redact_secret(object),
            // A JSON patch: its values may be the data.
            Value::Array(operations) => {
                for operation in operations.iter_mut().filter_map(Value::as_object_mut) {
                    operation.remove("value");
                }
            }
            _ => *object = Value::Null,
        },
        _ => {}
    }
}

fn redact_secret(object: &mut Value) {
    let Some(fields) = object.as_object_mut() else { return };
    fields.remove("data");
    fields.remove("stringData");
    if let Some(annotations) = fields.get_mut("metadata").and_then(|m| m.get_mut("annotations")).and_then(Value::as_object_mut) {
        annotations.remove(LAST_APPLIED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_contents_and_tokens_are_taken_out() {
        let mut secret = json!({"kind": "Secret", "metadata": {"name": "s", "annotations": {LAST_APPLIED: "{\"data\":{\"k\":\"c2VjcmV0\"}}", "keep": "1"}}, "data": {"k": "c2VjcmV0"}, "stringData": {"k": "secret"}, "type": "Opaque"});
        redact(&mut secret, "secrets");
        assert_eq!(secret, json!({"kind": "Secret", "metadata": {"name": "s", "annotations": {"keep": "1"}}, "type": "Opaque"}));
        let mut list = json!({"kind": "SecretList", "items": [{"kind": "Secret", "data": {"a": "b"}}]});
        redact(&mut list, "secrets");
        assert!(!list.to_string().contains("\"b\""));
        let mut patch = json!([{"op": "replace", "path": "/data/k", "value": "c2VjcmV0"}]);
        redact(&mut patch, "secrets");
        assert_eq!(patch, json!([{"op": "replace", "path": "/data/k"}]));
        let mut merge = json!({"data": {"k": "c2VjcmV0"}});
        redact(&mut merge, "secrets");
        assert_eq!(merge, json!({}));
        let mut review = json!({"kind": "TokenReview", "spec": {"token": "abc", "audiences": []}});
        redact(&mut review, "tokenreviews");
        assert_eq!(review, json!({"kind": "TokenReview", "spec": {"audiences": []}}));
        let mut config = json!({"kind": "ConfigMap", "data": {"k": "v"}});
        redact(&mut config, "configmaps");
        assert_eq!(config["data"]["k"], "v");
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_its_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = LogFile { max_bytes: 300, ..LogFile::open(&path, 0, 2).unwrap() };
        for i in 0..40 {
            log.append(&json!({"n": i, "pad": "x".repeat(40)}));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let backups = log.backups().unwrap();
        assert_eq!(backups.len(), 2, "{backups:?}");
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(current.len() <= 300 && current.ends_with("\"n\":39,\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}\n"), "{current}");
        for line in current.lines() {
            serde_json::from_str::<Value>(line).unwrap();
        }
    }
}
