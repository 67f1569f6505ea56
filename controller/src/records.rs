//! What a reconciler remembers per object between reconciles: one record per object behind one
//! lock, the failure count its backoff grows from, and one lock helper for the whole crate.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Locks `m` even when another holder panicked: the guarded state is a cache of facts the next
/// reconcile re-derives, so a half-finished update is no reason to stop the controller.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The record key of a namespaced object: `namespace/name`.
pub fn key(obj: &impl kube::Resource) -> String {
    use kube::ResourceExt;
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Per-object exponential backoff after failed reconciles: `first`, twice that, four times
/// ... up to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub first: Duration,
    /// Longest delay.
    pub cap: Duration,
}

impl Backoff {
    /// The delay after `failures` consecutive failures (1 for the first).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.first.saturating_mul(1 << doublings).min(self.cap)
    }

    /// [`Backoff::delay`] with "equal jitter": half the delay plus up to the other half at
    /// random, so objects that failed together (a burst refused at once) do not come back
    /// together. `random` is a number in `[0, 1)`.
    pub fn jittered(&self, failures: u32, random: f64) -> Duration {
        let delay = self.delay(failures);
        delay / 2 + delay.mul_f64(random.clamp(0.0, 1.0) / 2.0)
    }

    /// [`Backoff::jittered`] with a fresh random number.
    pub fn random_delay(&self, failures: u32) -> Duration {
        self.jittered(failures, rand::random::<f64>())
    }
}

struct Entry<R> {
    failures: u32,
    /// After a failure: until when the object waits, and what of it the wait is about
    /// ([`inputs`]).
    hold: Option<(tokio::time::Instant, u64)>,
    /// Events of other objects this one depends on ([`Records::release`]), counted, and the
    /// count when its current pass began.
    nudges: u64,
    pass_nudges: u64,
    alias: Option<String>,
    record: R,
}

/// A hash of what a change of the object's own asks for a new pass: UID, generation, labels,
/// annotations, finalizers and deletion. A change of its status (the reconciler's own write,
/// whose message may quote the failure) is none.
pub fn inputs(meta: &kube::api::ObjectMeta) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.uid.hash(&mut h);
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    h.finish()
}

struct Inner<R> {
    entries: HashMap<String, Entry<R>>,
    /// Another name an object is found by (the Runtime's runtime ID) -> its key.
    aliases: HashMap<String, String>,
}

impl<R: Default> Inner<R> {
    fn entry(&mut self, key: &str) -> &mut Entry<R> {
        self.entries.entry(key.to_owned()).or_insert_with(|| Entry {
            failures: 0,
            hold: None,
            nudges: 0,
            pass_nudges: 0,
            alias: None,
            record: R::default(),
        })
    }
}

/// One record `R` per object, keyed by the object's name (or namespace/name), with its
/// consecutive failures. [`Records::forget`] drops everything known about an object at once.
pub struct Records<R> {
    inner: Mutex<Inner<R>>,
}

impl<R> Default for Records<R> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                aliases: HashMap::new(),
            }),
        }
    }
}

impl<R: Default> Records<R> {
    /// Runs `f` on the object's record, created empty if there is none.
    pub fn with<T>(&self, key: &str, f: impl FnOnce(&mut R) -> T) -> T {
        let mut inner = lock(&self.inner);
        let entry = inner.entry(key);
        f(&mut entry.record)
    }

    /// Runs `f` on the object's record if there is one.
    pub fn read<T>(&self, key: &str, f: impl FnOnce(&R) -> T) -> Option<T> {
        lock(&self.inner).entries.get(key).map(|e| f(&e.record))
    }

    /// Counts one more consecutive failure of the object; returns the count.
    pub fn failed(&self, key: &str) -> u32 {
        let mut inner = lock(&self.inner);
        let entry = inner.entry(key);
        entry.failures = entry.failures.saturating_add(1);
        entry.failures
    }

    /// Counts one more consecutive failure of the object; returns the delay `backoff` gives
    /// for that many ([`Backoff::random_delay`]).
    pub fn retry_in(&self, key: &str, backoff: &Backoff) -> Duration {
        backoff.random_delay(self.failed(key))
    }

    /// The object's consecutive failures so far.
    pub fn failures(&self, key: &str) -> u32 {
        lock(&self.inner).entries.get(key).map_or(0, |e| e.failures)
    }

    /// The object reconciled: its backoff starts again from the first delay.
    pub fn succeeded(&self, key: &str) {
        if let Some(entry) = lock(&self.inner).entries.get_mut(key) {
            entry.failures = 0;
        }
    }

    /// The object failed and waits `delay` before its next pass, unless its [`inputs`] change
    /// or [`Records::release`] is called: a watch event of its own status write (which
    /// kube-runtime runs at once, whatever the requeue asked for) does not cut the wait short.
    /// No hold when something was released since the pass began ([`Records::begin_pass`]):
    /// the pass that event asked for runs.
    pub fn hold(&self, key: &str, delay: Duration, inputs: u64) {
        let until = tokio::time::Instant::now() + delay;
        let mut inner = lock(&self.inner);
        let entry = inner.entry(key);
        if entry.nudges == entry.pass_nudges {
            entry.hold = Some((until, inputs));
        }
    }

    /// Something the object depends on changed (its Shoot, its GardenerCluster or admin
    /// kubeconfig, a configuration): its hold ends, and a pass running now sets none.
    pub fn release(&self, key: &str) {
        if let Some(entry) = lock(&self.inner).entries.get_mut(key) {
            entry.nudges = entry.nudges.wrapping_add(1);
            entry.hold = None;
        }
    }

    /// A pass of the object begins, unless it still waits after a failure with the same
    /// `inputs` as then: how long it waits. One step under the lock, so that a release coming
    /// just before the pass is not taken for one during it (which would keep the next hold).
    pub fn begin_pass(&self, key: &str, inputs: u64) -> Option<Duration> {
        let mut inner = lock(&self.inner);
        let entry = inner.entry(key);
        if let Some((until, then)) = entry.hold {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if then == inputs && !left.is_zero() {
                return Some(left);
            }
            entry.hold = None;
        }
        entry.pass_nudges = entry.nudges;
        None
    }

    /// The keys of the objects that `pick` selects, given each one's consecutive failures and
    /// its record (which `pick` may change).
    pub fn select(&self, mut pick: impl FnMut(u32, &mut R) -> bool) -> Vec<String> {
        lock(&self.inner)
            .entries
            .iter_mut()
            .filter_map(|(key, e)| pick(e.failures, &mut e.record).then(|| key.clone()))
            .collect()
    }

    /// The keys of every object with a record.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.inner).entries.keys().cloned().collect()
    }

    /// Lets the object be found by `alias` too (see [`Records::key_of`]).
    pub fn set_alias(&self, key: &str, alias: &str) {
        let mut inner = lock(&self.inner);
        if inner.aliases.get(alias).map(String::as_str) == Some(key) {
            return;
        }
        inner.aliases.insert(alias.to_owned(), key.to_owned());
        let entry = inner.entry(key);
        let replaced = entry.alias.replace(alias.to_owned());
        // The object is no longer known by its former alias.
        if let Some(old) = replaced
            && old != alias
            && inner.aliases.get(&old).map(String::as_str) == Some(key)
        {
            inner.aliases.remove(&old);
        }
    }

    /// The key of the object known by `alias`.
    pub fn key_of(&self, alias: &str) -> Option<String> {
        lock(&self.inner).aliases.get(alias).cloned()
    }

    /// Forgets the object (its record, failures and alias); returns its record.
    pub fn forget(&self, key: &str) -> Option<R> {
        let mut inner = lock(&self.inner);
        let entry = inner.entries.remove(key)?;
        if let Some(alias) = entry.alias
            && inner.aliases.get(&alias).map(String::as_str) == Some(key)
        {
            inner.aliases.remove(&alias);
        }
        Some(entry.record)
    }
}

#[cfg(test)]
mod tests {

    /// A hold lasts while the object's inputs stay as they were, and ends for good.
    #[test]
    fn a_hold_lasts_while_the_inputs_stay() {
        let records: Records<()> = Records::default();
        let minute = Duration::from_secs(60);
        records.hold("a", minute, 7);
        assert!(
            records
                .begin_pass("a", 7)
                .is_some_and(|left| left <= minute)
        );
        assert_eq!(
            records.begin_pass("a", 8),
            None,
            "another spec, label or annotation"
        );
        assert_eq!(records.begin_pass("a", 7), None, "a hold ended stays ended");
        records.hold("a", Duration::ZERO, 7);
        assert_eq!(records.begin_pass("a", 7), None, "over");
        assert_eq!(records.begin_pass("b", 7), None);

        // Released: by an event of another object, before or during the failing pass.
        records.hold("a", minute, 7);
        records.release("a");
        assert_eq!(records.begin_pass("a", 7), None);
        records.release("a");
        records.hold("a", minute, 7);
        assert_eq!(records.begin_pass("a", 7), None, "an event during the pass");
        records.hold("a", minute, 7);
        assert!(records.begin_pass("a", 7).is_some());
    }
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_delay_up_to_the_cap() {
        let b = Backoff {
            first: Duration::from_secs(1),
            cap: Duration::from_secs(15),
        };
        let delays: Vec<u64> = (1..=6).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 15, 15]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(15));
    }

    #[test]
    fn jitter_keeps_the_delay_between_half_and_whole() {
        let b = Backoff {
            first: Duration::from_secs(2),
            cap: Duration::from_secs(30),
        };
        assert_eq!(b.jittered(1, 0.0), Duration::from_secs(1));
        assert_eq!(b.jittered(1, 0.5), Duration::from_millis(1500));
        let top = b.jittered(3, 0.999_999);
        assert!(
            top > Duration::from_millis(7_999) && top < Duration::from_secs(8),
            "{top:?}"
        );
        assert_eq!(b.jittered(10, 0.0), Duration::from_secs(15));
        // Out-of-range randomness cannot push the delay past the cap.
        assert_eq!(b.jittered(10, 7.0), Duration::from_secs(30));
    }

    #[test]
    fn forget_drops_record_failures_and_alias() {
        let records: Records<Option<i64>> = Records::default();
        records.with("rt", |r| *r = Some(3));
        records.set_alias("rt", "id-1");
        assert_eq!(records.failed("rt"), 1);
        assert_eq!(records.failed("rt"), 2);
        records.succeeded("rt");
        assert_eq!(records.failed("rt"), 1);
        assert_eq!(records.key_of("id-1").as_deref(), Some("rt"));
        assert_eq!(records.forget("rt"), Some(Some(3)));
        assert_eq!(records.key_of("id-1"), None);
        assert_eq!(records.read("rt", |r| *r), None);
        assert_eq!(records.failed("rt"), 1, "a new object starts from zero");
    }

    /// A new alias replaces the former one: the object is no longer found by it.
    #[test]
    fn a_new_alias_replaces_the_former() {
        let records: Records<u32> = Records::default();
        records.set_alias("rt", "id-1");
        records.set_alias("rt", "id-2");
        assert_eq!(records.key_of("id-1"), None);
        assert_eq!(records.key_of("id-2").as_deref(), Some("rt"));
        records.set_alias("rt", "id-2");
        assert_eq!(records.key_of("id-2").as_deref(), Some("rt"));
        records.forget("rt");
        assert_eq!(records.key_of("id-2"), None);
    }

    #[test]
    fn select_picks_by_failures_and_record_and_may_change_the_record() {
        let records: Records<u32> = Records::default();
        records.with("quiet", |r| *r = 0);
        records.with("refused", |r| *r = 2);
        records.failed("failing");
        let mut picked = records.select(|failures, refused| {
            let pick = failures > 0 || *refused > 0;
            if pick {
                *refused = 0;
            }
            pick
        });
        picked.sort();
        assert_eq!(picked, ["failing", "refused"]);
        assert_eq!(records.read("refused", |r| *r), Some(0));
        assert_eq!(
            records.failed("failing"),
            2,
            "select leaves the failure count alone"
        );
    }

    #[test]
    fn success_of_an_unknown_object_records_nothing() {
        let records: Records<()> = Records::default();
        records.succeeded("gone");
        assert_eq!(records.read("gone", |_| ()), None);
    }
}
