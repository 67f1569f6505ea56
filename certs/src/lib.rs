//! `kim-certs`: certificates of the admission webhook.
#![forbid(unsafe_code)]
