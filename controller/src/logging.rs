//! Logging of the controller: the shared set-up (JSON lines with span fields by default).

pub use kim_process::logging::{LogFormat, filter, init};
