//! How many Shoot creates the controller keeps in flight at once, adapted to Gardener's answers
//! (additive increase, multiplicative decrease, as TCP's congestion window).
//!
//! gardener-apiserver admits Shoot creates at its own pace: its `ResourceReferenceManager`
//! resolves each Shoot's references through a client with client-go's default rate limit, so
//! creates beyond that pace only queue in its admission until they time out or are refused.
//! Sending more then multiplies the load instead of the throughput. The limit grows by one per
//! `limit` creates admitted quickly, is halved by a refusal that says "try later" or a timeout
//! (once per congestion event: answers to creates sent before the last decrease do not count
//! again), and stays put while admission is slow.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::records::lock;

/// Settings of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreateLimitSettings {
    /// The limit at start.
    pub initial: f64,
    /// Never below (one create is always allowed).
    pub min: f64,
    /// Never above.
    pub max: f64,
    /// An admitted create slower than this is a sign of queueing: no increase.
    pub slow: Duration,
}

impl Default for CreateLimitSettings {
    fn default() -> Self {
        Self {
            initial: 4.0,
            min: 1.0,
            max: 64.0,
            slow: Duration::from_secs(2),
        }
    }
}

/// How a create ended, for the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// Gardener answered (created, or already exists) after this long.
    Answered(Duration),
    /// Gardener said "try later" or did not answer in time.
    Busy,
    /// Any other error: says nothing about Gardener's load.
    Other,
}

struct State {
    limit: f64,
    in_flight: u32,
    last_decrease: Option<Instant>,
}

/// The adaptive limit, shared by all reconciles.
pub struct CreateLimit {
    settings: CreateLimitSettings,
    state: Mutex<State>,
}

/// One create slot; dropped without [`CreatePermit::finish`] it frees the slot and counts as
/// [`CreateOutcome::Other`].
pub struct CreatePermit {
    limit: Arc<CreateLimit>,
    started: Instant,
    done: bool,
}

impl CreateLimit {
    /// A limit starting at `settings.initial`.
    pub fn new(settings: CreateLimitSettings) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                limit: settings.initial.clamp(settings.min, settings.max),
                in_flight: 0,
                last_decrease: None,
            }),
            settings,
        })
    }

    /// A slot if fewer than `limit` creates are in flight.
    pub fn try_acquire(self: &Arc<Self>) -> Option<CreatePermit> {
        let mut st = lock(&self.state);
        if f64::from(st.in_flight) + 1.0 > st.limit.floor().max(1.0) {
            return None;
        }
        st.in_flight += 1;
        Some(CreatePermit {
            limit: self.clone(),
            started: Instant::now(),
            done: false,
        })
    }

    /// The current limit (rounded down: the creates allowed at once).
    pub fn limit(&self) -> u32 {
        lock(&self.state).limit.floor() as u32
    }

    /// Creates in flight.
    pub fn in_flight(&self) -> u32 {
        lock(&self.state).in_flight
    }

    fn finish(&self, started: Instant, outcome: CreateOutcome) {
        let mut st = lock(&self.state);
        st.in_flight = st.in_flight.saturating_sub(1);
        match outcome {
            CreateOutcome::Answered(took) if took < self.settings.slow => {
                st.limit = (st.limit + 1.0 / st.limit).min(self.settings.max);
            }
            CreateOutcome::Answered(_) | CreateOutcome::Other => {}
            CreateOutcome::Busy => {
                // Creates sent before the last decrease met the same congestion.
                if st.last_decrease.is_none_or(|at| started >= at) {
                    st.limit = (st.limit / 2.0).max(self.settings.min);
                    st.last_decrease = Some(Instant::now());
                }
            }
        }
    }
}

impl CreatePermit {
    /// Frees the slot and adapts the limit to how the create ended.
    pub fn finish(mut self, outcome: CreateOutcome) {
        self.done = true;
        self.limit.finish(self.started, outcome);
    }
}

impl Drop for CreatePermit {
    fn drop(&mut self) {
        if !self.done {
            self.limit.finish(self.started, CreateOutcome::Other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(initial: f64) -> Arc<CreateLimit> {
        CreateLimit::new(CreateLimitSettings {
            initial,
            ..Default::default()
        })
    }

    #[test]
    fn slots_up_to_the_limit() {
        let l = limit(2.0);
        let a = l.try_acquire().expect("first");
        let b = l.try_acquire().expect("second");
        assert!(l.try_acquire().is_none());
        assert_eq!(l.in_flight(), 2);
        drop(a);
        assert!(l.try_acquire().is_some());
        b.finish(CreateOutcome::Other);
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.limit(), 2, "neither outcome changes the limit");
    }

    #[test]
    fn grows_by_one_per_window_of_fast_answers() {
        let l = limit(4.0);
        for _ in 0..4 {
            l.try_acquire()
                .expect("slot")
                .finish(CreateOutcome::Answered(Duration::from_millis(100)));
        }
        assert_eq!(l.limit(), 4, "4.92 after four answers");
        for _ in 0..2 {
            l.try_acquire()
                .expect("slot")
                .finish(CreateOutcome::Answered(Duration::from_millis(100)));
        }
        assert_eq!(l.limit(), 5);
    }

    #[test]
    fn slow_answers_hold_the_limit() {
        let l = limit(4.0);
        for _ in 0..20 {
            l.try_acquire()
                .expect("slot")
                .finish(CreateOutcome::Answered(Duration::from_secs(3)));
        }
        assert_eq!(l.limit(), 4);
    }

    #[test]
    fn halves_once_per_congestion_event_down_to_one() {
        let l = limit(16.0);
        let together: Vec<_> = (0..8).map(|_| l.try_acquire().expect("slot")).collect();
        for p in together {
            p.finish(CreateOutcome::Busy);
        }
        assert_eq!(l.limit(), 8, "eight refusals of one burst halve once");
        for expected in [4, 2, 1, 1] {
            l.try_acquire().expect("slot").finish(CreateOutcome::Busy);
            assert_eq!(l.limit(), expected);
        }
        assert!(l.try_acquire().is_some(), "one create is always allowed");
    }

    #[test]
    fn never_above_the_maximum() {
        let l = CreateLimit::new(CreateLimitSettings {
            initial: 100.0,
            max: 3.0,
            ..Default::default()
        });
        assert_eq!(l.limit(), 3);
        for _ in 0..50 {
            l.try_acquire()
                .expect("slot")
                .finish(CreateOutcome::Answered(Duration::ZERO));
        }
        assert_eq!(l.limit(), 3);
    }
}
