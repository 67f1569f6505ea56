//! Child processes of the test control plane that never outlive the test process.
//!
//! Three layers, because a panicking or killed test must leave nothing behind:
//! 1. every child runs under `setpriv --pdeathsig KILL`, so the kernel kills it when its parent
//!    dies, whatever the reason (panic=abort, SIGKILL, end of `main` with a leaked static);
//! 2. the parent is one dedicated spawner thread that lives as long as the process: the
//!    death signal fires when the *thread* that forked exits, and test threads come and go;
//! 3. [`ManagedProcess`] kills and reaps its child on drop (normal teardown, unwinding panic).
//!
//! Each child also gets its own process group, so a Ctrl-C in a terminal reaches only our
//! process, which then shuts the children down in order.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;

/// Errors of process management.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The binary could not be started.
    #[error("starting {name} ({program}): {source}")]
    Spawn {
        /// Logical name, e.g. `etcd`.
        name: String,
        /// Program path.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `setpriv` (util-linux) is missing.
    #[error(
        "`setpriv` (util-linux) is needed so that control-plane processes die with the test \
         process; install util-linux"
    )]
    NoSetpriv,
    /// The process exited while it should be running.
    #[error("{name} exited ({status}); last lines of {log}:\n{tail}")]
    Exited {
        /// Logical name.
        name: String,
        /// Exit status.
        status: String,
        /// Log file.
        log: String,
        /// Last lines of the log.
        tail: String,
    },
    /// The spawner thread is gone (cannot happen unless it panicked).
    #[error("the process spawner thread is gone")]
    SpawnerGone,
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// The one long-lived thread that forks all children (see the module comment).
fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        // The sender lives in a static, so `recv` never fails and the thread never exits.
        let spawned = std::thread::Builder::new()
            .name("kim-testenv-spawner".into())
            .spawn(move || {
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            });
        if let Err(e) = spawned {
            // Start-up: without the spawner nothing can run.
            panic!("cannot start the kim-testenv spawner thread: {e}");
        }
        tx
    })
}

fn setpriv() -> Result<&'static Path, ProcessError> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            ["/usr/bin/setpriv", "/bin/setpriv", "/usr/local/bin/setpriv"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
        })
        .as_deref()
        .ok_or(ProcessError::NoSetpriv)
}

/// A running child process, killed and reaped on drop.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl ManagedProcess {
    /// Starts `program args` with stdout and stderr appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &str)],
        log: &Path,
    ) -> Result<Self, ProcessError> {
        let spawn_err = |source| ProcessError::Spawn {
            name: name.to_string(),
            program: program.display().to_string(),
            source,
        };
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(spawn_err)?;
        let err = out.try_clone().map_err(spawn_err)?;
        let mut cmd = Command::new(setpriv()?);
        cmd.arg("--pdeathsig")
            .arg("KILL")
            .arg("--")
            .arg(program)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let (tx, rx) = mpsc::channel();
        spawner()
            .send((cmd, tx))
            .map_err(|_| ProcessError::SpawnerGone)?;
        let child = rx
            .recv()
            .map_err(|_| ProcessError::SpawnerGone)?
            .map_err(spawn_err)?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    /// The logical name (`etcd`, `kcp-apiserver`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Fails with the log tail if the process has exited.
    pub fn check_running(&mut self) -> Result<(), ProcessError> {
        let status = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => return Ok(()),
            Some(Ok(Some(status))) => status.to_string(),
            Some(Err(e)) => e.to_string(),
            None => "stopped".to_string(),
        };
        Err(ProcessError::Exited {
            name: self.name.clone(),
            status,
            log: self.log.display().to_string(),
            tail: log_tail(&self.log, 30),
        })
    }

    /// Kills (SIGKILL) and reaps the process. Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            tracing::debug!(name = %self.name, "stopped");
        }
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of a log file (for error messages; control-plane logs hold no secrets
/// at the default verbosity).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::from("(no log)");
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
    let mut buf = String::new();
    let _ = f.read_to_string(&mut buf);
    let all: Vec<&str> = buf.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A free TCP port on 127.0.0.1 (bind to port 0 and release it; a small race remains, which
/// start-up handles by retrying).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_is_killed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let p = ManagedProcess::spawn("sleep", Path::new("/bin/sleep"), &["60".into()], &[], &log)
            .unwrap();
        let pid = p.pid().unwrap();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        drop(p);
        // Reaped, so the pid is gone (or reused by an unrelated process with another cmdline).
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !cmdline.contains("sleep\u{0}60"),
            "sleep 60 still running as {pid}"
        );
    }

    #[test]
    fn exited_child_reports_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sh.log");
        let args = ["-c".to_string(), "echo boom-marker; exit 3".to_string()];
        let mut p = ManagedProcess::spawn("sh", Path::new("/bin/sh"), &args, &[], &log).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let err = p.check_running().unwrap_err().to_string();
        assert!(
            err.contains("boom-marker") && err.contains("exit status: 3"),
            "{err}"
        );
    }
}
