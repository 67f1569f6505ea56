//! The labels KEB must set on every Runtime (upstream's `ValidateRequiredLabels`).

use super::ValidationOutcome;
use crate::api::Runtime;
use crate::names;

/// What each required label holds, for the message.
fn meaning(key: &str) -> &'static str {
    match key {
        names::LABEL_INSTANCE_ID => "the KEB instance ID",
        names::LABEL_RUNTIME_ID => "the runtime ID",
        names::LABEL_REGION => "the provider region",
        names::LABEL_KYMA_NAME => "the name of the Kyma resource",
        names::LABEL_BROKER_PLAN_ID => "the KEB plan ID",
        names::LABEL_BROKER_PLAN_NAME => "the KEB plan name",
        names::LABEL_GLOBAL_ACCOUNT_ID => "the global account ID",
        names::LABEL_SUBACCOUNT_ID => "the subaccount ID",
        _ => "a non-empty value",
    }
}

/// Every label of [`names::REQUIRED_RUNTIME_LABELS`] is present and not blank.
pub(crate) fn check(rt: &Runtime, f: &mut ValidationOutcome) {
    check_changed(None, rt, f);
}

/// [`check`] for the labels an UPDATE changes: a label that was already missing (or the same)
/// in `old` is not reported again, so a Runtime stored before the rule can still be updated.
pub(crate) fn check_changed(old: Option<&Runtime>, rt: &Runtime, f: &mut ValidationOutcome) {
    let unchanged = |key: &str| old.is_some_and(|o| o.label(key) == rt.label(key));
    for key in names::REQUIRED_RUNTIME_LABELS {
        if unchanged(key) {
            continue;
        }
        let problem = match rt.label(key) {
            None => "is missing",
            Some(v) if v.trim().is_empty() => "is empty",
            Some(_) => continue,
        };
        f.violation(
            format!("metadata.labels[{key}]"),
            format!("required label {problem}; set it to {} (the infrastructure manager copies it to the Shoot and the GardenerCluster)", meaning(key)),
        );
    }
    // On CREATE only: an UPDATE that changes the label is refused as immutable, one message
    // for the field. A blank or missing label is reported above; a name missing at CREATE
    // (generateName) is refused too, as there is nothing the label could be checked against.
    if old.is_none()
        && rt
            .label(names::LABEL_RUNTIME_ID)
            .is_some_and(|id| !id.trim().is_empty())
        && let Err(foreign) = rt.own_runtime_id()
    {
        f.violation(
            format!("metadata.labels[{}]", names::LABEL_RUNTIME_ID),
            format!("{foreign}; set the label and metadata.name to the runtime ID"),
        );
    }
    if let Some(label) = rt.label(names::LABEL_SHOOT_NAME)
        && label != rt.spec.shoot.name
        && !unchanged(names::LABEL_SHOOT_NAME)
    {
        f.warning(
            format_args!("metadata.labels[{}]", names::LABEL_SHOOT_NAME),
            format_args!("is {label:?} but spec.shoot.name is {:?}; the GardenerCluster gets spec.shoot.name", rt.spec.shoot.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_missing_label_is_named_with_what_it_holds() {
        let meanings = [
            "the KEB instance ID",
            "the runtime ID",
            "the provider region",
            "the name of the Kyma resource",
            "the KEB plan ID",
            "the KEB plan name",
            "the global account ID",
            "the subaccount ID",
        ];
        let mut rt = Runtime::new("r", Default::default());
        rt.metadata.labels = Some(Default::default());
        let mut f = ValidationOutcome::default();
        check(&rt, &mut f);
        let got: Vec<(String, String)> = f
            .violations
            .into_iter()
            .map(|v| (v.field, v.message))
            .collect();
        let want: Vec<(String, String)> = names::REQUIRED_RUNTIME_LABELS
            .iter()
            .zip(meanings)
            .map(|(key, meaning)| {
                (
                    format!("metadata.labels[{key}]"),
                    format!("required label is missing; set it to {meaning} (the infrastructure manager copies it to the Shoot and the GardenerCluster)"),
                )
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(meaning("kyma-project.io/other"), "a non-empty value");
    }
}
