//! A hung end-to-end test fails by name within minutes instead of holding the whole run until
//! CI's limit ends it without saying which test it was.
//!
//! libtest runs each test on a thread named after the test. Every way into a test environment
//! ([`crate::testenv::TestEnv::shared`], [`crate::testenv::TestEnv::start`],
//! [`crate::testenv::TestEnv::kcp_client`], [`crate::webhook::env`]) calls [`register`], which
//! records the calling test and when it first did so, until its thread ends. A watchdog thread
//! looks every 15 s; once a test has run longer than the limit (`KIM_E2E_TEST_LIMIT_MIN`
//! minutes, [`DEFAULT_LIMIT_MIN`] when unset), it prints every test still running with its
//! time and ends the process. The control-plane processes die with it (`--pdeathsig`).

use std::collections::BTreeMap;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// The limit when `KIM_E2E_TEST_LIMIT_MIN` is not set. The longest end-to-end test takes a few
/// minutes on the CI machine; a test still running after this is hung.
pub const DEFAULT_LIMIT_MIN: u64 = 20;

/// The exit code of a process the watchdog ends (as libtest's for failed tests).
const EXIT_CODE: i32 = 101;

static RUNNING: Mutex<BTreeMap<String, Instant>> = Mutex::new(BTreeMap::new());

/// Removes its test from [`RUNNING`] when the test's thread ends, passed or panicked.
struct Registered(String);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut running) = RUNNING.lock() {
            running.remove(&self.0);
        }
    }
}

thread_local! {
    static REGISTERED: std::cell::OnceCell<Registered> = const { std::cell::OnceCell::new() };
}

/// Records the calling test as running, once per test; on any other thread (a runtime's
/// worker, an environment's own thread) it does nothing.
pub fn register() {
    let thread = std::thread::current();
    let Some(name) = thread.name().filter(|n| is_test_name(n)) else {
        return;
    };
    REGISTERED.with(|cell| {
        cell.get_or_init(|| {
            if let Ok(mut running) = RUNNING.lock() {
                running.insert(name.to_owned(), Instant::now());
            }
            Registered(name.to_owned())
        });
    });
    static WATCHDOG: Once = Once::new();
    WATCHDOG.call_once(|| {
        let limit = limit_from(std::env::var("KIM_E2E_TEST_LIMIT_MIN").ok().as_deref());
        let spawned = std::thread::Builder::new()
            .name("kim-e2e-watchdog".into())
            .spawn(move || watch(limit));
        if let Err(e) = spawned {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "kim e2e watchdog: cannot start its thread ({e}); hung tests are not named"
            );
        }
    });
}

/// Test threads carry the test's path (`module::test`); runtime workers and the environments'
/// threads (`kim-testenv-shared`) do not.
fn is_test_name(name: &str) -> bool {
    name.contains("::")
}

/// The limit from `KIM_E2E_TEST_LIMIT_MIN`: whole minutes, at least one.
fn limit_from(value: Option<&str>) -> Duration {
    let minutes = match value.map(str::parse::<u64>) {
        None => DEFAULT_LIMIT_MIN,
        Some(Ok(m)) if m >= 1 => m,
        Some(_) => {
            eprintln!(
                "kim e2e watchdog: KIM_E2E_TEST_LIMIT_MIN={value:?} is not a whole number of minutes >= 1; using {DEFAULT_LIMIT_MIN}"
            );
            DEFAULT_LIMIT_MIN
        }
    };
    Duration::from_secs(minutes * 60)
}

fn watch(limit: Duration) {
    loop {
        std::thread::sleep(Duration::from_secs(15));
        let now = Instant::now();
        let report = match RUNNING.lock() {
            Ok(running) => overdue_report(&running, now, limit),
            Err(_) => None,
        };
        if let Some(report) = report {
            // Straight to the file descriptors: this thread inherited the capture of the test
            // that started it, and `eprintln!` would write into that test's buffer, which is
            // lost with the process.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{report}");
            std::process::exit(EXIT_CODE);
        }
    }
}

/// `None` while every running test is within `limit`; else the message that names the overdue
/// tests and lists every test still running.
fn overdue_report(
    running: &BTreeMap<String, Instant>,
    now: Instant,
    limit: Duration,
) -> Option<String> {
    let elapsed = |start: &Instant| now.saturating_duration_since(*start);
    let overdue: Vec<&str> = running
        .iter()
        .filter(|(_, start)| elapsed(start) > limit)
        .map(|(name, _)| name.as_str())
        .collect();
    if overdue.is_empty() {
        return None;
    }
    let mut report = format!(
        "kim e2e watchdog: {} ran longer than {} min (KIM_E2E_TEST_LIMIT_MIN); ending the test process. Still running:",
        overdue.join(", "),
        limit.as_secs() / 60
    );
    for (name, start) in running {
        report.push_str(&format!("\n  {name}: {} s", elapsed(start).as_secs()));
    }
    Some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tests_over_the_limit_are_named_and_all_running_are_listed() {
        let now = Instant::now();
        let limit = Duration::from_secs(600);
        let mut running = BTreeMap::new();
        running.insert("a::quick".to_owned(), now - Duration::from_secs(30));
        assert_eq!(overdue_report(&running, now, limit), None);
        running.insert("b::hung".to_owned(), now - Duration::from_secs(601));
        let report = overdue_report(&running, now, limit).expect("b::hung is overdue");
        let first = report.lines().next().unwrap_or_default();
        assert!(first.contains("b::hung ran longer than 10 min"), "{report}");
        assert!(!first.contains("a::quick"), "{report}");
        assert!(report.contains("\n  a::quick: 30 s"), "{report}");
        assert!(report.contains("\n  b::hung: 601 s"), "{report}");
    }

    #[test]
    fn limit_is_whole_minutes_from_the_environment() {
        assert_eq!(
            limit_from(None),
            Duration::from_secs(DEFAULT_LIMIT_MIN * 60)
        );
        assert_eq!(limit_from(Some("3")), Duration::from_secs(180));
        for bad in ["0", "-1", "ten", ""] {
            assert_eq!(
                limit_from(Some(bad)),
                Duration::from_secs(DEFAULT_LIMIT_MIN * 60),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_test_is_listed_while_its_thread_runs_and_removed_when_it_ends() {
        let name = "watchdog::probe::registered";
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                register();
                register();
                let _ = tx.send(());
                let _ = done_rx.recv();
            })
            .expect("spawn");
        rx.recv().expect("registered");
        assert!(RUNNING.lock().expect("lock").contains_key(name));
        let _ = done_tx.send(());
        thread.join().expect("join");
        assert!(!RUNNING.lock().expect("lock").contains_key(name));
        // Threads that are not tests are not recorded.
        std::thread::Builder::new()
            .name("kim-testenv-shared".into())
            .spawn(register)
            .expect("spawn")
            .join()
            .expect("join");
        assert!(
            !RUNNING
                .lock()
                .expect("lock")
                .contains_key("kim-testenv-shared")
        );
    }
}
