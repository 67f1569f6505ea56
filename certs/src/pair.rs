//! A certificate chain joined with its private key, as rustls serves it.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Why a chain and a key cannot serve together.
#[derive(Debug)]
pub(crate) enum PairError {
    /// The key PEM is missing, malformed or of a type rustls cannot sign with.
    Key,
    /// The key is not the one the leaf certificate was issued for.
    Mismatch,
}

/// `chain` with the private key in `key_pem`. rustls checks that the key belongs to the leaf
/// only at handshakes; a mismatched pair would fail every one, so it is refused here.
pub(crate) fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key_pem: &str,
) -> Result<CertifiedKey, PairError> {
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| PairError::Key)?;
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|_| PairError::Key)?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match().map_err(|_| PairError::Mismatch)?;
    Ok(pair)
}
