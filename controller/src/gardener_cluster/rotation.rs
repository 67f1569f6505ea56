//! When an admin kubeconfig must be fetched again: upstream's rotation math, as pure functions of
//! `now`.
//!
//! Upstream: `rotationPeriod = ratio x expiration` and a rotation is due once
//! `now - lastSync >= 0.95 x rotationPeriod`. We compute in whole seconds instead of upstream's
//! whole minutes, so a test can use a rotation period of seconds with a valid (>= 600 s) request.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// Upstream's constant `rotationPeriodRatio`: rotate at 95 % of the rotation period.
pub const ROTATION_PERIOD_RATIO: f64 = 0.95;

/// The share of `rotate_after` by which a GardenerCluster's rotations come early, a fixed
/// fraction of it per name ([`RotationPolicy::rotate_after_for`]).
pub const ROTATION_SPREAD: f64 = 0.1;

/// Gardener rejects an `AdminKubeconfigRequest` with `expirationSeconds` below 600.
pub const MIN_EXPIRATION: Duration = Duration::from_secs(600);

/// Largest `expirationSeconds` Gardener's validation accepts (2^32 - 1).
pub const MAX_EXPIRATION: Duration = Duration::from_secs(u32::MAX as u64);

/// A last-sync this far in the future is treated as corrupt (clock skew of a few seconds is not).
const FUTURE_TOLERANCE: SignedDuration = SignedDuration::from_secs(60);

/// A rotation policy that cannot work; the message names the flag and the valid range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RotationPolicyError {
    /// The expiration is outside what Gardener accepts.
    #[error(
        "--kubeconfig-expiration-time is {given:?}; Gardener accepts 10m to {max:?} (4294967295s)",
        max = MAX_EXPIRATION
    )]
    Expiration {
        /// The configured expiration.
        given: Duration,
    },
    /// The ratio is not a number in (0, 1].
    #[error("--minimal-rotation-time is {given}; it must be a ratio greater than 0 and at most 1")]
    Ratio {
        /// The configured ratio.
        given: f64,
    },
}

/// How long issued admin kubeconfigs live and when they are replaced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RotationPolicy {
    expiration: Duration,
    minimal_rotation_ratio: f64,
}

impl RotationPolicy {
    /// Upstream's defaults: 24h validity, rotation period 0.6 x 24h.
    pub fn upstream_default() -> Self {
        Self {
            expiration: Duration::from_secs(24 * 3600),
            minimal_rotation_ratio: 0.6,
        }
    }

    /// A policy from `--kubeconfig-expiration-time` and `--minimal-rotation-time`.
    pub fn new(
        expiration: Duration,
        minimal_rotation_ratio: f64,
    ) -> Result<Self, RotationPolicyError> {
        if !(MIN_EXPIRATION..=MAX_EXPIRATION).contains(&expiration) {
            return Err(RotationPolicyError::Expiration { given: expiration });
        }
        if !(minimal_rotation_ratio.is_finite()
            && minimal_rotation_ratio > 0.0
            && minimal_rotation_ratio <= 1.0)
        {
            return Err(RotationPolicyError::Ratio {
                given: minimal_rotation_ratio,
            });
        }
        Ok(Self {
            expiration,
            minimal_rotation_ratio,
        })
    }

    /// The validity requested from Gardener.
    pub fn expiration(&self) -> Duration {
        self.expiration
    }

    /// `spec.expirationSeconds` of the `AdminKubeconfigRequest`.
    pub fn expiration_seconds(&self) -> i64 {
        // Bounded by MAX_EXPIRATION in `new`, so the cast cannot truncate.
        self.expiration.as_secs() as i64
    }

    /// `ratio x expiration`, truncated to whole seconds (upstream truncates to whole minutes).
    pub fn rotation_period(&self) -> Duration {
        Duration::from_secs((self.minimal_rotation_ratio * self.expiration.as_secs_f64()) as u64)
    }

    /// `0.95 x rotation period`: how old a kubeconfig may get before it is replaced.
    pub fn rotate_after(&self) -> Duration {
        Duration::from_millis(
            (ROTATION_PERIOD_RATIO * self.rotation_period().as_millis() as f64) as u64,
        )
    }
}

impl RotationPolicy {
    /// [`Self::rotate_after`] for one GardenerCluster: earlier by up to [`ROTATION_SPREAD`], by
    /// a fraction fixed per name. Kubeconfigs signed in one wave (a burst of creations, a
    /// forced rotation of all) would otherwise fall due in the same minutes every period, each
    /// time a burst of signing calls to Gardener; with the fraction they drift apart.
    pub fn rotate_after_for(&self, name: &str) -> Duration {
        self.rotate_after()
            .mul_f64(1.0 - ROTATION_SPREAD * fraction_of(name))
    }
}

/// A number in [0, 1) fixed by `name`, stable across processes and releases: FNV-1a, then
/// MurmurHash3's final mix (FNV alone leaves the top bits of names that differ only at their
/// end close together).
fn fraction_of(name: &str) -> f64 {
    let fnv = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut hash = fnv ^ (fnv >> 33);
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    // The top 53 bits: exactly representable in an f64.
    (hash >> 11) as f64 / (1_u64 << 53) as f64
}

/// What the controller knows about the kubeconfig Secret, read from the KCP (never Gardener).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SecretState<'a> {
    /// No Secret with the name from the spec.
    Missing,
    /// The Secret exists but lacks the data key from the spec.
    KeyMissing,
    /// The Secret has its key; `last_sync` is the raw `operator.kyma-project.io/last-sync` value.
    Present {
        /// The annotation value, if any.
        last_sync: Option<&'a str>,
    },
}

/// Why a kubeconfig is fetched from Gardener now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationCause {
    /// There is no Secret yet.
    SecretMissing,
    /// The Secret exists without the kubeconfig key.
    KeyMissing,
    /// The Secret has no last-sync annotation.
    LastSyncMissing,
    /// The last-sync annotation is not an RFC 3339 timestamp, or lies in the future.
    LastSyncInvalid,
    /// `0.95 x rotation period` has passed since the last sync.
    Due,
    /// The force-rotation annotation is on the GardenerCluster.
    Forced,
    /// The Shoot's certificate authorities were rotated after the kubeconfig was signed: its
    /// CA bundle and client certificate stop working when the rotation completes.
    CaRotated,
}

impl RotationCause {
    /// True when the Secret already holds a kubeconfig that is being replaced (the condition
    /// reason is then `KubeconfigSecretRotated`, otherwise `KubeconfigSecretCreated`).
    pub fn replaces_existing(self) -> bool {
        !matches!(
            self,
            RotationCause::SecretMissing | RotationCause::KeyMissing
        )
    }
}

/// The decision for one reconcile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RotationDecision {
    /// Ask Gardener for a kubeconfig now.
    Rotate(RotationCause),
    /// Nothing to do; look again after this long (no Gardener call).
    Wait {
        /// Time until the rotation is due.
        requeue_after: Duration,
    },
}

/// Decides whether to ask Gardener for a new kubeconfig: upstream's rotation on time, plus the
/// forced rotation and one after a rotation of the Shoot's certificate authorities that the
/// kubeconfig predates (`new_cas_since`, [`kim_shared::gardener::status::TwoStepRotation::new_since`]).
pub fn decide(
    rotate_after: Duration,
    secret: SecretState<'_>,
    forced: bool,
    new_cas_since: Option<Timestamp>,
    now: Timestamp,
) -> RotationDecision {
    let last_sync = match secret {
        SecretState::Missing => return RotationDecision::Rotate(RotationCause::SecretMissing),
        SecretState::KeyMissing => return RotationDecision::Rotate(RotationCause::KeyMissing),
        _ if forced => return RotationDecision::Rotate(RotationCause::Forced),
        SecretState::Present { last_sync: None } => {
            return RotationDecision::Rotate(RotationCause::LastSyncMissing);
        }
        SecretState::Present {
            last_sync: Some(raw),
        } => match parse_last_sync(raw) {
            Some(ts) => ts,
            None => return RotationDecision::Rotate(RotationCause::LastSyncInvalid),
        },
    };
    let age = now.duration_since(last_sync);
    if age < -FUTURE_TOLERANCE {
        return RotationDecision::Rotate(RotationCause::LastSyncInvalid);
    }
    let cas = predating(last_sync, new_cas_since, now);
    if cas == Predating::Yes {
        return RotationDecision::Rotate(RotationCause::CaRotated);
    }
    // A small negative age (clock skew) counts as zero: wait the full period.
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    match rotate_after.checked_sub(age) {
        Some(remaining) if !remaining.is_zero() => RotationDecision::Wait {
            requeue_after: cas.wait_at_most(remaining),
        },
        _ => RotationDecision::Rotate(RotationCause::Due),
    }
}

/// How credentials signed at `signed` stand to a Gardener rotation whose new credentials are in
/// place since `since` ([`kim_shared::gardener::status::TwoStepRotation::new_since`]), at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Predating {
    /// Signed after the new credentials were in place, or there was no rotation.
    No,
    /// Signed before: they stop working when the rotation completes.
    Yes,
    /// Signed before, but the time lies this far ahead of our clock (the gardenlet's clock is
    /// ahead): credentials signed now would predate it too, so the replacement waits.
    AheadOfOurClock(Duration),
}

impl Predating {
    /// `requeue_after`, or earlier when our clock reaches the rotation sooner.
    pub fn wait_at_most(self, requeue_after: Duration) -> Duration {
        match self {
            Predating::AheadOfOurClock(ahead) => ahead.min(requeue_after),
            Predating::No | Predating::Yes => requeue_after,
        }
    }
}

/// [`Predating`] of credentials signed at `signed`. Both times have whole seconds: credentials
/// signed in the very second the new ones were in place count as signed after, so they are
/// never replaced again and again within that second.
pub fn predating(signed: Timestamp, since: Option<Timestamp>, now: Timestamp) -> Predating {
    let Some(since) = since.filter(|&since| signed < since) else {
        return Predating::No;
    };
    match Duration::try_from(since.duration_since(now)) {
        Ok(ahead) if !ahead.is_zero() => Predating::AheadOfOurClock(ahead),
        _ => Predating::Yes,
    }
}

/// True when the force-rotation annotation asks for a rotation that has not been served yet.
/// `served` is the resourceVersion at which this controller last served one: seeing that
/// version again means a stale read of an object whose annotation is already being removed.
pub fn force_pending(
    annotated: bool,
    resource_version: Option<&str>,
    served: Option<&str>,
) -> bool {
    annotated && (served.is_none() || resource_version != served)
}

/// Reads the last-sync annotation (RFC 3339; upstream writes UTC with second precision).
pub fn parse_last_sync(raw: &str) -> Option<Timestamp> {
    raw.trim().parse::<Timestamp>().ok()
}

/// Writes the last-sync annotation the way upstream does: RFC 3339, UTC, whole seconds.
pub fn format_last_sync(now: Timestamp) -> String {
    Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// When a kubeconfig synced at `last_sync` expires (for the expiration metric): last sync plus
/// the requested validity, as upstream computes it, or the expiry Gardener issued it with
/// (`valid_until`) when that is earlier.
pub fn expires_at(
    policy: &RotationPolicy,
    last_sync: Timestamp,
    valid_until: Option<Timestamp>,
) -> Timestamp {
    let requested = SignedDuration::try_from(policy.expiration())
        .ok()
        .and_then(|d| last_sync.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX);
    valid_until.map_or(requested, |issued| issued.min(requested))
}

/// [`RotationPolicy::rotate_after_for`] of the GardenerCluster `name` for a kubeconfig synced at
/// `last_sync` that Gardener issued valid until `valid_until`: the same share of the validity it
/// really has. Gardener caps the validity at its `--shoot-admin-kubeconfig-max-expiration`
/// (24 h by default): with a longer `--kubeconfig-expiration-time` a rotation planned from the
/// flag alone came after the kubeconfig had expired.
pub fn rotate_after_issued(
    policy: &RotationPolicy,
    name: &str,
    last_sync: Option<Timestamp>,
    valid_until: Option<Timestamp>,
) -> Duration {
    let planned = policy.rotate_after_for(name);
    let (Some(synced), Some(until)) = (last_sync, valid_until) else {
        return planned;
    };
    let valid = Duration::try_from(until.duration_since(synced)).unwrap_or(Duration::ZERO);
    if valid >= policy.expiration() {
        return planned;
    }
    planned.mul_f64(valid.as_secs_f64() / policy.expiration().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn present(raw: &str) -> SecretState<'_> {
        SecretState::Present {
            last_sync: Some(raw),
        }
    }

    #[test]
    fn upstream_defaults_give_upstream_periods() {
        let p = RotationPolicy::upstream_default();
        assert_eq!(p.expiration_seconds(), 86_400);
        assert_eq!(p.rotation_period(), Duration::from_secs(864 * 60)); // 14.4h
        assert_eq!(p.rotate_after(), Duration::from_secs(49_248)); // 820.8 min
    }

    #[test]
    fn seconds_not_minutes_so_tests_can_rotate_fast() {
        let p = RotationPolicy::new(Duration::from_secs(600), 0.01).unwrap();
        assert_eq!(p.rotation_period(), Duration::from_secs(6));
        assert_eq!(p.rotate_after(), Duration::from_millis(5_700));
    }

    #[test]
    fn rejects_policies_gardener_or_the_math_cannot_use() {
        assert!(matches!(
            RotationPolicy::new(Duration::from_secs(599), 0.6),
            Err(RotationPolicyError::Expiration { .. })
        ));
        for bad in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                RotationPolicy::new(Duration::from_secs(3600), bad),
                Err(RotationPolicyError::Ratio { .. })
            ));
        }
        assert!(RotationPolicy::new(Duration::from_secs(3600), 1.0).is_ok());
        let msg = RotationPolicy::new(Duration::from_secs(10), 0.5)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--kubeconfig-expiration-time"), "{msg}");
    }

    #[test]
    fn rotations_come_early_by_a_fixed_fraction_per_name_spread_over_a_tenth() {
        let p = RotationPolicy::upstream_default();
        let full = p.rotate_after().as_secs_f64();
        let shares: Vec<f64> = (0..1000)
            .map(|i| p.rotate_after_for(&format!("runtime-{i}")).as_secs_f64() / full)
            .collect();
        assert!(shares.iter().all(|s| (0.9..=1.0).contains(s)), "{shares:?}");
        let (low, high) = shares
            .iter()
            .fold((1.0_f64, 0.0_f64), |(l, h), s| (l.min(*s), h.max(*s)));
        assert!(low < 0.905 && high > 0.995, "spread {low}..{high}");
        // Each tenth of the range holds some names.
        for tenth in 0..10 {
            let from = 0.9 + 0.01 * f64::from(tenth);
            assert!(
                shares.iter().any(|s| (from..from + 0.01).contains(s)),
                "no name in {from}..{}",
                from + 0.01
            );
        }
        assert_eq!(p.rotate_after_for("a"), p.rotate_after_for("a"));
    }

    #[test]
    fn waits_until_95_percent_of_the_rotation_period() {
        let p = RotationPolicy::upstream_default();
        let synced = "2026-01-01T00:00:00Z";
        assert_eq!(
            decide(
                p.rotate_after(),
                present(synced),
                false,
                None,
                ts("2026-01-01T10:00:00Z")
            ),
            RotationDecision::Wait {
                requeue_after: Duration::from_secs(49_248 - 36_000)
            }
        );
        // One second before the boundary still waits; at the boundary it rotates.
        let just_before = ts(synced)
            .checked_add(SignedDuration::from_secs(49_247))
            .unwrap();
        assert!(matches!(
            decide(p.rotate_after(), present(synced), false, None, just_before),
            RotationDecision::Wait { .. }
        ));
        let at = ts(synced)
            .checked_add(SignedDuration::from_secs(49_248))
            .unwrap();
        assert_eq!(
            decide(p.rotate_after(), present(synced), false, None, at),
            RotationDecision::Rotate(RotationCause::Due)
        );
    }

    #[test]
    fn missing_secret_key_or_annotation_rotates_at_once() {
        let p = RotationPolicy::upstream_default();
        let now = ts("2026-01-01T00:00:00Z");
        assert_eq!(
            decide(p.rotate_after(), SecretState::Missing, false, None, now),
            RotationDecision::Rotate(RotationCause::SecretMissing)
        );
        assert_eq!(
            decide(p.rotate_after(), SecretState::KeyMissing, true, None, now),
            RotationDecision::Rotate(RotationCause::KeyMissing)
        );
        assert_eq!(
            decide(
                p.rotate_after(),
                SecretState::Present { last_sync: None },
                false,
                None,
                now
            ),
            RotationDecision::Rotate(RotationCause::LastSyncMissing)
        );
        assert_eq!(
            decide(p.rotate_after(), present("yesterday"), false, None, now),
            RotationDecision::Rotate(RotationCause::LastSyncInvalid)
        );
    }

    #[test]
    fn force_rotates_a_fresh_secret_and_counts_as_a_replacement() {
        let p = RotationPolicy::upstream_default();
        let now = ts("2026-01-01T00:00:10Z");
        let d = decide(
            p.rotate_after(),
            present("2026-01-01T00:00:00Z"),
            true,
            None,
            now,
        );
        assert_eq!(d, RotationDecision::Rotate(RotationCause::Forced));
        assert!(RotationCause::Forced.replaces_existing());
        assert!(RotationCause::Due.replaces_existing());
        assert!(!RotationCause::SecretMissing.replaces_existing());
    }

    #[test]
    fn a_kubeconfig_signed_before_new_cas_were_in_place_is_replaced() {
        let p = RotationPolicy::upstream_default();
        let synced = "2026-01-01T00:00:00Z";
        let now = ts("2026-01-01T01:00:00Z");
        let decide_with = |since: Option<&str>| {
            decide(p.rotate_after(), present(synced), false, since.map(ts), now)
        };
        assert_eq!(
            decide_with(Some("2026-01-01T00:00:01Z")),
            RotationDecision::Rotate(RotationCause::CaRotated)
        );
        assert!(RotationCause::CaRotated.replaces_existing());
        // Signed in the second the CAs were in place, or after: nothing to replace.
        for since in [None, Some(synced), Some("2025-12-31T23:59:59Z")] {
            assert_eq!(
                decide_with(since),
                RotationDecision::Wait {
                    requeue_after: p.rotate_after() - Duration::from_secs(3600)
                },
                "{since:?}"
            );
        }
        // In place by a clock ahead of ours: the rotation waits until our clock gets there.
        assert_eq!(
            decide_with(Some("2026-01-01T01:00:30Z")),
            RotationDecision::Wait {
                requeue_after: Duration::from_secs(30)
            }
        );
        assert_eq!(
            decide(
                p.rotate_after(),
                present(synced),
                false,
                Some(ts("2026-01-01T01:00:00Z")),
                now
            ),
            RotationDecision::Rotate(RotationCause::CaRotated)
        );
        // A missing Secret or a forced rotation keeps its own cause.
        assert_eq!(
            decide(
                p.rotate_after(),
                SecretState::Missing,
                false,
                Some(ts("2026-01-01T00:00:01Z")),
                now
            ),
            RotationDecision::Rotate(RotationCause::SecretMissing)
        );
    }

    #[test]
    fn a_force_is_served_once_per_object_version() {
        assert!(force_pending(true, Some("10"), None));
        assert!(
            !force_pending(true, Some("10"), Some("10")),
            "stale read of a served request"
        );
        assert!(
            force_pending(true, Some("12"), Some("10")),
            "annotated again later"
        );
        assert!(!force_pending(false, Some("12"), None));
    }

    #[test]
    fn clock_skew_waits_but_a_far_future_sync_rotates() {
        let p = RotationPolicy::upstream_default();
        let now = ts("2026-01-01T00:00:00Z");
        assert_eq!(
            decide(
                p.rotate_after(),
                present("2026-01-01T00:00:30Z"),
                false,
                None,
                now
            ),
            RotationDecision::Wait {
                requeue_after: p.rotate_after()
            }
        );
        assert_eq!(
            decide(
                p.rotate_after(),
                present("2026-01-02T00:00:00Z"),
                false,
                None,
                now
            ),
            RotationDecision::Rotate(RotationCause::LastSyncInvalid)
        );
        // Exactly the tolerated skew still waits.
        assert_eq!(
            decide(
                p.rotate_after(),
                present("2026-01-01T00:01:00Z"),
                false,
                None,
                now
            ),
            RotationDecision::Wait {
                requeue_after: p.rotate_after()
            }
        );
    }

    #[test]
    fn last_sync_round_trips_in_upstream_format() {
        let now = ts("2026-03-04T05:06:07.891Z");
        let raw = format_last_sync(now);
        assert_eq!(raw, "2026-03-04T05:06:07Z");
        assert_eq!(parse_last_sync(&raw), Some(ts("2026-03-04T05:06:07Z")));
        // Upstream Secrets written with an offset still parse.
        assert_eq!(
            parse_last_sync("2026-03-04T07:06:07+02:00"),
            Some(ts("2026-03-04T05:06:07Z"))
        );
        assert_eq!(parse_last_sync(""), None);
    }

    #[test]
    fn a_shorter_issued_validity_rotates_and_expires_as_issued() {
        let policy = RotationPolicy::new(Duration::from_secs(48 * 3600), 0.6).expect("valid");
        let synced = ts("2026-12-01T00:00:00Z");
        let capped = ts("2026-12-02T00:00:00Z");
        let planned = policy.rotate_after_for("gc");
        assert_eq!(
            rotate_after_issued(&policy, "gc", Some(synced), Some(capped)),
            planned / 2
        );
        assert!(planned / 2 < Duration::from_secs(24 * 3600));
        assert_eq!(expires_at(&policy, synced, Some(capped)), capped);
        // Issued as asked, or not known (a Secret of an earlier release): the flag decides.
        let full = ts("2026-12-03T00:00:00Z");
        assert_eq!(
            rotate_after_issued(&policy, "gc", Some(synced), Some(full)),
            planned
        );
        assert_eq!(
            rotate_after_issued(&policy, "gc", Some(synced), None),
            planned
        );
        assert_eq!(expires_at(&policy, synced, None), full);
        // An expiry before the sync (a broken annotation) rotates at once.
        assert_eq!(
            rotate_after_issued(&policy, "gc", Some(capped), Some(synced)),
            Duration::ZERO
        );
    }

    #[test]
    fn expiry_is_last_sync_plus_validity() {
        let p = RotationPolicy::upstream_default();
        assert_eq!(
            expires_at(&p, ts("2026-01-01T00:00:00Z"), None),
            ts("2026-01-02T00:00:00Z")
        );
    }
}
