//! The KIM configuration: converter config, audit-log tenants, maintenance windows.
