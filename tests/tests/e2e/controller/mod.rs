//! The controller (`kim_tests::controller`) against the shared environment.

mod acl;
mod api_faults;
mod audit_log;
mod bootstrapper;
mod burst;
mod deletion;
mod failures;
mod faults;
mod kill;
mod kyma_system;
mod leader;
mod lifecycle;
mod oidc;
mod registry_cache;
mod samples;
mod seeds;
mod takeover;
mod updates;
mod upgrade;
mod upstream_args;

/// A controller's log lines, collected in memory (a `tracing` writer) for the tests that check
/// what the controller logs.
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
