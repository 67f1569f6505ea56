//! The audit trail: one structured record per admission, emitted on the tracing target
//! [`AUDIT_TARGET`] (one JSON line on stdout) and, when configured, appended as a JSON line to a
//! file that rotates by size. Both copies are written by tracing-appender's non-blocking
//! writer on a thread of its own: a writer that falls [`BUFFERED_RECORDS`] records behind
//! drops new ones (counted) rather than slowing admission down.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use file_rotate::compression::Compression;
use file_rotate::suffix::AppendCount;
use file_rotate::{ContentLimit, FileRotate};
use kim_shared::validation::Violation;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};

use crate::request::{Mode, Request, operation_name};

/// The tracing target of audit records (`RUST_LOG=audit=off` silences them on stdout).
pub const AUDIT_TARGET: &str = "audit";

/// Records a writer holds at most before it drops new ones. The queue counts records, not
/// bytes: with records of at most [`Bounds::LINE`] bytes, the two writers hold at most 56 MiB
/// of forged reviews' records (the pod's limit is 128 MiB); typical records are 0.5 KiB, so
/// that is 2 MiB and half a second of a stalled stdout or disk at 4,000 reviews/s.
pub const BUFFERED_RECORDS: usize = 2048;

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
    /// The AdmissionReview uid (the apiserver's audit log names it: `review-uid`).
    #[serde(serialize_with = "identity")]
    pub uid: String,
    /// The requesting user.
    #[serde(serialize_with = "identity")]
    pub user: String,
    /// The requesting user's uid (a ServiceAccount's uid, for its tokens), when the
    /// authenticator gives one.
    #[serde(skip_serializing_if = "String::is_empty", serialize_with = "identity")]
    pub user_uid: String,
    /// What the authenticator said of the user beyond name and groups, only the keys of
    /// [`AUDITED_USER_EXTRA`] (which token, which pod).
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "user_extra"
    )]
    pub user_extra: BTreeMap<String, Vec<String>>,
    /// The user's groups.
    #[serde(serialize_with = "groups")]
    pub groups: Vec<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: &'static str,
    /// Kind of the admitted object (as the review says: a forged one may say anything).
    #[serde(serialize_with = "identity")]
    pub kind: String,
    /// Namespace of the object.
    #[serde(serialize_with = "identity")]
    pub namespace: String,
    /// Name of the object (empty on CREATE with generateName).
    #[serde(serialize_with = "identity")]
    pub name: String,
    /// Whether the request was a dry run.
    pub dry_run: bool,
    /// The decision.
    pub allowed: bool,
    /// Every violated rule, as `{"field": ..., "message": ...}` (bounded: [`Bounds`]).
    #[serde(serialize_with = "violations")]
    pub violations: Vec<Violation>,
    /// JSON pointers the defaults patch changed (bounded).
    #[serde(serialize_with = "patch_paths")]
    pub patch_paths: Vec<String>,
    /// Warnings returned to the client (bounded).
    #[serde(serialize_with = "warnings")]
    pub warnings: Vec<String>,
    /// Why the request could not be judged (malformed input, wrong kind; bounded).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "error")]
    pub error: Option<String>,
    /// The TCP peer that sent the review (`ip:port`). Any pod that reaches the port can post a
    /// review in a user's name; the peer tells the apiserver's records from such forgeries.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer: String,
    /// Whether the peer presented a TLS client certificate (the apiserver does when it is
    /// configured with one for this webhook).
    pub client_certificate: bool,
    /// Microseconds from the request's arrival (its headers read) to its answer: reading the
    /// body and waiting for a turn count too. Above the webhook's `timeoutSeconds`, the
    /// apiserver had given up on the answer.
    pub latency_us: u64,
}

/// A record's parts that come from the request (messages quote values, paths name map keys,
/// and anyone who reaches the port can post a review with any identity) are bounded, so a
/// record stays one line of a few KiB whatever the request holds: container runtimes split log
/// lines over 16 KiB, and the writers' queues count records, not bytes. The response to the
/// apiserver keeps everything.
struct Bounds;

impl Bounds {
    /// Violations kept; the rest are counted in a last entry.
    const VIOLATIONS: usize = 16;
    /// Bytes kept of a violation's field path and message.
    const FIELD: usize = 128;
    const MESSAGE: usize = 256;
    const WARNINGS: usize = 8;
    const WARNING: usize = 256;
    const PATHS: usize = 16;
    const PATH: usize = 128;
    const ERROR: usize = 512;
    /// Bytes kept of the uid, user, user uid, kind, namespace, name and each group.
    const IDENTITY: usize = 256;
    const GROUPS: usize = 16;
    /// The same in a record too large to keep whole ([`AuditRecord::to_json`]): 7 identity
    /// fields and 4 groups of 64 bytes stay under 8 KiB even when escaping makes each byte six.
    const SHORT_IDENTITY: usize = 64;
    const SHORT_GROUPS: usize = 4;
    /// A record longer than this (escaping can make quoted text six times longer) keeps its
    /// decision and identity and only counts the rest.
    const LINE: usize = 14 * 1024;
}

/// `text` cut to at most `max` bytes (on a character boundary), saying how long it was.
pub(crate) fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}... ({} bytes)", &text[..end], text.len()))
}

/// The first `n` entries of `list`, each cut to `max` bytes, and a last one counting the rest.
fn bounded_list<S: Serializer>(
    list: &[String],
    n: usize,
    max: usize,
    s: S,
) -> Result<S::Ok, S::Error> {
    let more = list.len().saturating_sub(n);
    s.collect_seq(
        list.iter()
            .take(n)
            .map(|e| cut(e, max))
            .chain((more > 0).then(|| format!("... and {more} more").into())),
    )
}

fn identity<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&cut(text, Bounds::IDENTITY))
}

fn groups<S: Serializer>(list: &[String], s: S) -> Result<S::Ok, S::Error> {
    bounded_list(list, Bounds::GROUPS, Bounds::IDENTITY, s)
}

fn user_extra<S: Serializer>(
    extra: &BTreeMap<String, Vec<String>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    struct Values<'a>(&'a [String]);
    impl Serialize for Values<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            groups(self.0, s)
        }
    }
    // The keys are those of AUDITED_USER_EXTRA: only the values come from the request.
    s.collect_map(extra.iter().map(|(k, v)| (k, Values(v))))
}

fn warnings<S: Serializer>(list: &[String], s: S) -> Result<S::Ok, S::Error> {
    bounded_list(list, Bounds::WARNINGS, Bounds::WARNING, s)
}

fn patch_paths<S: Serializer>(list: &[String], s: S) -> Result<S::Ok, S::Error> {
    bounded_list(list, Bounds::PATHS, Bounds::PATH, s)
}

fn error<S: Serializer>(text: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match text {
        Some(t) => s.serialize_str(&cut(t, Bounds::ERROR)),
        None => s.serialize_none(),
    }
}

/// The violations of a record (validation's own type, which is not serde's), bounded.
fn violations<S: Serializer>(list: &[Violation], s: S) -> Result<S::Ok, S::Error> {
    struct One<'a>(&'a str, std::borrow::Cow<'a, str>);
    impl Serialize for One<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut v = s.serialize_struct("Violation", 2)?;
            v.serialize_field("field", &cut(self.0, Bounds::FIELD))?;
            v.serialize_field("message", &cut(&self.1, Bounds::MESSAGE))?;
            v.end()
        }
    }
    let more = list.len().saturating_sub(Bounds::VIOLATIONS);
    s.collect_seq(
        list.iter()
            .take(Bounds::VIOLATIONS)
            .map(|v| One(&v.field, v.message.as_str().into()))
            .chain((more > 0).then(|| One("", format!("... and {more} more").into()))),
    )
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
            peer: String::new(),
            client_certificate: false,
            latency_us: 0,
        }
    }

    /// Takes the request's identity fields (the request is no longer needed: moving them
    /// instead of copying saves an allocation per field on every admission).
    pub fn take_from<T>(&mut self, req: Request<T>) {
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

    /// The record as one JSON object of at most about [`Bounds::LINE`] bytes.
    pub fn to_json(&self) -> String {
        // Strings, numbers and string maps only: serializing cannot fail.
        let json = serde_json::to_string(self).unwrap_or_default();
        if json.len() <= Bounds::LINE {
            return json;
        }
        let counted = |n: usize, what: &str| {
            (n > 0)
                .then(|| format!("{n} {what}, too large to record"))
                .into_iter()
                .collect::<Vec<_>>()
        };
        let short_identity = |text: &str| cut(text, Bounds::SHORT_IDENTITY).into_owned();
        let more_groups = self.groups.len().saturating_sub(Bounds::SHORT_GROUPS);
        let short = Self {
            uid: short_identity(&self.uid),
            user: short_identity(&self.user),
            user_uid: short_identity(&self.user_uid),
            kind: short_identity(&self.kind),
            namespace: short_identity(&self.namespace),
            name: short_identity(&self.name),
            groups: self
                .groups
                .iter()
                .take(Bounds::SHORT_GROUPS)
                .map(|g| short_identity(g))
                .chain((more_groups > 0).then(|| format!("... and {more_groups} more")))
                .collect(),
            violations: counted(self.violations.len(), "violations")
                .into_iter()
                .map(|message| Violation {
                    field: String::new(),
                    message,
                })
                .collect(),
            warnings: counted(self.warnings.len(), "warnings"),
            patch_paths: counted(self.patch_paths.len(), "patch paths"),
            error: self.error.as_ref().map(|e| cut(e, 64).into_owned()),
            user_extra: BTreeMap::new(),
            ..self.clone()
        };
        serde_json::to_string(&short).unwrap_or_default()
    }
}

/// A non-blocking writer of whole lines to `out` on its own thread named `name`, and the guard
/// that writes what is still queued when dropped.
fn line_writer(name: &str, out: impl Write + Send + 'static) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .buffered_lines_limit(BUFFERED_RECORDS)
        .lossy(true)
        .thread_name(name)
        .finish(CountingErrors(out))
}

/// Failed writes of the audit writers' threads (a full disk, a closed stdout).
static WRITE_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Audit writes that failed since the process started (`kim_webhook_audit_write_errors_total`):
/// tracing-appender's writer thread drops a line whose write fails and goes on, silently.
pub fn write_errors() -> u64 {
    WRITE_ERRORS.load(Ordering::Relaxed)
}

/// `W`, counting its failed writes and flushes in [`WRITE_ERRORS`].
struct CountingErrors<W>(W);

impl<W: Write> Write for CountingErrors<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).inspect_err(|_| {
            WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
        })
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().inspect_err(|_| {
            WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
        })
    }
}

/// Where audit records go.
#[derive(Clone, Default)]
pub struct AuditSink {
    file: Option<(NonBlocking, Arc<WorkerGuard>)>,
}

impl AuditSink {
    /// Records go to the log only.
    pub fn log_only() -> Self {
        Self::default()
    }

    /// Records also go to `path`, rotated when it exceeds `max_bytes` (keeping `keep` old
    /// files `path.1` .. `path.<keep>`, `path.1` the newest). The queued records are written
    /// when the last clone of the sink is dropped.
    pub fn with_file(path: PathBuf, max_bytes: u64, keep: usize) -> std::io::Result<Self> {
        // Fail at start on a path that cannot be written, not silently on the writer thread.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let file = FileRotate::new(
            path,
            AppendCount::new(keep),
            ContentLimit::BytesSurpassed(
                usize::try_from(max_bytes.max(1024)).unwrap_or(usize::MAX),
            ),
            Compression::None,
            None,
        );
        let (writer, guard) = line_writer("audit-file", file);
        Ok(Self {
            file: Some((writer, Arc::new(guard))),
        })
    }

    /// Records dropped from the file because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.file
            .as_ref()
            .map_or(0, |(w, _)| w.error_counter().dropped_lines() as u64)
    }

    /// Emits one record: serialized once, then to the log (an event on [`AUDIT_TARGET`]
    /// carrying the JSON in the field [`RECORD_FIELD`], written as is by [`AuditLogLayer`]) and
    /// to the file.
    pub fn emit(&self, record: &AuditRecord) {
        let log = tracing::enabled!(target: AUDIT_TARGET, tracing::Level::INFO);
        if !log && self.file.is_none() {
            return;
        }
        let json = record.to_json();
        if log {
            tracing::info!(target: AUDIT_TARGET, record = json.as_str());
        }
        if let Some((writer, _)) = &self.file {
            let mut line = json.into_bytes();
            line.push(b'\n');
            // One write is one queued line; a full queue counts it as dropped.
            let _ = writer.clone().write_all(&line);
        }
    }
}

/// The log writer's count of dropped audit records, once logging is set up.
static LOG_DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Audit records not written to the log (stdout) because its writer fell behind
/// (`kim_webhook_audit_log_dropped_records_total`).
pub fn log_dropped() -> u64 {
    LOG_DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// The field of audit events that carries the serialized record.
pub const RECORD_FIELD: &str = "record";

/// A tracing layer that writes audit events as one JSON line each, the record's own fields
/// after `level` and `target`: `{"level":"INFO","target":"audit","time":...,"uid":...}`, through
/// a non-blocking writer. (tracing's JSON formatter would write the record as one string
/// field, and cost a quarter of a validating request's CPU.)
pub struct AuditLogLayer {
    writer: NonBlocking,
}

impl AuditLogLayer {
    /// A layer writing to `out` (stdout in production), and the guard that writes what is
    /// queued when dropped (hold it until the program ends).
    pub fn new(out: impl Write + Send + 'static) -> (Self, WorkerGuard) {
        let (writer, guard) = line_writer("audit-log", out);
        (Self { writer }, guard)
    }

    /// Records this layer dropped because its writer fell behind.
    pub fn dropped(&self) -> ErrorCounter {
        self.writer.error_counter()
    }

    /// Makes this layer's count the one [`log_dropped`] reports (the process's log layer).
    pub fn report_dropped(&self) {
        let _ = LOG_DROPPED.set(self.dropped());
    }
}

/// Queues a serialized record as one log line.
fn queue_log_line(writer: &NonBlocking, record: &str) {
    const PREFIX: &[u8] = b"{\"level\":\"INFO\",\"target\":\"audit\",";
    let body = record.strip_prefix('{').unwrap_or(record);
    let mut line = Vec::with_capacity(PREFIX.len() + body.len() + 1);
    line.extend_from_slice(PREFIX);
    line.extend_from_slice(body.as_bytes());
    line.push(b'\n');
    // The log is best effort: a full queue counts the record as dropped.
    let _ = writer.clone().write_all(&line);
}

/// Queues the `record` field of an audit event as one log line.
struct RecordVisitor<'a> {
    writer: &'a NonBlocking,
}

impl tracing::field::Visit for RecordVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == RECORD_FIELD {
            queue_log_line(self.writer, value);
        }
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
        event.record(&mut RecordVisitor {
            writer: &self.writer,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a requester controls is bounded in the record: a 100 KiB value quoted in 500
    /// violations, warnings and patch paths still makes one line of a few KiB that parses.
    #[test]
    fn a_record_stays_small_whatever_the_request_holds() {
        let huge = "x".repeat(100 * 1024);
        let mut r = AuditRecord::new(Mode::Validate, SystemTime::now());
        r.violations = (0..500)
            .map(|i| Violation {
                field: format!("spec.shoot.provider.workers[{i}].{huge}"),
                message: format!("{huge:?} is not a valid name"),
            })
            .collect();
        r.warnings = vec![huge.clone(); 50];
        r.patch_paths = vec![format!("/metadata/labels/{huge}"); 50];
        r.error = Some(huge.clone());
        let json = r.to_json();
        assert!(json.len() <= Bounds::LINE, "{} bytes", json.len());
        let back: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
        let violations = back["violations"].as_array().expect("violations");
        assert_eq!(violations.len(), Bounds::VIOLATIONS + 1);
        assert_eq!(
            violations[Bounds::VIOLATIONS]["message"],
            "... and 484 more"
        );
        let full = format!("{huge:?} is not a valid name").len();
        assert!(
            violations[0]["message"]
                .as_str()
                .is_some_and(|m| m.ends_with(&format!("... ({full} bytes)"))),
            "{}",
            violations[0]["message"]
        );
        assert_eq!(back["warnings"][8], "... and 42 more");
        assert_eq!(back["patch_paths"][16], "... and 34 more");

        // A forged review's identity is bounded too, and text that escaping blows up (control
        // characters, six bytes each) leaves the decision and the identity, the rest counted.
        let control = "\u{1}".repeat(300);
        r.user = huge.clone();
        r.groups = vec![huge.clone(); 100];
        r.violations = (0..16)
            .map(|_| Violation {
                field: control.clone(),
                message: control.clone(),
            })
            .collect();
        let json = r.to_json();
        assert!(json.len() <= Bounds::LINE, "{} bytes", json.len());
        let back: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
        assert_eq!(back["allowed"], false);
        assert_eq!(
            back["violations"][0]["message"],
            "16 violations, too large to record"
        );
        assert_eq!(back["groups"].as_array().map(Vec::len), Some(5));
        assert_eq!(back["groups"][4], "... and 96 more");

        // Every field a forged review sets, at its worst: whole control characters.
        let control = "\u{1}".repeat(100 * 1024);
        let mut r = AuditRecord::new(Mode::Validate, SystemTime::now());
        r.uid = control.clone();
        r.user = control.clone();
        r.user_uid = control.clone();
        r.kind = control.clone();
        r.namespace = control.clone();
        r.name = control.clone();
        r.groups = vec![control.clone(); 100];
        r.user_extra = AUDITED_USER_EXTRA
            .iter()
            .map(|k| (k.to_string(), vec![control.clone(); 100]))
            .collect();
        r.error = Some(control.clone());
        let json = r.to_json();
        assert!(json.len() <= Bounds::LINE, "{} bytes", json.len());
        let back: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
        assert!(back["kind"].as_str().is_some_and(|k| k.ends_with("bytes)")));
        // The whole record, before it is shortened, bounds them as well.
        let whole = serde_json::to_string(&r).expect("json");
        assert!(whole.len() < 512 * 1024, "{} bytes", whole.len());
    }

    /// A write the writer thread cannot do (a full disk) loses the record, and is counted.
    #[test]
    fn a_failed_write_is_counted() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("No space left on device"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let before = write_errors();
        let (layer, guard) = AuditLogLayer::new(Full);
        queue_log_line(&layer.writer, "{\"uid\":\"1\"}");
        let after = eventually(write_errors, |n| *n > before);
        assert!(after > before, "a failed write was not counted");
        drop(guard);
    }

    /// What `read` gives once `done` holds (the writer thread writes in its own time: a guard
    /// waits for it only up to about a second, too short on a loaded machine), or after 10 s.
    fn eventually<T>(mut read: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let value = read();
            if done(&value) || std::time::Instant::now() > deadline {
                return value;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn the_file_rotates_by_size_and_keeps_n_files_of_whole_records() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.log");
        let sink = AuditSink::with_file(path.clone(), 1024, 2).expect("sink");
        let mut record = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
        record.uid = "x".repeat(200);
        for _ in 0..20 {
            sink.emit(&record);
        }
        let mut last = record.clone();
        last.uid = "last".into();
        sink.emit(&last);
        drop(sink);
        // Written in order: once the last record is there, so is everything before it.
        eventually(
            || std::fs::read_to_string(&path).unwrap_or_default(),
            |t| t.contains("\"uid\":\"last\""),
        );
        let rotated = |n: usize| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        for p in [path.clone(), rotated(1), rotated(2)] {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            assert!(!text.is_empty(), "{} written", p.display());
            // Rotated once past the limit, at a record's end: at most one record over it.
            assert!(
                text.len() <= 1024 + record.to_json().len() + 1,
                "{}: {} bytes",
                p.display(),
                text.len()
            );
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).expect("whole JSON line");
                assert!(v["uid"] == record.uid || v["uid"] == "last", "{line}");
            }
        }
        assert!(!rotated(3).exists(), "only `keep` old files");
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
        state: Arc<(std::sync::Mutex<(bool, bool)>, std::sync::Condvar)>,
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

    /// The log layer's writer (what its visitor calls for each audit event; the tracing path
    /// itself is the test below), with stdout stalled.
    #[test]
    fn a_stalled_log_drops_records_and_counts_each() {
        let out = Stalling::default();
        *out.state.0.lock().expect("lock") = (true, false);
        let (layer, guard) = AuditLogLayer::new(out.clone());
        let mut record = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
        record.uid = "x".repeat(1000);
        let record = record.to_json();
        let sent = BUFFERED_RECORDS + 25;
        // The first record takes the writer into the stalled write.
        queue_log_line(&layer.writer, &record);
        {
            let (lock, cv) = &*out.state;
            let mut st = lock.lock().expect("lock");
            while !st.1 {
                st = cv.wait(st).expect("wait");
            }
        }
        for _ in 0..sent {
            queue_log_line(&layer.writer, &record);
        }
        let dropped = layer.dropped().dropped_lines();
        // Unstalled before any assertion: a failing one must fail, not hang on the writer.
        *out.state.0.lock().expect("lock") = (false, false);
        out.state.1.notify_all();
        let written = || String::from_utf8_lossy(&out.out.0.lock().expect("lock")).into_owned();
        let text = eventually(written, |t| t.lines().count() > BUFFERED_RECORDS);
        drop(layer);
        drop(guard);
        assert_eq!(dropped, sent - BUFFERED_RECORDS);
        // Everything that was queued is written.
        assert_eq!(text.lines().count(), 1 + BUFFERED_RECORDS, "lines written");
        assert!(
            text.lines()
                .all(|l| l.starts_with("{\"level\":\"INFO\",\"target\":\"audit\",\"time\":"))
        );
    }

    #[test]
    fn log_layer_writes_the_record_as_one_json_line_on_the_audit_target() {
        use tracing_subscriber::layer::SubscriberExt;
        let out = Shared::default();
        let (layer, guard) = AuditLogLayer::new(out.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        let mut record = AuditRecord::new(Mode::Mutate, SystemTime::UNIX_EPOCH);
        record.uid = "u9".into();
        record.patch_paths.push("/spec/x".into());
        tracing::subscriber::with_default(subscriber, || {
            AuditSink::log_only().emit(&record);
            tracing::info!("an ordinary log line is not an audit record");
        });
        // Dropping the guard lets the writer write what is still queued.
        drop(guard);
        let text = eventually(
            || String::from_utf8_lossy(&out.0.lock().expect("lock")).into_owned(),
            |t| !t.is_empty(),
        );
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
        let mut record = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
        record.uid = "u1".into();
        record.violations.push(Violation {
            field: "spec.x".into(),
            message: "bad".into(),
        });
        sink.emit(&record);
        record.uid = "u2".into();
        sink.emit(&record);
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
    fn a_burst_from_several_threads_arrives_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("audit.log");
        let sink = AuditSink::with_file(path.clone(), 64 << 20, 1).expect("sink");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        let mut record = AuditRecord::new(Mode::Validate, SystemTime::UNIX_EPOCH);
                        record.uid = format!("{t}-{i}");
                        sink.emit(&record);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("emitter");
        }
        assert_eq!(sink.dropped(), 0);
        drop(sink);
        let text = eventually(
            || std::fs::read_to_string(&path).unwrap_or_default(),
            |t| t.lines().count() >= 2000,
        );
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
