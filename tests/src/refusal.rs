//! An admission policy in a cluster (a ValidatingAdmissionPolicy and its binding) that refuses
//! what a test names, as a real cluster's admission could: the controller's writes into runtime
//! clusters meet it.

use anyhow::Result;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

/// The policy `name` and its binding, until [`Refusal::delete`].
pub struct Refusal {
    policies: Api<DynamicObject>,
    bindings: Api<DynamicObject>,
    name: String,
}

impl Refusal {
    /// Refuses what matches the resource `rule` unless `expression` (CEL) holds, with
    /// `message`. The apiserver applies it once it has compiled it: probe before relying on it.
    pub async fn create(
        client: &kube::Client,
        name: &str,
        rule: Value,
        expression: &str,
        message: &str,
    ) -> Result<Self> {
        let validation = json!({"expression": expression, "message": message});
        Self::create_with(client, name, rule, validation).await
    }

    /// As [`Refusal::create`], with a message made by the CEL `message_expression` for each
    /// request (it can name the request's `uid`, so that no two refusals read the same).
    pub async fn create_with_message_expression(
        client: &kube::Client,
        name: &str,
        rule: Value,
        expression: &str,
        message_expression: &str,
    ) -> Result<Self> {
        let validation = json!({
            "expression": expression,
            "message": "refused",
            "messageExpression": message_expression,
        });
        Self::create_with(client, name, rule, validation).await
    }

    async fn create_with(
        client: &kube::Client,
        name: &str,
        rule: Value,
        validation: Value,
    ) -> Result<Self> {
        let resource = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
                plural,
            )
        };
        let policies: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        );
        let bindings: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
            ),
        );
        let policy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [validation]
            }
        }))?;
        let binding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]}
        }))?;
        policies.create(&PostParams::default(), &policy).await?;
        bindings.create(&PostParams::default(), &binding).await?;
        Ok(Self {
            policies,
            bindings,
            name: name.to_owned(),
        })
    }

    /// Removes the binding and the policy.
    pub async fn delete(self) -> Result<()> {
        self.bindings
            .delete(&self.name, &DeleteParams::default())
            .await?;
        self.policies
            .delete(&self.name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}
