//! How many Gardener writes of one kind (Shoot creates, `adminkubeconfig` requests) the
//! controller keeps in flight at once, adapted to Gardener's answers (additive increase,
//! multiplicative decrease, as TCP's congestion window).
//!
//! gardener-apiserver serves these writes at its own pace: its `ResourceReferenceManager`
//! resolves each new Shoot's references through a client with client-go's default rate limit,
//! and it signs each admin kubeconfig on its own CPUs. Writes beyond that pace only queue in it
//! until they time out or are refused, and one the controller gave up on still runs to its end
//! there: sending more multiplies the load instead of the throughput. The limit grows by one per
//! `limit` writes answered quickly, is halved by an answer that says "try later" or a timeout
//! (once per congestion event: answers to writes sent before the last decrease do not count
//! again), and stays put while answers are slow.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::records::lock;

/// Settings of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteLimitSettings {
    /// The limit at start.
    pub initial: f64,
    /// Never below (one create is always allowed).
    pub min: f64,
    /// Never above.
    pub max: f64,
    /// An answer slower than this is a sign of queueing: no increase.
    pub slow: Duration,
}

impl Default for WriteLimitSettings {
    fn default() -> Self {
        Self {
            initial: 4.0,
            min: 1.0,
            max: 64.0,
            slow: Duration::from_secs(2),
        }
    }
}

/// How a write ended, for the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Gardener answered (done, or already exists) after this long.
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

impl State {
    fn full(&self) -> bool {
        f64::from(self.in_flight) + 1.0 > self.limit.floor().max(1.0)
    }
}

/// The adaptive limit, shared by all reconciles.
pub struct WriteLimit {
    settings: WriteLimitSettings,
    state: Mutex<State>,
    /// Woken when a slot is freed.
    freed: Notify,
}

/// One write slot; dropped without [`WritePermit::finish`] it frees the slot and counts as
/// [`WriteOutcome::Other`].
pub struct WritePermit {
    limit: Arc<WriteLimit>,
    started: Instant,
    done: bool,
}

impl WriteLimit {
    /// A limit starting at `settings.initial`.
    pub fn new(settings: WriteLimitSettings) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                limit: settings.initial.clamp(settings.min, settings.max),
                in_flight: 0,
                last_decrease: None,
            }),
            settings,
            freed: Notify::new(),
        })
    }

    /// Waits for a slot.
    pub async fn acquire(self: &Arc<Self>) -> WritePermit {
        loop {
            let freed = self.freed.notified();
            if let Some(permit) = self.try_acquire() {
                return permit;
            }
            // Also look again now and then: a grown limit frees slots without a finish.
            let _ = tokio::time::timeout(Duration::from_millis(500), freed).await;
        }
    }

    /// A slot if fewer than `limit` writes are in flight.
    pub fn try_acquire(self: &Arc<Self>) -> Option<WritePermit> {
        let mut st = lock(&self.state);
        if st.full() {
            return None;
        }
        st.in_flight += 1;
        Some(WritePermit {
            limit: self.clone(),
            started: Instant::now(),
            done: false,
        })
    }

    /// Whether every slot is taken ([`WriteLimit::try_acquire`] would give none now).
    pub fn full(&self) -> bool {
        lock(&self.state).full()
    }

    /// The current limit (rounded down: the writes allowed at once).
    pub fn limit(&self) -> u32 {
        lock(&self.state).limit.floor() as u32
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> u32 {
        lock(&self.state).in_flight
    }

    fn finish(&self, started: Instant, outcome: WriteOutcome) {
        self.adapt(started, outcome);
        self.freed.notify_waiters();
    }

    fn adapt(&self, started: Instant, outcome: WriteOutcome) {
        let mut st = lock(&self.state);
        // This write among the others in flight: the limit held all it allowed.
        let used = st.full();
        st.in_flight = st.in_flight.saturating_sub(1);
        match outcome {
            // Grown only while it is what holds writes back: a limit that weeks of one create
            // at a time had raised to its maximum would let the next burst send that many
            // creates before Gardener's first answer.
            WriteOutcome::Answered(took) if took < self.settings.slow && used => {
                st.limit = (st.limit + 1.0 / st.limit).min(self.settings.max);
            }
            WriteOutcome::Answered(_) | WriteOutcome::Other => {}
            WriteOutcome::Busy => {
                // Writes sent before the last decrease met the same congestion.
                if st.last_decrease.is_none_or(|at| started >= at) {
                    st.limit = (st.limit / 2.0).max(self.settings.min);
                    st.last_decrease = Some(Instant::now());
                }
            }
        }
    }
}

impl WritePermit {
    /// Frees the slot and adapts the limit to how the create ended.
    pub fn finish(mut self, outcome: WriteOutcome) {
        self.done = true;
        self.limit.finish(self.started, outcome);
    }
}

impl Drop for WritePermit {
    fn drop(&mut self) {
        if !self.done {
            self.limit.finish(self.started, WriteOutcome::Other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(initial: f64) -> Arc<WriteLimit> {
        WriteLimit::new(WriteLimitSettings {
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
        b.finish(WriteOutcome::Other);
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.limit(), 2, "neither outcome changes the limit");
    }

    /// Every slot taken, then each freed with a fast answer and taken again at once.
    fn fast_answers_at_the_limit(l: &Arc<WriteLimit>, answers: usize) {
        let mut held: Vec<_> = std::iter::from_fn(|| l.try_acquire()).collect();
        assert!(l.full());
        for _ in 0..answers {
            held.remove(0)
                .finish(WriteOutcome::Answered(Duration::from_millis(100)));
            held.extend(std::iter::from_fn(|| l.try_acquire()));
        }
    }

    #[test]
    fn grows_by_one_per_window_of_fast_answers() {
        let l = limit(4.0);
        fast_answers_at_the_limit(&l, 4);
        assert_eq!(l.limit(), 4, "4.92 after four answers");
        fast_answers_at_the_limit(&l, 2);
        assert_eq!(l.limit(), 5);
    }

    #[test]
    fn grows_only_while_it_holds_writes_back() {
        let l = limit(4.0);
        for _ in 0..100 {
            assert!(!l.full());
            l.try_acquire()
                .expect("slot")
                .finish(WriteOutcome::Answered(Duration::from_millis(100)));
        }
        assert_eq!(l.limit(), 4, "one create at a time does not raise it");
        fast_answers_at_the_limit(&l, 6);
        assert_eq!(l.limit(), 5, "answers at the limit raise it");
    }

    #[test]
    fn slow_answers_hold_the_limit() {
        let l = limit(4.0);
        for _ in 0..20 {
            l.try_acquire()
                .expect("slot")
                .finish(WriteOutcome::Answered(Duration::from_secs(3)));
        }
        assert_eq!(l.limit(), 4);
    }

    #[test]
    fn halves_once_per_congestion_event_down_to_one() {
        let l = limit(16.0);
        let together: Vec<_> = (0..8).map(|_| l.try_acquire().expect("slot")).collect();
        for p in together {
            p.finish(WriteOutcome::Busy);
        }
        assert_eq!(l.limit(), 8, "eight refusals of one burst halve once");
        for expected in [4, 2, 1, 1] {
            l.try_acquire().expect("slot").finish(WriteOutcome::Busy);
            assert_eq!(l.limit(), expected);
        }
        assert!(l.try_acquire().is_some(), "one create is always allowed");
    }

    #[tokio::test]
    async fn a_waiter_gets_the_slot_freed() {
        let l = limit(1.0);
        let held = l.try_acquire().expect("slot");
        let waiter = tokio::spawn({
            let l = l.clone();
            async move { l.acquire().await.finish(WriteOutcome::Other) }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        held.finish(WriteOutcome::Other);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn never_above_the_maximum() {
        let l = WriteLimit::new(WriteLimitSettings {
            initial: 100.0,
            max: 3.0,
            ..Default::default()
        });
        assert_eq!(l.limit(), 3);
        for _ in 0..50 {
            l.try_acquire()
                .expect("slot")
                .finish(WriteOutcome::Answered(Duration::ZERO));
        }
        assert_eq!(l.limit(), 3);
    }
}
