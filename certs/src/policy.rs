//! Lifetimes and renewal margins of the webhook certificates.

use std::time::Duration;

/// When certificates are issued, renewed and trusted. Every value is a parameter so that tests
/// can run whole rotation cycles in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Validity of a newly generated CA.
    pub ca_lifetime: Duration,
    /// Validity of a newly issued serving certificate (capped at its CA's expiry).
    pub serving_lifetime: Duration,
    /// A new CA is generated when the newest CA has less than this left.
    pub ca_renew_before: Duration,
    /// The serving certificate is re-issued when it has less than this left.
    pub serving_renew_before: Duration,
    /// How long a new CA sits in every webhook's live caBundle (as read back from the webhook
    /// configurations) before it signs serving certificates, so that every apiserver trusts it
    /// before it is presented.
    pub bundle_propagation: Duration,
    /// How often the wall clock and the Secret are checked.
    pub check_interval: Duration,
}

/// A policy whose margins cannot guarantee a rotation without failed handshakes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// A lifetime is zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// The offending parameter.
        field: &'static str,
    },
    /// A renewal margin is not shorter than the lifetime it belongs to.
    #[error("{margin} ({margin_value:?}) must be shorter than {lifetime} ({lifetime_value:?})")]
    MarginTooLong {
        /// The margin parameter.
        margin: &'static str,
        /// Its value.
        margin_value: Duration,
        /// The lifetime parameter.
        lifetime: &'static str,
        /// Its value.
        lifetime_value: Duration,
    },
    /// The CA is renewed too late for its successor to be trusted before the serving
    /// certificate must move to it.
    #[error(
        "ca_renew_before ({ca_renew_before:?}) must exceed serving_lifetime + bundle_propagation + 2 * check_interval ({needed:?}) so that the next CA is trusted everywhere before a serving certificate needs it"
    )]
    CaRenewedTooLate {
        /// The configured CA margin.
        ca_renew_before: Duration,
        /// The smallest margin that works.
        needed: Duration,
    },
    /// The check interval is too coarse to notice that a serving certificate needs renewal.
    #[error(
        "check_interval ({check_interval:?}) must be at most a third of serving_renew_before ({serving_renew_before:?})"
    )]
    CheckTooRare {
        /// The configured interval.
        check_interval: Duration,
        /// The serving margin.
        serving_renew_before: Duration,
    },
}

impl RotationPolicy {
    /// Production defaults: CA for 5 years (renewed with 1 year left), serving certificate for
    /// 90 days (renewed with 30 days left), a new CA trusted for 10 minutes before it signs,
    /// checks every 30 seconds.
    pub fn production() -> Self {
        const DAY: u64 = 24 * 3600;
        Self {
            ca_lifetime: Duration::from_secs(5 * 365 * DAY),
            serving_lifetime: Duration::from_secs(90 * DAY),
            ca_renew_before: Duration::from_secs(365 * DAY),
            serving_renew_before: Duration::from_secs(30 * DAY),
            bundle_propagation: Duration::from_secs(600),
            check_interval: Duration::from_secs(30),
        }
    }

    /// A policy derived from two lifetimes: each certificate is renewed at two thirds of
    /// its life; the CA margin is widened when needed to satisfy [`RotationPolicy::validate`].
    pub fn from_lifetimes(
        ca_lifetime: Duration,
        serving_lifetime: Duration,
        bundle_propagation: Duration,
        check_interval: Duration,
    ) -> Self {
        let needed = serving_lifetime + bundle_propagation + 2 * check_interval;
        let ca_renew_before = (ca_lifetime / 3).max(needed + Duration::from_secs(1));
        Self {
            ca_lifetime,
            serving_lifetime,
            ca_renew_before,
            serving_renew_before: serving_lifetime / 3,
            bundle_propagation,
            check_interval,
        }
    }

    /// Checks that the margins allow rotation without any moment in which the presented
    /// certificate is expired or signed by a CA the apiserver does not trust yet.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (field, value) in [
            ("ca_lifetime", self.ca_lifetime),
            ("serving_lifetime", self.serving_lifetime),
            ("serving_renew_before", self.serving_renew_before),
            ("check_interval", self.check_interval),
        ] {
            if value.is_zero() {
                return Err(PolicyError::Zero { field });
            }
        }
        for (margin, margin_value, lifetime, lifetime_value) in [
            (
                "ca_renew_before",
                self.ca_renew_before,
                "ca_lifetime",
                self.ca_lifetime,
            ),
            (
                "serving_renew_before",
                self.serving_renew_before,
                "serving_lifetime",
                self.serving_lifetime,
            ),
        ] {
            if margin_value >= lifetime_value {
                return Err(PolicyError::MarginTooLong {
                    margin,
                    margin_value,
                    lifetime,
                    lifetime_value,
                });
            }
        }
        let needed = self.serving_lifetime + self.bundle_propagation + 2 * self.check_interval;
        if self.ca_renew_before <= needed {
            return Err(PolicyError::CaRenewedTooLate {
                ca_renew_before: self.ca_renew_before,
                needed,
            });
        }
        if self.check_interval * 3 > self.serving_renew_before {
            return Err(PolicyError::CheckTooRare {
                check_interval: self.check_interval,
                serving_renew_before: self.serving_renew_before,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn production_policy_is_valid() {
        assert_eq!(RotationPolicy::production().validate(), Ok(()));
    }

    #[test]
    fn policy_from_test_lifetimes_is_valid() {
        let p = RotationPolicy::from_lifetimes(secs(60), secs(9), secs(2), secs(1));
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.serving_renew_before, secs(3));
        assert_eq!(p.ca_renew_before, secs(20));
    }

    #[test]
    fn ca_margin_is_widened_when_a_third_is_too_little() {
        let p = RotationPolicy::from_lifetimes(secs(30), secs(9), secs(2), secs(1));
        assert_eq!(p.ca_renew_before, secs(14));
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn rejects_ca_renewed_too_late() {
        let mut p = RotationPolicy::from_lifetimes(secs(60), secs(9), secs(2), secs(1));
        p.ca_renew_before = secs(10);
        assert!(matches!(
            p.validate(),
            Err(PolicyError::CaRenewedTooLate { .. })
        ));
    }

    #[test]
    fn rejects_margin_longer_than_lifetime() {
        let mut p = RotationPolicy::from_lifetimes(secs(60), secs(9), secs(2), secs(1));
        p.serving_renew_before = secs(9);
        let err = p
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("serving_renew_before"), "{err}");
    }

    #[test]
    fn rejects_check_interval_too_coarse() {
        let mut p = RotationPolicy::from_lifetimes(secs(60), secs(9), secs(2), secs(1));
        p.check_interval = secs(2);
        p.ca_renew_before = secs(30);
        assert!(matches!(
            p.validate(),
            Err(PolicyError::CheckTooRare { .. })
        ));
    }

    #[test]
    fn rejects_zero_lifetime() {
        let p = RotationPolicy::from_lifetimes(secs(60), Duration::ZERO, secs(2), secs(1));
        assert_eq!(
            p.validate(),
            Err(PolicyError::Zero {
                field: "serving_lifetime"
            })
        );
    }
}
