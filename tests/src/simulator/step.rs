//! What the simulated gardenlet does next with a Shoot: a pure decision from the Shoot, the
//! fault in force and how long ago the simulator last touched it.

use std::time::Duration;

use kim_shared::gardener::Shoot;

use super::Fault;

/// Finalizer Gardener puts on every Shoot.
pub const FINALIZER: &str = "gardener";
/// Annotation that confirms deletion (checked by the real DeletionConfirmation plugin).
pub const CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";
/// Annotation that skips the deletion flow (Gardener allows it only for certain error codes;
/// the apiserver enforces that).
pub const FORCE_DELETION: &str = "confirmation.gardener.cloud/force-deletion";
/// Operation annotation (`reconcile`, `retry`, ...), removed by the gardenlet when it acts.
pub const OPERATION: &str = "gardener.cloud/operation";

/// Progress values a Processing operation passes through before Succeeded.
pub const PROGRESS_STEPS: [i32; 3] = [0, 30, 70];

/// One action of the simulated scheduler/gardenlet.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Add the `gardener` finalizer.
    AddFinalizer,
    /// Schedule onto a Seed through `shoots/binding`.
    Bind,
    /// Report that no Seed fits: `lastOperation` Create/Pending with the scheduler's message.
    Unschedulable,
    /// Begin an operation of this type (`Create`, `Reconcile`, `Delete`) at progress 0.
    Start(&'static str),
    /// Move a Processing operation to this progress.
    Progress(i32),
    /// Finish the operation: Succeeded, 100.
    Succeed,
    /// Put the operation into `Error` with these codes (it stays there while the fault lasts).
    Error(Vec<String>),
    /// Put the operation into `Failed` with these codes (final until a new generation or retry).
    Fail(Vec<String>),
    /// Remove the finalizer (deletion done).
    RemoveFinalizer,
    /// Nothing now; look again after this long (None: only on the next event).
    Wait(Option<Duration>),
}

/// Decides the next step. `since_last_step` is how long ago the simulator last changed this
/// Shoot (None if it never did in this process); `delay` is the time each step takes.
pub fn next(
    shoot: &Shoot,
    fault: &Fault,
    since_last_step: Option<Duration>,
    delay: Duration,
) -> Step {
    let meta = &shoot.metadata;
    let annotations = meta.annotations.clone().unwrap_or_default();
    let has_finalizer = meta
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
    let status = shoot.status.clone().unwrap_or_default();
    let last = status.last_operation.clone();
    let delay = match fault {
        Fault::Slow(d) => *d,
        _ => delay,
    };
    let due = |then: Step| match since_last_step {
        Some(elapsed) if elapsed < delay => Step::Wait(Some(delay - elapsed)),
        _ => then,
    };

    if meta.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Step::Wait(None);
        }
        if annotations.get(FORCE_DELETION).is_some_and(|v| v == "true") {
            return Step::RemoveFinalizer;
        }
        return match last {
            Some(op) if op.type_ == "Delete" && op.state == "Succeeded" => Step::RemoveFinalizer,
            Some(op) if op.type_ == "Delete" && op.state == "Processing" => {
                due(advance(op.progress))
            }
            _ => Step::Start("Delete"),
        };
    }
    if !has_finalizer {
        return Step::AddFinalizer;
    }
    if shoot
        .spec
        .seed_name
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        let pending = last.as_ref().is_some_and(|op| op.state == "Pending");
        return match fault {
            Fault::NoSeed if pending => Step::Wait(None),
            Fault::NoSeed => Step::Unschedulable,
            _ => Step::Bind,
        };
    }
    let generation = meta.generation.unwrap_or(0);
    let observed = status.observed_generation.unwrap_or(0);
    let retry = annotations
        .get(OPERATION)
        .is_some_and(|v| v == "retry" || v == "reconcile");
    let Some(op) = last else {
        return Step::Start("Create");
    };
    let create_unfinished = op.type_ == "Create" && op.state != "Succeeded";
    let new_type = if create_unfinished {
        "Create"
    } else {
        "Reconcile"
    };
    if observed < generation || retry {
        // A running operation picks up the new generation when it starts over.
        return Step::Start(new_type);
    }
    match op.state.as_str() {
        "Processing" => match fault {
            Fault::Stuck => Step::Wait(None),
            Fault::Error(codes) if op.progress >= PROGRESS_STEPS[1] => {
                due(Step::Error(codes.clone()))
            }
            Fault::Failed(codes) if op.progress >= PROGRESS_STEPS[1] => {
                due(Step::Fail(codes.clone()))
            }
            _ => due(advance(op.progress)),
        },
        // Error is retried by Gardener: it resumes once the fault is gone.
        "Error" => match fault {
            Fault::Error(_) => Step::Wait(Some(delay.max(Duration::from_millis(200)))),
            _ => due(Step::Progress(PROGRESS_STEPS[2])),
        },
        _ => Step::Wait(None),
    }
}

fn advance(progress: i32) -> Step {
    match PROGRESS_STEPS.iter().find(|p| **p > progress) {
        Some(p) => Step::Progress(*p),
        None => Step::Succeed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::gardener::{LastOperation, ShootStatus};

    fn shoot(json: serde_json::Value) -> Shoot {
        let mut base = serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-kyma", "generation": 1, "finalizers": ["gardener"]},
            "spec": {"seedName": "seed-aws", "region": "eu-central-1", "kubernetes": {"version": "1.35.4"},
                     "provider": {"type": "aws"}}
        });
        merge(&mut base, json);
        serde_json::from_value(base).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn with_op(mut s: Shoot, type_: &str, state: &str, progress: i32) -> Shoot {
        let st = s.status.get_or_insert_with(ShootStatus::default);
        st.observed_generation = Some(1);
        st.last_operation = Some(LastOperation {
            description: String::new(),
            last_update_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
            progress,
            state: state.into(),
            type_: type_.into(),
        });
        s
    }

    const D: Duration = Duration::from_secs(1);

    #[test]
    fn new_shoot_gets_finalizer_then_seed_then_create() {
        let s =
            shoot(serde_json::json!({"metadata": {"finalizers": []}, "spec": {"seedName": ""}}));
        assert_eq!(next(&s, &Fault::None, None, D), Step::AddFinalizer);
        let s = shoot(serde_json::json!({"spec": {"seedName": ""}}));
        assert_eq!(next(&s, &Fault::None, None, D), Step::Bind);
        assert_eq!(
            next(&shoot(serde_json::json!({})), &Fault::None, None, D),
            Step::Start("Create")
        );
    }

    #[test]
    fn processing_advances_only_when_the_delay_has_passed() {
        let s = with_op(shoot(serde_json::json!({})), "Create", "Processing", 30);
        assert_eq!(next(&s, &Fault::None, Some(D), D), Step::Progress(70));
        assert_eq!(
            next(&s, &Fault::None, Some(Duration::from_millis(400)), D),
            Step::Wait(Some(Duration::from_millis(600)))
        );
        let s = with_op(shoot(serde_json::json!({})), "Create", "Processing", 70);
        assert_eq!(next(&s, &Fault::None, None, D), Step::Succeed);
    }

    #[test]
    fn new_generation_starts_a_reconcile_and_unfinished_create_restarts_create() {
        let s = with_op(
            shoot(serde_json::json!({"metadata": {"generation": 2}})),
            "Create",
            "Succeeded",
            100,
        );
        assert_eq!(next(&s, &Fault::None, None, D), Step::Start("Reconcile"));
        let s = with_op(
            shoot(serde_json::json!({"metadata": {"generation": 2}})),
            "Create",
            "Failed",
            70,
        );
        assert_eq!(next(&s, &Fault::None, None, D), Step::Start("Create"));
        let s = with_op(shoot(serde_json::json!({})), "Reconcile", "Succeeded", 100);
        assert_eq!(next(&s, &Fault::None, None, D), Step::Wait(None));
    }

    #[test]
    fn without_a_seed_the_shoot_stays_pending() {
        let s = shoot(serde_json::json!({"spec": {"seedName": ""}}));
        assert_eq!(next(&s, &Fault::NoSeed, None, D), Step::Unschedulable);
        let s = with_op(
            shoot(serde_json::json!({"spec": {"seedName": ""}})),
            "Create",
            "Pending",
            0,
        );
        assert_eq!(next(&s, &Fault::NoSeed, None, D), Step::Wait(None));
        assert_eq!(next(&s, &Fault::None, None, D), Step::Bind);
    }

    #[test]
    fn faults_turn_processing_into_error_or_failed() {
        let codes = vec!["ERR_INFRA_QUOTA_EXCEEDED".to_string()];
        let s = with_op(shoot(serde_json::json!({})), "Create", "Processing", 30);
        assert_eq!(
            next(&s, &Fault::Failed(codes.clone()), None, D),
            Step::Fail(codes.clone())
        );
        assert_eq!(
            next(&s, &Fault::Error(codes.clone()), None, D),
            Step::Error(codes.clone())
        );
        let s = with_op(shoot(serde_json::json!({})), "Create", "Error", 30);
        assert_eq!(next(&s, &Fault::None, None, D), Step::Progress(70));
        let s = with_op(shoot(serde_json::json!({})), "Create", "Failed", 30);
        assert_eq!(next(&s, &Fault::None, None, D), Step::Wait(None));
    }

    #[test]
    fn deletion_runs_a_delete_operation_then_drops_the_finalizer() {
        let deleting =
            serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let s = with_op(shoot(deleting.clone()), "Create", "Succeeded", 100);
        assert_eq!(next(&s, &Fault::None, None, D), Step::Start("Delete"));
        let s = with_op(shoot(deleting.clone()), "Delete", "Succeeded", 100);
        assert_eq!(next(&s, &Fault::None, None, D), Step::RemoveFinalizer);
        let force = serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"confirmation.gardener.cloud/force-deletion": "true"}}});
        let s = with_op(shoot(force), "Create", "Failed", 30);
        assert_eq!(next(&s, &Fault::None, None, D), Step::RemoveFinalizer);
    }
}
