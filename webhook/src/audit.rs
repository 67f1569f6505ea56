//! The audit trail: one structured record per admission, emitted on the tracing target
//! [`AUDIT_TARGET`] and, when configured, appended as a JSON line to a file that rotates by
//! size. Writing the file happens on its own thread; a full queue drops the record for the
//! file (never for the log) and counts it, so a slow disk never slows admission.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, SystemTime};

use kube::core::Resource;
use kube::core::admission::{AdmissionRequest, Operation};
use serde::Serialize;

use crate::admission::{FieldViolation, Mode};

/// The tracing target of audit records (`RUST_LOG=audit=off` silences them on stdout).
pub const AUDIT_TARGET: &str = "audit";

/// The keys of `userInfo.extra` an audit record keeps: the identity of a ServiceAccount
/// token (its ID, the pod or node it is bound to). Other authenticators put other things there
/// (GKE, for one, a user assertion), which could be credentials: those are left out.
pub const AUDITED_USER_EXTRA: [&str; 5] = [
    "authentication.kubernetes.io/credential-id",
    "authentication.kubernetes.io/node-name",
    "authentication.kubernetes.io/node-uid",
    "authentication.kubernetes.io/pod-name",
    "authentication.kubernetes.io/pod-uid",
];

/// One admission decision.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditRecord {
    /// When the request arrived (RFC 3339, UTC).
    pub time: String,
    /// Which webhook answered (`mutate` or `validate`).
    pub webhook: &'static str,
    /// The AdmissionReview uid (correlates with the apiserver's audit log).
    pub uid: String,
    /// The requesting user.
    pub user: String,
    /// The requesting user's uid (a ServiceAccount's uid, for its tokens), when the
    /// authenticator gives one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_uid: String,
    /// What the authenticator said of the user beyond name and groups, only the keys of
    /// [`AUDITED_USER_EXTRA`] (which token, which pod).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub user_extra: BTreeMap<String, Vec<String>>,
    /// The user's groups.
    pub groups: Vec<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: &'static str,
    /// Kind of the admitted object.
    pub kind: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object (empty on CREATE with generateName).
    pub name: String,
    /// Whether the request was a dry run.
    pub dry_run: bool,
    /// The decision.
    pub allowed: bool,
    /// Every violated rule.
    pub violations: Vec<FieldViolation>,
    /// JSON pointers the defaults patch changed.
    pub patch_paths: Vec<String>,
    /// Warnings returned to the client.
    pub warnings: Vec<String>,
    /// Why the request could not be judged (malformed input, wrong kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Time spent in the handler, microseconds.
    pub latency_us: u64,
}

impl AuditRecord {
    /// An empty record for a request arriving at `now`.
    pub fn new(mode: Mode, now: SystemTime) -> Self {
        let time = jiff::Timestamp::try_from(now)
            .map(|t| t.to_string())
            .unwrap_or_default();
        Self {
            time,
            webhook: mode.as_str(),
            uid: String::new(),
            user: String::new(),
            user_uid: String::new(),
            user_extra: BTreeMap::new(),
            groups: Vec::new(),
            operation: "",
            kind: String::new(),
            namespace: String::new(),
            name: String::new(),
            dry_run: false,
            allowed: false,
            violations: Vec::new(),
            patch_paths: Vec::new(),
            warnings: Vec::new(),
            error: None,
            latency_us: 0,
        }
    }

    /// Takes the request's identity fields (the request is no longer needed: moving them
    /// instead of copying saves an allocation per field on every admission).
    pub fn take_from<T: Resource>(&mut self, req: AdmissionRequest<T>) {
        self.uid = req.uid;
        self.user = req.user_info.username.unwrap_or_default();
        self.user_uid = req.user_info.uid.unwrap_or_default();
        self.user_extra = req
            .user_info
            .extra
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| AUDITED_USER_EXTRA.contains(&k.as_str()))
            .collect();
        self.groups = req.user_info.groups.unwrap_or_default();
        self.operation = operation_name(&req.operation);
        self.kind = req.kind.kind;
        self.namespace = req.namespace.unwrap_or_default();
        self.name = req.name;
        self.dry_run = req.dry_run;
    }
}

impl AuditRecord {
    /// The record as one JSON object, byte for byte what `serde_json::to_string` gives (tested),
    /// without serde's per-type code on the request path.
    pub fn to_json(&self) -> String {
        use kim_shared::json::{write_bool, write_object, write_str, write_str_array};
        fn string(out: &mut Vec<u8>, key: &str, value: &str) {
            out.extend_from_slice(key.as_bytes());
            write_str(out, value);
        }
        fn strings(out: &mut Vec<u8>, key: &str, items: &[String]) {
            out.extend_from_slice(key.as_bytes());
            write_str_array(out, items);
        }
        let mut out = Vec::with_capacity(512);
        string(&mut out, "{\"time\":", &self.time);
        string(&mut out, ",\"webhook\":", self.webhook);
        string(&mut out, ",\"uid\":", &self.uid);
        string(&mut out, ",\"user\":", &self.user);
        if !self.user_uid.is_empty() {
            string(&mut out, ",\"user_uid\":", &self.user_uid);
        }
        if !self.user_extra.is_empty() {
            out.extend_from_slice(b",\"user_extra\":");
            write_object(&mut out, &self.user_extra, |out, v| write_str_array(out, v));
        }
        strings(&mut out, ",\"groups\":", &self.groups);
        string(&mut out, ",\"operation\":", self.operation);
        string(&mut out, ",\"kind\":", &self.kind);
        string(&mut out, ",\"namespace\":", &self.namespace);
        string(&mut out, ",\"name\":", &self.name);
        out.extend_from_slice(b",\"dry_run\":");
        write_bool(&mut out, self.dry_run);
        out.extend_from_slice(b",\"allowed\":");
        write_bool(&mut out, self.allowed);
        out.extend_from_slice(b",\"violations\":[");
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(&mut out, "{\"field\":", &v.field);
            string(&mut out, ",\"message\":", &v.message);
            out.push(b'}');
        }
        out.push(b']');
        strings(&mut out, ",\"patch_paths\":", &self.patch_paths);
        strings(&mut out, ",\"warnings\":", &self.warnings);
        if let Some(e) = &self.error {
            string(&mut out, ",\"error\":", e);
        }
        out.extend_from_slice(b",\"latency_us\":");
        let _ = std::io::Write::write_fmt(&mut out, format_args!("{}", self.latency_us));
        out.push(b'}');
        // Only UTF-8 went in (str slices and ASCII); the check keeps this free of `unsafe`.
        String::from_utf8(out).unwrap_or_default()
    }
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Where audit records go.
#[derive(Clone, Default)]
pub struct AuditSink {
    file: Option<(LineQueue, Arc<FlushGuard>)>,
    dropped: Arc<AtomicU64>,
}

impl AuditSink {
    /// Records go to the log only.
    pub fn log_only() -> Self {
        Self::default()
    }

    /// Records also go to `path`, rotated when it would exceed `max_bytes` (keeping `keep`
    /// old files `path.1` .. `path.<keep>`). The file is flushed when the last clone of the
    /// sink is dropped.
    pub fn with_file(path: PathBuf, max_bytes: u64, keep: usize) -> std::io::Result<Self> {
        let mut file = RotatingFile::open(path, max_bytes, keep)?;
        let (queue, guard) = spawn_line_writer("audit-file", move |batch: &[u8]| {
            for line in batch.split_inclusive(|b| *b == b'\n') {
                if let Err(e) = file.write_line(line) {
                    tracing::error!(error = %e, path = %file.path.display(), "writing the audit log file failed");
                }
            }
            if let Err(e) = file.flush() {
                tracing::error!(error = %e, path = %file.path.display(), "flushing the audit log file failed");
            }
        })?;
        Ok(Self {
            file: Some((queue, Arc::new(guard))),
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Records dropped from the file because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Emits one record: serialized once, then to the log (an event on [`AUDIT_TARGET`]
    /// carrying the JSON in the field [`RECORD_FIELD`], written as is by [`AuditLogLayer`]) and
    /// to the file.
    pub fn emit(&self, r: &AuditRecord) {
        let log = tracing::enabled!(target: AUDIT_TARGET, tracing::Level::INFO);
        if !log && self.file.is_none() {
            return;
        }
        let json = r.to_json();
        if log {
            tracing::info!(target: AUDIT_TARGET, record = json.as_str());
        }
        if let Some((queue, _)) = &self.file {
            let queued = queue.push_with(json.len() + 1, |buf| {
                buf.extend_from_slice(json.as_bytes());
                buf.push(b'\n');
            });
            if !queued {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Audit records the log writer (stdout) dropped because it fell behind, in this process.
static LOG_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Audit records not written to the log (stdout) because its writer fell behind
/// (`kim_webhook_audit_log_dropped_records`).
pub fn log_dropped() -> u64 {
    LOG_DROPPED.load(Ordering::Relaxed)
}

/// The field of audit events that carries the serialized record.
pub const RECORD_FIELD: &str = "record";

/// A tracing layer that writes audit events as one JSON line each, the record's own fields
/// after `level` and `target`: `{"level":"INFO","target":"audit","time":...,"uid":...}`.
/// Writing happens on a thread of its own, in batches, so the request path only appends to a
/// buffer. (tracing's JSON formatter cost about a quarter of a validating request's CPU, and
/// waking a writer thread per record another fifth.)
pub struct AuditLogLayer {
    queue: LineQueue,
}

impl AuditLogLayer {
    /// A layer writing to `out` (stdout in production), and the guard that flushes what is
    /// queued when dropped (hold it until the program ends).
    pub fn new(mut out: impl Write + Send + 'static) -> std::io::Result<(Self, FlushGuard)> {
        let (queue, guard) = spawn_line_writer("audit-log", move |batch: &[u8]| {
            // The log is best effort: a closed stdout must not stop admission.
            let _ = out.write_all(batch);
            let _ = out.flush();
        })?;
        Ok((Self { queue }, guard))
    }
}

/// Appends a serialized record to the log queue as one log line; a full queue drops it
/// rather than slowing admission down, and counts it.
fn queue_log_line(queue: &LineQueue, record: &str) {
    const PREFIX: &[u8] = b"{\"level\":\"INFO\",\"target\":\"audit\",";
    let body = record.strip_prefix('{').unwrap_or(record);
    let queued = queue.push_with(PREFIX.len() + body.len() + 1, |buf| {
        buf.extend_from_slice(PREFIX);
        buf.extend_from_slice(body.as_bytes());
        buf.push(b'\n');
    });
    if !queued {
        LOG_DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Appends the `record` field of an audit event to the queue as one log line.
struct RecordVisitor<'a> {
    queue: &'a LineQueue,
}

impl tracing::field::Visit for RecordVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() != RECORD_FIELD {
            return;
        }
        queue_log_line(self.queue, value);
    }
    fn record_debug(&mut self, _field: &tracing::field::Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AuditLogLayer {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if event.metadata().target() != AUDIT_TARGET {
            return;
        }
        event.record(&mut RecordVisitor { queue: &self.queue });
    }
}

/// How long the writer thread lets lines gather after the first one of a batch arrives: one
/// wake-up and one write per batch instead of per record (under load a batch holds tens of
/// records; an idle webhook writes a record within this delay and never wakes otherwise).
const BATCH_LINGER: Duration = Duration::from_millis(10);

/// Bytes a queue holds at most before it drops lines (a few thousand records).
const QUEUE_MAX_BYTES: usize = 4 << 20;

#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    closed: bool,
}

#[derive(Default)]
struct QueueShared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

/// The sending side of a batching line writer: appending is a short lock and a copy; the
/// writer thread is woken only by the first line of a batch.
#[derive(Clone)]
pub struct LineQueue {
    shared: Arc<QueueShared>,
}

impl LineQueue {
    /// Appends `len` bytes written by `fill`; false (and nothing appended) when the queue is
    /// full or closed.
    fn push_with(&self, len: usize, fill: impl FnOnce(&mut Vec<u8>)) -> bool {
        let was_empty = {
            let Ok(mut p) = self.shared.pending.lock() else {
                return false;
            };
            if p.closed || p.buf.len() + len > QUEUE_MAX_BYTES {
                return false;
            }
            let was_empty = p.buf.is_empty();
            fill(&mut p.buf);
            was_empty
        };
        if was_empty {
            self.shared.wake.notify_one();
        }
        true
    }
}

/// Flushes the queued lines and stops the writer thread when dropped.
pub struct FlushGuard {
    shared: Arc<QueueShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.closed = true;
        }
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a thread named `name` that hands batches of queued lines to `write`.
fn spawn_line_writer(
    name: &str,
    mut write: impl FnMut(&[u8]) + Send + 'static,
) -> std::io::Result<(LineQueue, FlushGuard)> {
    let shared = Arc::new(QueueShared::default());
    let worker = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut batch = Vec::new();
            loop {
                let closed = {
                    let Ok(mut p) = worker.pending.lock() else {
                        return;
                    };
                    while p.buf.is_empty() && !p.closed {
                        p = match worker.wake.wait(p) {
                            Ok(p) => p,
                            Err(_) => return,
                        };
                    }
                    p.closed
                };
                if !closed {
                    std::thread::sleep(BATCH_LINGER);
                }
                let closed = {
                    let Ok(mut p) = worker.pending.lock() else {
                        return;
                    };
                    std::mem::swap(&mut p.buf, &mut batch);
                    p.closed
                };
                if !batch.is_empty() {
                    write(&batch);
                }
                batch.clear();
                // A burst must not pin its memory for good.
                batch.shrink_to(QUEUE_MAX_BYTES / 16);
                if closed {
                    let empty = worker.pending.lock().map(|p| p.buf.is_empty());
                    if empty.unwrap_or(true) {
                        return;
                    }
                }
            }
        })?;
    Ok((
        LineQueue {
            shared: Arc::clone(&shared),
        },
        FlushGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

/// An append-only file that is rotated by size.
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    size: u64,
    out: BufWriter<File>,
}

impl RotatingFile {
    /// Opens (appending to) `path`.
    pub fn open(path: PathBuf, max_bytes: u64, keep: usize) -> std::io::Result<Self> {
        let f = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = f.metadata()?.len();
        Ok(Self {
            path,
            max_bytes: max_bytes.max(1024),
            keep,
            size,
            out: BufWriter::new(f),
        })
    }

    /// Appends one line, rotating first if it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// Flushes buffered lines.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn rotated(path: &Path, n: usize) -> PathBuf {
        let mut s = path.as_os_str().to_owned();
        s.push(format!(".{n}"));
        PathBuf::from(s)
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        if self.keep == 0 {
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&self.path)?;
            self.out = BufWriter::new(f);
            self.size = 0;
            return Ok(());
        }
        for n in (1..self.keep).rev() {
            let from = Self::rotated(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, Self::rotated(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, Self::rotated(&self.path, 1))?;
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.out = BufWriter::new(f);
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_json_writes_what_serde_writes() {
        let texts = [
            "",
            "a",
            "quote \" back \\ nl \n ctl \u{1} é 🦀",
            "system:serviceaccount:x:y",
        ];
        let seed = std::cell::Cell::new(7u64);
        let pick = |n: usize| {
            let x = seed
                .get()
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed.set(x);
            usize::try_from(x >> 33).unwrap_or(0) % n
        };
        let text = || texts[pick(texts.len())].to_string();
        for case in 0..300 {
            let mut r = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
            r.webhook = ["validate", "mutate"][case % 2];
            r.uid = text();
            r.user = text();
            r.user_uid = text();
            r.user_extra = (0..pick(3))
                .map(|_| (text(), (0..pick(3)).map(|_| text()).collect()))
                .collect();
            r.groups = (0..pick(3)).map(|_| text()).collect();
            r.operation = ["CREATE", "", "DELETE"][case % 3];
            r.kind = text();
            r.namespace = text();
            r.name = text();
            r.dry_run = case % 4 == 1;
            r.allowed = case % 5 == 2;
            r.violations = (0..pick(3))
                .map(|_| FieldViolation {
                    field: text(),
                    message: text(),
                })
                .collect();
            r.patch_paths = (0..pick(3)).map(|_| text()).collect();
            r.warnings = (0..pick(3)).map(|_| text()).collect();
            r.error = (case % 3 == 0).then(text);
            r.latency_us = [0, 7, 1234567, u64::MAX][case % 4];
            let want = serde_json::to_string(&r).expect("json");
            assert_eq!(r.to_json(), want, "case {case}");
        }
    }

    #[test]
    fn rotates_by_size_and_keeps_n_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile::open(path.clone(), 1024, 2).expect("open");
        let line = [b'x'; 300];
        let mut line = line.to_vec();
        line.push(b'\n');
        for _ in 0..20 {
            f.write_line(&line).expect("write");
        }
        f.flush().expect("flush");
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        assert!(size(&path) <= 1024 && size(&path) > 0);
        assert!(size(&RotatingFile::rotated(&path, 1)) > 0);
        assert!(size(&RotatingFile::rotated(&path, 2)) > 0);
        assert!(
            !RotatingFile::rotated(&path, 3).exists(),
            "only `keep` old files"
        );
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A writer that, once `blocked` is set, signals it and waits until it is cleared (a
    /// stalled stdout).
    #[derive(Clone, Default)]
    struct Stalling {
        out: Shared,
        state: Arc<(std::sync::Mutex<(bool, bool)>, Condvar)>,
    }
    impl Write for Stalling {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let (lock, cv) = &*self.state;
            let mut st = lock.lock().map_err(|_| std::io::Error::other("poisoned"))?;
            // (stall requested, writer is stalled)
            while st.0 {
                st.1 = true;
                cv.notify_all();
                st = cv.wait(st).map_err(|_| std::io::Error::other("poisoned"))?;
            }
            st.1 = false;
            drop(st);
            self.out.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The log layer's queue (what its visitor calls for each audit event; the tracing path
    /// itself is the test below), with stdout stalled.
    #[test]
    fn a_stalled_log_drops_records_and_counts_each() {
        let out = Stalling::default();
        *out.state.0.lock().expect("lock") = (true, false);
        let (layer, guard) = AuditLogLayer::new(out.clone()).expect("layer");
        let mut r = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
        r.uid = "x".repeat(1000);
        let record = r.to_json();
        let line_len = 33 + record.len();
        let fit = QUEUE_MAX_BYTES / line_len;
        let sent = fit + 25;
        // The first record takes the writer into the stalled write.
        queue_log_line(&layer.queue, &record);
        {
            let (lock, cv) = &*out.state;
            let mut st = lock.lock().expect("lock");
            while !st.1 {
                st = cv.wait(st).expect("wait");
            }
        }
        let before = log_dropped();
        for _ in 0..sent {
            queue_log_line(&layer.queue, &record);
        }
        let dropped = log_dropped() - before;
        // Unstalled before any assertion: a failing one must fail, not hang on the writer.
        *out.state.0.lock().expect("lock") = (false, false);
        out.state.1.notify_all();
        drop(layer);
        drop(guard);
        assert_eq!(dropped, (sent - fit) as u64);
        // Everything that was queued is written.
        let text = String::from_utf8_lossy(&out.out.0.lock().expect("lock")).into_owned();
        assert_eq!(text.lines().count(), 1 + fit, "lines written");
        assert!(
            text.lines()
                .all(|l| l.starts_with("{\"level\":\"INFO\",\"target\":\"audit\",\"time\":"))
        );
    }

    #[test]
    fn log_layer_writes_the_record_as_one_json_line_on_the_audit_target() {
        use tracing_subscriber::layer::SubscriberExt;
        let out = Shared::default();
        let (layer, guard) = AuditLogLayer::new(out.clone()).expect("layer");
        let subscriber = tracing_subscriber::registry().with(layer);
        let mut r = AuditRecord::new(Mode::Mutate, SystemTime::UNIX_EPOCH);
        r.uid = "u9".into();
        r.patch_paths.push("/spec/x".into());
        tracing::subscriber::with_default(subscriber, || {
            AuditSink::log_only().emit(&r);
            tracing::info!("an ordinary log line is not an audit record");
        });
        // Dropping the guard writes what is still queued (shutdown loses no record).
        drop(guard);
        let text = String::from_utf8_lossy(&out.0.lock().expect("lock")).into_owned();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert_eq!(lines[0]["target"], "audit");
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(lines[0]["uid"], "u9");
        assert_eq!(lines[0]["webhook"], "mutate");
        assert_eq!(lines[0]["patch_paths"][0], "/spec/x");
    }

    #[test]
    fn sink_writes_one_json_line_per_record() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.log");
        let sink = AuditSink::with_file(path.clone(), 1 << 20, 1).expect("sink");
        let mut r = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
        r.uid = "u1".into();
        r.violations.push(FieldViolation {
            field: "spec.x".into(),
            message: "bad".into(),
        });
        sink.emit(&r);
        r.uid = "u2".into();
        sink.emit(&r);
        drop(sink);
        let mut text = String::new();
        for _ in 0..100 {
            text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.lines().count() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["uid"], "u1");
        assert_eq!(lines[0]["time"], "1970-01-01T00:00:00Z");
        assert_eq!(lines[0]["violations"][0]["field"], "spec.x");
        assert_eq!(lines[1]["uid"], "u2");
    }

    #[test]
    fn a_burst_from_several_threads_arrives_whole_in_batches() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.log");
        let sink = AuditSink::with_file(path.clone(), 64 << 20, 1).expect("sink");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let mut r = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
                        r.uid = format!("{t}-{i}");
                        sink.emit(&r);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("emitter");
        }
        assert_eq!(sink.dropped(), 0);
        // The last clone flushes on drop: no waiting needed.
        drop(sink);
        let text = std::fs::read_to_string(&path).expect("audit file");
        let mut uids: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
                v["uid"].as_str().expect("uid").to_string()
            })
            .collect();
        assert_eq!(uids.len(), 2000);
        uids.sort();
        uids.dedup();
        assert_eq!(uids.len(), 2000, "every record exactly once");
    }
}
