//! The Runtime status a reconcile computes: conditions keyed by type (upstream types and
//! reasons), the state, `observedGeneration`, the Shoot's last operation and errors. Written
//! once per reconcile by server-side apply on `/status`, with one Event per condition change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kim_shared::api::{Runtime, RuntimeState, RuntimeStatus};
use kim_shared::gardener::Shoot;

/// `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondStatus {
    /// Done.
    True,
    /// Failed.
    False,
    /// In progress.
    Unknown,
}

impl CondStatus {
    /// The condition's `status` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// A condition that changed (status or reason) in this reconcile: one Event each.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Condition type.
    pub type_: String,
    /// New status.
    pub status: String,
    /// New reason.
    pub reason: String,
    /// New message.
    pub message: String,
}

/// The status being built for one reconcile, starting from the stored one.
#[derive(Debug, Clone)]
pub struct StatusDraft {
    old: RuntimeStatus,
    /// The status to write.
    pub new: RuntimeStatus,
    generation: Option<i64>,
    now: Time,
    /// The stored status reports an operation of an earlier Shoot than the one copied in.
    another_shoot: bool,
}

/// Whether `status` reports an operation of a Shoot older than `shoot`: the last operation it
/// holds was updated before `shoot` was created (a Shoot made anew since). Both times have
/// whole seconds; a status or Shoot without its time says nothing.
pub fn of_an_earlier_shoot(status: Option<&RuntimeStatus>, shoot: &Shoot) -> bool {
    let reported = status
        .and_then(|s| s.shoot_last_operation.as_ref())
        .map(|op| op.last_update_time.0);
    let created = shoot.metadata.creation_timestamp.as_ref().map(|t| t.0);
    matches!((reported, created), (Some(reported), Some(created)) if reported < created)
}

/// Upstream's `LogLastErrors` line, written when the errors change (upstream: on every pass)
/// while the Shoot's operation is `Pending`, `Failed` or `Error`.
fn log_last_errors(shoot: &Shoot, errors: &[kim_shared::gardener::LastError]) {
    use kube::ResourceExt as _;
    let state = shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .map(|op| op.state.as_str())
        .unwrap_or_default();
    if !matches!(state, "Pending" | "Failed" | "Error") {
        return;
    }
    let runtime_id = shoot
        .annotations()
        .get(kim_shared::names::SHOOT_ANNOTATION_RUNTIME_ID)
        .map(String::as_str)
        .unwrap_or_default();
    let described: String = errors
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}: {}; ", i + 1, e.description))
        .collect();
    tracing::info!(
        "runtimeID: {runtime_id}, Last operation state: {state}, last errors: {described}"
    );
}

impl StatusDraft {
    /// Starts from the Runtime's stored status; `now` stamps changed conditions.
    pub fn new(runtime: &Runtime, now: jiff::Timestamp) -> Self {
        let old = runtime.status.clone().unwrap_or_default();
        Self {
            new: old.clone(),
            old,
            generation: runtime.metadata.generation,
            now: Time(now),
            another_shoot: false,
        }
    }

    /// Upserts a condition by type; keeps `lastTransitionTime` when the status is unchanged.
    pub fn set(
        &mut self,
        type_: &str,
        status: CondStatus,
        reason: &str,
        message: impl Into<String>,
    ) {
        let message = kim_shared::api::condition_message(message.into());
        let conditions = self.new.conditions.get_or_insert_with(Vec::new);
        let status_s = status.as_str().to_owned();
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status_s {
                    c.last_transition_time = self.now.clone();
                }
                c.status = status_s;
                c.reason = reason.to_owned();
                c.message = message;
                c.observed_generation = self.generation;
            }
            None => conditions.push(Condition {
                type_: type_.to_owned(),
                status: status_s,
                reason: reason.to_owned(),
                message,
                last_transition_time: self.now.clone(),
                observed_generation: self.generation,
            }),
        }
    }

    /// Removes a condition type this controller no longer writes.
    pub fn remove(&mut self, type_: &str) {
        if let Some(conditions) = self.new.conditions.as_mut() {
            conditions.retain(|c| c.type_ != type_);
        }
    }

    /// Sets the state.
    pub fn state(&mut self, state: RuntimeState) {
        self.new.state = state;
    }

    /// The state being written.
    pub fn current_state(&self) -> RuntimeState {
        self.new.state
    }

    /// A condition as it will be written.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.new
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == type_)
    }

    /// Whether the stored status already says that this generation cannot become a Shoot
    /// (`Failed`, `Provisioned` with `ConversionErr`).
    pub fn conversion_failed_before(&self) -> bool {
        self.old.state == RuntimeState::Failed
            && self.old.conditions.iter().flatten().any(|c| {
                c.type_ == kim_shared::names::condition::PROVISIONED
                    && c.reason == kim_shared::names::reason::CONVERSION_ERR
                    && c.observed_generation == self.generation
            })
    }

    /// Marks the spec generation as handled.
    pub fn observed(&mut self) {
        self.new.observed_generation = self.generation;
    }

    /// Sets `provisioningCompleted` (never reset, as upstream).
    pub fn provisioning_completed(&mut self) {
        self.new.provisioning_completed = Some(true);
    }

    /// Whether this status is the first to say provisioning completed (the Runtime's first
    /// Ready; later updates and hibernation cycles never reset it).
    pub fn completes_provisioning(&self) -> bool {
        self.old.provisioning_completed != Some(true)
            && self.new.provisioning_completed == Some(true)
    }

    /// Copies the Shoot's last operation and errors.
    pub fn shoot(&mut self, shoot: Option<&Shoot>) {
        self.another_shoot = shoot.is_some_and(|s| of_an_earlier_shoot(Some(&self.old), s));
        let st = shoot.and_then(|s| s.status.as_ref());
        self.new.shoot_last_operation = st.and_then(|s| s.last_operation.clone());
        let errors = st
            .and_then(|s| s.last_errors.clone())
            .filter(|e| !e.is_empty());
        // Compared with what this draft holds (the stored status, or an earlier copy in the
        // same pass), so a pass that copies the Shoot twice logs once.
        if let (Some(shoot), Some(new)) = (shoot, &errors)
            && self.new.shoot_last_errors.as_ref() != Some(new)
        {
            log_last_errors(shoot, new);
        }
        self.new.shoot_last_errors = errors;
    }

    /// Whether the status must be written: anything differs from the stored status but the
    /// progress of the same Shoot operation. Gardener reports a running operation's progress
    /// every few seconds (a Shoot's creation, every maintenance reconcile); a Runtime status
    /// write for each step would multiply the control plane's writes by the number of steps.
    /// `status.shootLastOperation` therefore follows the operation's type and state, and takes
    /// the current progress along whenever the status is written for another reason. An
    /// operation of a Shoot made anew is always written: until then the status says it
    /// describes the earlier Shoot.
    pub fn changed(&self) -> bool {
        if self.old == self.new {
            return false;
        }
        if self.another_shoot {
            return true;
        }
        let same_operation = match (
            &self.old.shoot_last_operation,
            &self.new.shoot_last_operation,
        ) {
            (Some(old), Some(new)) => old.type_ == new.type_ && old.state == new.state,
            _ => false,
        };
        !same_operation
            || RuntimeStatus {
                shoot_last_operation: self.old.shoot_last_operation.clone(),
                ..self.new.clone()
            } != self.old
    }

    /// The conditions whose status or reason changed, for Events.
    pub fn changes(&self) -> Vec<Change> {
        let old = self.old.conditions.as_deref().unwrap_or_default();
        self.new
            .conditions
            .iter()
            .flatten()
            .filter(|c| {
                !old.iter()
                    .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason)
            })
            .map(|c| Change {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect()
    }

    /// Message of the last condition (upstream's metric label), or `No value`.
    pub fn last_message(&self) -> String {
        self.new
            .conditions
            .as_ref()
            .and_then(|c| c.last())
            .map(|c| c.message.clone())
            .unwrap_or_else(|| "No value".to_owned())
    }
}

/// Whether the stored status says `Ready` for the Runtime's current generation.
pub fn ready_for_its_spec(runtime: &Runtime) -> bool {
    runtime.status.as_ref().is_some_and(|s| {
        s.state == RuntimeState::Ready && s.observed_generation == runtime.metadata.generation
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::names::{condition, reason};

    fn runtime() -> Runtime {
        let mut runtime = Runtime::new("rt", Default::default());
        runtime.metadata.generation = Some(3);
        runtime
    }

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    /// Upstream's line for the Shoot's last errors, once per change of them (a pass that copies
    /// the Shoot twice, and the next pass, log nothing more).
    #[test]
    fn changed_last_errors_of_a_failing_operation_are_logged_once() {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if let Ok(mut b) = self.0.lock() {
                    b.extend_from_slice(buf);
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let shoot: Shoot = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "annotations": {
                "infrastructuremanager.kyma-project.io/runtime-id": "rt-1"}},
            "spec": {"region": "r", "provider": {"type": "aws"}, "kubernetes": {}},
            "status": {"lastOperation": {"type": "Create", "state": "Failed", "progress": 10,
                    "description": "d", "lastUpdateTime": "2026-01-01T00:00:00Z"},
                "lastErrors": [{"description": "quota exceeded"}, {"description": "boom"}]}
        }))
        .unwrap();
        let logged = tracing::subscriber::with_default(subscriber, || {
            let mut first = StatusDraft::new(&runtime(), t("2026-01-01T00:00:00Z"));
            first.shoot(Some(&shoot));
            first.shoot(Some(&shoot));
            let mut stored = runtime();
            stored.status = Some(first.new.clone());
            StatusDraft::new(&stored, t("2026-01-01T00:00:01Z")).shoot(Some(&shoot));
            String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
        });
        let line = "runtimeID: rt-1, Last operation state: Failed, last errors: 1: quota exceeded; 2: boom; ";
        assert_eq!(logged.matches(line).count(), 1, "{logged}");
    }

    #[test]
    fn a_message_longer_than_the_crd_allows_is_stored_cut() {
        let mut d = StatusDraft::new(&runtime(), t("2026-01-01T00:00:00Z"));
        d.set(
            condition::PROVISIONED,
            CondStatus::False,
            reason::CONFIGURATION_ERROR,
            "denied by the runtime cluster's webhook: ".repeat(1000),
        );
        let stored = &d.new.conditions.as_ref().unwrap()[0].message;
        assert!(stored.len() <= kim_shared::api::MAX_CONDITION_MESSAGE);
        assert!(stored.starts_with("denied by the runtime cluster's webhook"));
    }

    #[test]
    fn conditions_keyed_by_type_and_transition_time_kept() {
        let mut d = StatusDraft::new(&runtime(), t("2026-01-01T00:00:00Z"));
        d.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::SHOOT_CREATION_PENDING,
            "Shoot is pending",
        );
        let mut stored = runtime();
        stored.status = Some(d.new.clone());
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:05:00Z"));
        d.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::SHOOT_CREATION_PENDING,
            "Shoot creation in progress",
        );
        assert!(d.changes().is_empty(), "same status and reason: no event");
        assert!(d.changed(), "message changed");
        let c = d.condition(condition::PROVISIONED).unwrap();
        assert_eq!(c.last_transition_time.0, t("2026-01-01T00:00:00Z"));
        d.set(
            condition::PROVISIONED,
            CondStatus::True,
            reason::SHOOT_CREATION_COMPLETED,
            "done",
        );
        assert_eq!(d.new.conditions.as_ref().unwrap().len(), 1);
        let c = d.condition(condition::PROVISIONED).unwrap();
        assert_eq!(c.last_transition_time.0, t("2026-01-01T00:05:00Z"));
        assert_eq!(c.observed_generation, Some(3));
        assert_eq!(d.changes().len(), 1);
    }

    #[test]
    fn legacy_oidc_condition_is_removed_and_written() {
        let mut stored = runtime();
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:00:00Z"));
        d.set(
            condition::LEGACY_OIDC_CONFIGURED,
            CondStatus::True,
            "OidcConfigured",
            "ok",
        );
        stored.status = Some(d.new.clone());
        let mut d = StatusDraft::new(&stored, t("2026-01-02T00:00:00Z"));
        d.remove(condition::LEGACY_OIDC_CONFIGURED);
        assert!(d.condition(condition::LEGACY_OIDC_CONFIGURED).is_none());
        assert!(d.changed());
    }

    #[test]
    fn a_progress_step_alone_is_not_written_a_new_state_or_anything_else_is() {
        let op = |type_: &str, state: &str, progress: i32, at: &str| {
            serde_json::from_value::<kim_shared::gardener::status::LastOperation>(
                serde_json::json!({
                    "type": type_, "state": state, "progress": progress,
                    "description": format!("{type_} {progress}%"), "lastUpdateTime": at,
                }),
            )
            .expect("last operation")
        };
        let shoot = |last: kim_shared::gardener::status::LastOperation| {
            let mut s = Shoot::new("s", Default::default());
            s.status = Some(kim_shared::gardener::status::ShootStatus {
                last_operation: Some(last),
                ..Default::default()
            });
            s
        };
        let mut stored = runtime();
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:00:00Z"));
        d.shoot(Some(&shoot(op(
            "Create",
            "Processing",
            0,
            "2026-01-01T00:00:00Z",
        ))));
        assert!(d.changed(), "the first operation is written");
        stored.status = Some(d.new.clone());

        let step = op("Create", "Processing", 30, "2026-01-01T00:00:05Z");
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:00:05Z"));
        d.shoot(Some(&shoot(step.clone())));
        assert!(!d.changed(), "the same operation, further on: not written");
        // Written for another reason: the current progress goes along.
        d.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::SHOOT_CREATION_PENDING,
            "Shoot creation in progress",
        );
        assert!(d.changed());
        assert_eq!(d.new.shoot_last_operation.as_ref(), Some(&step));

        for (next, why) in [
            (
                op("Create", "Succeeded", 100, "2026-01-01T00:10:00Z"),
                "a new state",
            ),
            (
                op("Create", "Error", 30, "2026-01-01T00:10:00Z"),
                "an error",
            ),
            (
                op("Reconcile", "Processing", 0, "2026-01-01T00:10:00Z"),
                "a new operation",
            ),
        ] {
            let mut d = StatusDraft::new(&stored, t("2026-01-01T00:10:00Z"));
            d.shoot(Some(&shoot(next)));
            assert!(d.changed(), "{why} is written");
        }
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:10:00Z"));
        d.shoot(None);
        assert!(d.changed(), "a Shoot gone is written");

        // The same operation and state, of a Shoot made anew after the stored one: written,
        // else the status kept saying it describes the earlier Shoot.
        let mut anew = shoot(op("Create", "Processing", 40, "2026-01-01T01:00:05Z"));
        anew.metadata.creation_timestamp = Some(Time(t("2026-01-01T01:00:00Z")));
        let mut d = StatusDraft::new(&stored, t("2026-01-01T01:00:05Z"));
        d.shoot(Some(&anew));
        assert!(d.changed(), "an operation of a Shoot made anew is written");
        // The stored Shoot itself, further on: not written.
        let mut same = shoot(step.clone());
        same.metadata.creation_timestamp = Some(Time(t("2025-12-31T23:59:59Z")));
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:00:06Z"));
        d.shoot(Some(&same));
        assert!(!d.changed());
    }

    /// Only a stored `Failed`/`ConversionErr` of the same generation counts as said before.
    #[test]
    fn a_conversion_failure_is_said_before_only_for_its_generation() {
        let mut stored = runtime();
        let fail = |d: &mut StatusDraft| {
            d.set(
                condition::PROVISIONED,
                CondStatus::False,
                reason::CONVERSION_ERR,
                "Runtime conversion error x",
            );
            d.state(RuntimeState::Failed);
        };
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:00:00Z"));
        assert!(!d.conversion_failed_before(), "nothing stored");
        fail(&mut d);
        assert!(
            !d.conversion_failed_before(),
            "the draft is not the stored status"
        );
        stored.status = Some(d.new.clone());
        assert!(StatusDraft::new(&stored, t("2026-01-01T00:00:01Z")).conversion_failed_before());

        let mut next = stored.clone();
        next.metadata.generation = Some(4);
        assert!(!StatusDraft::new(&next, t("2026-01-01T00:00:02Z")).conversion_failed_before());

        let mut pending = stored.clone();
        pending.status.as_mut().unwrap().state = RuntimeState::Pending;
        assert!(!StatusDraft::new(&pending, t("2026-01-01T00:00:03Z")).conversion_failed_before());

        let mut other = stored;
        let mut d = StatusDraft::new(&other, t("2026-01-01T00:00:04Z"));
        d.set(
            condition::PROVISIONED,
            CondStatus::False,
            reason::GARDENER_ERR,
            "refused",
        );
        other.status = Some(d.new);
        assert!(!StatusDraft::new(&other, t("2026-01-01T00:00:05Z")).conversion_failed_before());
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let mut stored = runtime();
        let mut d = StatusDraft::new(&stored, t("2026-01-01T00:00:00Z"));
        d.set(
            condition::CONFIGURED,
            CondStatus::True,
            reason::ADMINISTRATORS_CONFIGURED,
            "ok",
        );
        d.state(RuntimeState::Ready);
        stored.status = Some(d.new.clone());
        let mut d = StatusDraft::new(&stored, t("2026-01-02T00:00:00Z"));
        d.set(
            condition::CONFIGURED,
            CondStatus::True,
            reason::ADMINISTRATORS_CONFIGURED,
            "ok",
        );
        d.state(RuntimeState::Ready);
        assert!(!d.changed());
        assert_eq!(d.last_message(), "ok");
    }
}
