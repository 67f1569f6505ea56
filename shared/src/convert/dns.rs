//! `spec.dns`: the Shoot's external domain `<shoot>.<domainPrefix>` served by the configured
//! provider. With Gardener-internal DNS (all of `converter.dns` empty, upstream PR 715)
//! `spec.dns` stays unset and Gardener picks the domain.

use super::Input;
use crate::gardener::Shoot;
use crate::gardener::shoot::{CrossVersionObjectReference, Dns, DnsIncludeExclude, DnsProvider};

/// The external domain of the Shoot, `None` with Gardener-internal DNS.
pub(super) fn domain(input: &Input<'_>) -> Option<String> {
    let dns = &input.cfg.converter.dns;
    (!dns.is_gardener_internal()).then(|| format!("{}.{}", input.shoot().name, dns.domain_prefix))
}

/// Sets `spec.dns` with one primary provider. Its credentials are a `credentialsRef` to the
/// DNS Secret: `secretName` is forbidden from Kubernetes 1.35.
pub(super) fn create(input: &Input<'_>, shoot: &mut Shoot) {
    let Some(domain) = domain(input) else { return };
    let dns = &input.cfg.converter.dns;
    let provider = DnsProvider {
        credentials_ref: Some(CrossVersionObjectReference {
            api_version: Some("v1".to_owned()),
            kind: "Secret".to_owned(),
            name: dns.secret_name.clone(),
        }),
        domains: Some(DnsIncludeExclude {
            include: Some(vec![domain.clone()]),
            exclude: None,
        }),
        primary: Some(true),
        type_: Some(dns.provider_type.clone()),
        ..Default::default()
    };
    shoot.spec.dns = Some(Dns {
        domain: Some(domain),
        providers: Some(vec![provider]),
    });
}

/// On patch, `spec.dns` as the create writes it, but only over a live Shoot whose DNS has
/// providers and the domain the configuration gives: that moves a provider's deprecated
/// `secretName` (upstream's Shoots before 2026-05) to `credentialsRef`, which Gardener requires
/// from Kubernetes 1.35. Any other live DNS is kept: a Shoot made before custom domains or with
/// Gardener-internal DNS, or under another domain prefix (Gardener refuses a changed domain).
pub(super) fn patch(input: &Input<'_>, live: &Shoot, shoot: &mut Shoot) {
    if live_domain_is_ours(input, live) {
        let live_providers = live
            .spec
            .dns
            .as_ref()
            .and_then(|d| d.providers.as_ref())
            .is_some_and(|p| !p.is_empty());
        if live_providers {
            create(input, shoot);
        }
    }
}

/// Whether the configuration names an external domain and the live Shoot has exactly it.
pub(super) fn live_domain_is_ours(input: &Input<'_>, live: &Shoot) -> bool {
    let live_domain = live.spec.dns.as_ref().and_then(|d| d.domain.as_deref());
    domain(input).is_some_and(|ours| live_domain == Some(ours.as_str()))
}
