//! What to rotate, given what the Secret holds and the wall-clock time. Pure: no I/O, no clock.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::policy::RotationPolicy;

/// Validity of one CA in the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaValidity {
    /// Start of validity (backdated against clock skew; orders CAs by age).
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
}

/// What is known about the current serving certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServingValidity {
    /// End of validity.
    pub not_after: SystemTime,
    /// Index (in the bundle) of the CA that signed it; `None` when no CA in the bundle did.
    pub issuer: Option<usize>,
    /// Whether its subject alternative names include every wanted one. More are accepted:
    /// during a rollout two versions side by side, one naming a host the other does not,
    /// would otherwise re-issue the shared certificate in turn on every tick.
    pub names_cover: bool,
    /// Whether the stored private key belongs to it. A key replaced by hand would fail every
    /// load of the pair until the certificate is due anyway; a new certificate replaces both.
    pub key_matches: bool,
}

/// The certificate state as stored, reduced to what decisions need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertState {
    /// Trusted CAs, oldest first.
    pub cas: Vec<CaValidity>,
    /// The serving certificate, if one is stored.
    pub serving: Option<ServingValidity>,
    /// Per CA (same index as `cas`): since when the live caBundle of every webhook has
    /// contained it without interruption ([`PropagationClock`]); `None` or missing: not seen
    /// there yet.
    pub trusted_since: Vec<Option<SystemTime>>,
}

/// Since when each CA has been in the caBundle that the apiserver reads, as read from the
/// webhook configurations before each injection. The propagation time of a new CA runs from here, not from its
/// creation: a CA whose caBundle injection is blocked (RBAC removed, configuration reverted)
/// never becomes the signer while another CA can sign.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PropagationClock {
    since: BTreeMap<Vec<u8>, SystemTime>,
}

impl PropagationClock {
    /// Records what was read at `now`: `live` holds one caBundle per webhook of every
    /// configuration (each as the DER certificates it contains), `cas` the bundle's CAs (DER).
    /// A CA missing from any webhook, or with no webhook read at all, restarts its clock;
    /// CAs that left the bundle are forgotten.
    pub fn observe(&mut self, cas: &[Vec<u8>], live: &[Vec<Vec<u8>>], now: SystemTime) {
        let everywhere = |ca: &Vec<u8>| !live.is_empty() && live.iter().all(|b| b.contains(ca));
        self.since
            .retain(|ca, _| cas.contains(ca) && everywhere(ca));
        for ca in cas.iter().filter(|ca| everywhere(ca)) {
            self.since.entry(ca.clone()).or_insert(now);
        }
    }

    /// [`CertState::trusted_since`] for `cas` (DER, bundle order).
    pub fn trusted_since(&self, cas: &[Vec<u8>]) -> Vec<Option<SystemTime>> {
        cas.iter().map(|ca| self.since.get(ca).copied()).collect()
    }

    /// How many of `cas` are not in every live caBundle.
    pub fn unpropagated(&self, cas: &[Vec<u8>]) -> usize {
        cas.iter()
            .filter(|ca| !self.since.contains_key(*ca))
            .count()
    }
}

/// The CA that signs the next serving certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// A CA already in the bundle (index into [`CertState::cas`]).
    Existing(usize),
    /// The CA this plan generates.
    New,
}

/// Why a certificate is replaced; logged with every rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Nothing is stored yet.
    Missing,
    /// The certificate is inside its renewal margin.
    RenewalDue,
    /// The certificate has expired (the check ran too late, e.g. after a suspend).
    Expired,
    /// The serving certificate was signed by a CA no longer in the bundle.
    IssuerNotTrusted,
    /// The serving certificate lacks a configured host.
    NamesChanged,
    /// The stored private key is not the serving certificate's.
    KeyMismatch,
    /// A newer CA has been in every webhook's live caBundle for the propagation time; the
    /// serving certificate moves to it.
    NewerCaTrusted,
}

/// The changes to make, all at once, in one write of the Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Generate a new CA and append it to the bundle.
    pub add_ca: Option<Reason>,
    /// Remove these CAs (indices into [`CertState::cas`]): they have expired.
    pub drop_cas: Vec<usize>,
    /// Issue a new serving certificate, signed by this CA.
    pub issue_serving: Option<(Signer, Reason)>,
}

impl Plan {
    /// True when the stored state is fine as it is.
    pub fn is_empty(&self) -> bool {
        self.add_ca.is_none() && self.drop_cas.is_empty() && self.issue_serving.is_none()
    }
}

fn remaining(not_after: SystemTime, now: SystemTime) -> Duration {
    not_after.duration_since(now).unwrap_or(Duration::ZERO)
}

/// Decides what to rotate at `now`.
///
/// Invariants kept: a CA leaves the bundle only once expired; a new CA signs only after it has
/// been in every webhook's live caBundle for `bundle_propagation` (unless no other CA is
/// usable); a serving certificate never outlives its CA.
pub fn plan(state: &CertState, now: SystemTime, policy: &RotationPolicy) -> Plan {
    let mut out = Plan::default();

    let live: Vec<usize> = (0..state.cas.len())
        .filter(|&i| state.cas[i].not_after > now)
        .collect();
    out.drop_cas = (0..state.cas.len()).filter(|i| !live.contains(i)).collect();

    // The newest live CA decides whether a successor is due.
    let newest = live
        .iter()
        .copied()
        .max_by_key(|&i| state.cas[i].not_before);
    out.add_ca = match newest {
        None if state.cas.is_empty() => Some(Reason::Missing),
        None => Some(Reason::Expired),
        Some(i) if remaining(state.cas[i].not_after, now) <= policy.ca_renew_before => {
            Some(Reason::RenewalDue)
        }
        Some(_) => None,
    };

    // Preferred signer: the newest CA that every apiserver trusts by now: one that has sat in
    // every webhook's live caBundle for the propagation time, or the one already presented.
    // Without such a CA (first start, or a replica that has not read the configurations yet)
    // the oldest live CA signs: it has been in the bundle longest. A CA generated by this plan
    // signs only when no CA is live.
    let presented = state
        .serving
        .and_then(|s| s.issuer)
        .filter(|i| live.contains(i));
    let propagated = |i: &usize| {
        Some(*i) == presented
            || state
                .trusted_since
                .get(*i)
                .copied()
                .flatten()
                .and_then(|t| t.checked_add(policy.bundle_propagation))
                .is_some_and(|t| t <= now)
    };
    let preferred = live
        .iter()
        .copied()
        .filter(propagated)
        .max_by_key(|&i| state.cas[i].not_before)
        .or_else(|| {
            live.iter()
                .copied()
                .min_by_key(|&i| state.cas[i].not_before)
        })
        .map(Signer::Existing)
        .unwrap_or(Signer::New);

    let signer_expiry = |s: Signer| match s {
        Signer::Existing(i) => state.cas[i].not_after,
        Signer::New => now + policy.ca_lifetime,
    };
    let would_expire = (now + policy.serving_lifetime).min(signer_expiry(preferred));

    let reason = match state.serving {
        None => Some(Reason::Missing),
        Some(s) if s.not_after <= now => Some(Reason::Expired),
        Some(s) if !s.key_matches => Some(Reason::KeyMismatch),
        Some(s) if s.issuer.is_none_or(|i| !live.contains(&i)) => Some(Reason::IssuerNotTrusted),
        Some(s) if !s.names_cover => Some(Reason::NamesChanged),
        Some(ServingValidity {
            issuer: Some(i), ..
        }) if matches!(preferred, Signer::Existing(p) if state.cas[p].not_before > state.cas[i].not_before) => {
            Some(Reason::NewerCaTrusted)
        }
        // Re-issuing only helps when the new certificate lives longer; otherwise (capped at an
        // old CA's expiry while its successor propagates) we would re-issue on every tick.
        Some(s)
            if remaining(s.not_after, now) <= policy.serving_renew_before
                && would_expire > s.not_after =>
        {
            Some(Reason::RenewalDue)
        }
        Some(_) => None,
    };
    out.issue_serving = reason.map(|r| (preferred, r));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + s)
    }

    /// CA 60 s, serving 9 s (renew with 3 s left), CA renewed with 20 s left, propagation 2 s.
    fn policy() -> RotationPolicy {
        RotationPolicy::from_lifetimes(
            Duration::from_secs(60),
            Duration::from_secs(9),
            Duration::from_secs(2),
            Duration::from_secs(1),
        )
    }

    fn ca(from: u64, until: u64) -> CaValidity {
        CaValidity {
            not_before: at(from),
            not_after: at(until),
        }
    }

    /// A state in which every CA has been in the live caBundle since its `not_before`.
    fn state(cas: Vec<CaValidity>, serving: Option<ServingValidity>) -> CertState {
        CertState {
            trusted_since: cas.iter().map(|c| Some(c.not_before)).collect(),
            cas,
            serving,
        }
    }

    fn serving(until: u64, issuer: usize) -> ServingValidity {
        ServingValidity {
            not_after: at(until),
            issuer: Some(issuer),
            names_cover: true,
            key_matches: true,
        }
    }

    #[test]
    fn empty_state_creates_ca_and_serving_signed_by_it() {
        let p = plan(&CertState::default(), at(0), &policy());
        assert_eq!(p.add_ca, Some(Reason::Missing));
        assert_eq!(p.issue_serving, Some((Signer::New, Reason::Missing)));
        assert!(p.drop_cas.is_empty());
    }

    #[test]
    fn plan_with_any_change_is_not_empty() {
        assert!(Plan::default().is_empty());
        let add_ca = Plan {
            add_ca: Some(Reason::Missing),
            ..Plan::default()
        };
        let drop_cas = Plan {
            drop_cas: vec![0],
            ..Plan::default()
        };
        let issue_serving = Plan {
            issue_serving: Some((Signer::New, Reason::Missing)),
            ..Plan::default()
        };
        for p in [add_ca, drop_cas, issue_serving] {
            assert!(!p.is_empty(), "{p:?} changes the Secret");
        }
    }

    #[test]
    fn fresh_state_needs_nothing() {
        let s = state(vec![ca(0, 60)], Some(serving(9, 0)));
        assert!(plan(&s, at(1), &policy()).is_empty());
    }

    #[test]
    fn serving_renewed_inside_margin_with_same_ca() {
        let s = state(vec![ca(0, 60)], Some(serving(9, 0)));
        assert!(plan(&s, at(5), &policy()).is_empty());
        let p = plan(&s, at(6), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(0), Reason::RenewalDue))
        );
        assert_eq!(p.add_ca, None);
    }

    #[test]
    fn expired_serving_is_replaced() {
        let s = state(vec![ca(0, 60)], Some(serving(9, 0)));
        let p = plan(&s, at(30), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(0), Reason::Expired))
        );
    }

    #[test]
    fn ca_renewal_appends_ca_but_keeps_signing_with_old_one() {
        let s = state(vec![ca(0, 60)], Some(serving(45, 0)));
        let p = plan(&s, at(40), &policy());
        assert_eq!(p.add_ca, Some(Reason::RenewalDue));
        assert_eq!(
            p.issue_serving, None,
            "the new CA is not trusted anywhere yet"
        );
        assert!(p.drop_cas.is_empty());
    }

    #[test]
    fn serving_moves_to_new_ca_once_propagated() {
        let s = state(vec![ca(0, 60), ca(40, 100)], Some(serving(47, 0)));
        assert!(plan(&s, at(41), &policy()).is_empty(), "still propagating");
        let p = plan(&s, at(42), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(1), Reason::NewerCaTrusted))
        );
        assert_eq!(p.add_ca, None);
        assert!(
            p.drop_cas.is_empty(),
            "old CA stays trusted until it expires"
        );
    }

    #[test]
    fn renewal_during_propagation_uses_old_ca() {
        let s = state(vec![ca(0, 60), ca(40, 100)], Some(serving(42, 0)));
        let p = plan(&s, at(40), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(0), Reason::RenewalDue))
        );
    }

    #[test]
    fn capped_serving_is_not_reissued_every_tick() {
        // Serving already ends with its CA; re-issuing by the same CA gains nothing.
        let mut pol = policy();
        pol.bundle_propagation = Duration::from_secs(30);
        let s = state(vec![ca(0, 60), ca(50, 110)], Some(serving(60, 0)));
        assert_eq!(plan(&s, at(58), &pol).issue_serving, None);
    }

    #[test]
    fn expired_ca_is_dropped_from_bundle() {
        let s = state(vec![ca(0, 60), ca(40, 100)], Some(serving(70, 1)));
        let p = plan(&s, at(60), &policy());
        assert_eq!(p.drop_cas, vec![0]);
        assert_eq!(p.issue_serving, None);
        assert_eq!(p.add_ca, None);
    }

    #[test]
    fn everything_expired_starts_over() {
        let s = state(vec![ca(0, 60)], Some(serving(9, 0)));
        let p = plan(&s, at(1000), &policy());
        assert_eq!(p.add_ca, Some(Reason::Expired));
        assert_eq!(p.drop_cas, vec![0]);
        assert_eq!(p.issue_serving, Some((Signer::New, Reason::Expired)));
    }

    #[test]
    fn serving_from_unknown_ca_is_replaced() {
        let s = state(
            vec![ca(0, 60)],
            Some(ServingValidity {
                not_after: at(9),
                issuer: None,
                names_cover: true,
                key_matches: true,
            }),
        );
        let p = plan(&s, at(1), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(0), Reason::IssuerNotTrusted))
        );
    }

    #[test]
    fn a_key_that_is_not_the_certificate_s_reissues() {
        let s = state(
            vec![ca(0, 60)],
            Some(ServingValidity {
                key_matches: false,
                ..serving(9, 0)
            }),
        );
        let p = plan(&s, at(1), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(0), Reason::KeyMismatch))
        );
    }

    #[test]
    fn changed_names_reissue() {
        let s = state(
            vec![ca(0, 60)],
            Some(ServingValidity {
                not_after: at(9),
                issuer: Some(0),
                names_cover: false,
                key_matches: true,
            }),
        );
        let p = plan(&s, at(1), &policy());
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(0), Reason::NamesChanged))
        );
    }

    /// At a tick: the presented certificate's CA and since when the live bundle holds it.
    type Presented = (u64, CaValidity, Option<SystemTime>);

    /// One tick of the rotation loop against a modelled apiserver, tick by tick from `at(0)`:
    /// plan, carry out the plan, inject the bundle (unless injection is blocked from
    /// `blocked_from` on: the live caBundle then stays as it was), read the live bundle back
    /// into the clock. CAs are identified by their `not_before` seconds. Returns, per tick,
    /// the presented serving certificate's issuer and since when the live bundle holds it.
    fn simulate(ticks: u64, blocked_from: Option<u64>) -> (Vec<Presented>, usize, usize) {
        let pol = policy();
        let id = |c: &CaValidity| {
            c.not_before
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs().to_be_bytes().to_vec())
                .unwrap_or_default()
        };
        let mut state = CertState::default();
        let mut clock = PropagationClock::default();
        let mut live_bundle: Vec<Vec<u8>> = Vec::new();
        let (mut serving_rotations, mut ca_rotations) = (0, 0);
        let mut presented = Vec::new();
        for tick in 0..ticks {
            let now = at(tick);
            let ids: Vec<Vec<u8>> = state.cas.iter().map(id).collect();
            state.trusted_since = clock.trusted_since(&ids);
            let p = plan(&state, now, &pol);
            let mut cas = state.cas.clone();
            if p.add_ca.is_some() {
                cas.push(CaValidity {
                    not_before: now,
                    not_after: now + pol.ca_lifetime,
                });
                if !state.cas.is_empty() {
                    ca_rotations += 1;
                }
            }
            let new_index = cas.len() - 1;
            let mut serving = state.serving;
            if let Some((signer, _)) = p.issue_serving {
                let idx = match signer {
                    Signer::Existing(i) => i,
                    Signer::New => new_index,
                };
                let not_after = (now + pol.serving_lifetime).min(cas[idx].not_after);
                serving = Some(ServingValidity {
                    not_after,
                    issuer: Some(idx),
                    names_cover: true,
                    key_matches: true,
                });
                if state.serving.is_some() {
                    serving_rotations += 1;
                }
            }
            // Drop expired CAs and re-map the serving issuer index.
            let keep: Vec<usize> = (0..cas.len()).filter(|i| !p.drop_cas.contains(i)).collect();
            let issuer = serving
                .and_then(|s| s.issuer)
                .and_then(|i| keep.iter().position(|&k| k == i));
            state.cas = keep.iter().map(|&i| cas[i]).collect();
            state.serving = serving.map(|s| ServingValidity { issuer, ..s });

            let ids: Vec<Vec<u8>> = state.cas.iter().map(id).collect();
            if blocked_from.is_none_or(|b| tick < b) {
                live_bundle = ids.clone();
            }
            // Two webhooks, both with the bundle the apiserver holds.
            clock.observe(&ids, &[live_bundle.clone(), live_bundle.clone()], now);

            let s = state
                .serving
                .expect("a serving certificate exists after every tick");
            assert!(s.not_after > now, "tick {tick}: serving expired");
            let issuer = s.issuer.expect("issuer in bundle");
            let ca = state.cas[issuer];
            presented.push((tick, ca, clock.trusted_since(&[id(&ca)])[0]));
            assert!(
                state.cas.len() <= 2,
                "tick {tick}: bundle grows: {:?}",
                state.cas
            );
        }
        (presented, serving_rotations, ca_rotations)
    }

    /// Several cycles with a working injection: the presented certificate is valid and signed
    /// by a CA that has been in the live caBundle for at least the propagation time (the first
    /// CA excepted: nothing else exists), and several serving and CA rotations happen.
    #[test]
    fn simulated_cycles_never_present_an_untrusted_certificate() {
        let pol = policy();
        let (presented, serving_rotations, ca_rotations) = simulate(300, None);
        for (tick, ca, since) in presented {
            if ca.not_before == at(0) {
                continue;
            }
            let since =
                since.unwrap_or_else(|| panic!("tick {tick}: issuer not in the live bundle"));
            assert!(
                since + pol.bundle_propagation <= at(tick),
                "tick {tick}: serving signed by a CA not yet propagated"
            );
        }
        assert!(serving_rotations >= 20, "{serving_rotations}");
        assert!(ca_rotations >= 5, "{ca_rotations}");
    }

    /// Injection blocked before the second CA is created: the serving certificate stays with
    /// the first CA, renewed by it, until that CA expires (only then, with nothing else left,
    /// does the unpropagated CA sign).
    #[test]
    fn blocked_injection_keeps_the_old_ca_serving_until_it_expires() {
        let (presented, serving_rotations, _) = simulate(70, Some(10));
        for (tick, ca, _) in &presented {
            if *tick < 60 {
                assert_eq!(
                    ca.not_before,
                    at(0),
                    "tick {tick}: moved to an unpropagated CA"
                );
            }
        }
        assert!(
            presented.iter().any(|(_, ca, _)| ca.not_before > at(0)),
            "the second CA signs once the first has expired"
        );
        assert!(serving_rotations >= 5, "{serving_rotations}");
    }

    #[test]
    fn new_ca_absent_from_the_live_bundle_never_signs_while_the_old_one_lives() {
        let mut s = state(vec![ca(0, 60), ca(40, 100)], Some(serving(47, 0)));
        s.trusted_since = vec![Some(at(0)), None];
        for t in [41, 42, 43] {
            assert_eq!(plan(&s, at(t), &policy()).issue_serving, None, "at {t}");
        }
        // Renewal is due (3 s left): still the old CA.
        assert_eq!(
            plan(&s, at(45), &policy()).issue_serving,
            Some((Signer::Existing(0), Reason::RenewalDue))
        );
        // The old CA expired: nothing else can sign.
        let p = plan(&s, at(60), &policy());
        assert_eq!(p.drop_cas, vec![0]);
        assert_eq!(
            p.issue_serving,
            Some((Signer::Existing(1), Reason::Expired))
        );
    }

    #[test]
    fn propagation_runs_from_the_first_sighting_in_the_live_bundle() {
        let mut s = state(vec![ca(0, 60), ca(40, 100)], Some(serving(55, 0)));
        s.trusted_since = vec![Some(at(0)), Some(at(50))];
        assert_eq!(plan(&s, at(51), &policy()).issue_serving, None);
        assert_eq!(
            plan(&s, at(52), &policy()).issue_serving,
            Some((Signer::Existing(1), Reason::NewerCaTrusted))
        );
    }

    #[test]
    fn a_replica_without_sightings_keeps_the_presented_ca() {
        let mut s = state(vec![ca(0, 60), ca(40, 100)], Some(serving(47, 0)));
        s.trusted_since = Vec::new();
        assert!(
            plan(&s, at(42), &policy()).is_empty(),
            "no move to the new CA"
        );
        s.serving = Some(serving(49, 1));
        assert!(
            plan(&s, at(42), &policy()).is_empty(),
            "no move back to the old CA"
        );
    }

    #[test]
    fn clock_starts_when_every_webhook_holds_the_ca_and_restarts_when_one_loses_it() {
        let (a, b) = (vec![1u8], vec![2u8]);
        let cas = vec![a.clone(), b.clone()];
        let mut clock = PropagationClock::default();
        clock.observe(&cas, &[vec![a.clone(), b.clone()], vec![a.clone()]], at(1));
        assert_eq!(clock.trusted_since(&cas), vec![Some(at(1)), None]);
        assert_eq!(clock.unpropagated(&cas), 1);
        clock.observe(
            &cas,
            &[vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]],
            at(2),
        );
        assert_eq!(clock.trusted_since(&cas), vec![Some(at(1)), Some(at(2))]);
        assert_eq!(clock.unpropagated(&cas), 0);
        // A configuration reverted to the old bundle: b's clock starts over.
        clock.observe(&cas, &[vec![a.clone()], vec![a.clone(), b.clone()]], at(3));
        assert_eq!(clock.trusted_since(&cas), vec![Some(at(1)), None]);
        // No webhook read: nothing counts as propagated.
        clock.observe(&cas, &[], at(4));
        assert_eq!(clock.trusted_since(&cas), vec![None, None]);
        // A CA that left the bundle is forgotten.
        clock.observe(&cas, &[vec![a.clone(), b.clone()]], at(5));
        clock.observe(
            std::slice::from_ref(&b),
            &[vec![a.clone(), b.clone()]],
            at(6),
        );
        assert_eq!(clock.trusted_since(&[a, b]), vec![None, Some(at(5))]);
    }
}
