//! Parsing PEM certificate, key and CA files, and checking a certificate's
//! validity period. Every error names the file.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

/// The certificates of a PEM file (`contents`, read from `path`), end-entity
/// first. The end-entity certificate must be within its validity period.
///
/// # Errors
/// No certificate, a malformed one, or an expired or not yet valid
/// end-entity certificate.
pub fn read_certs(path: &Path, contents: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = parse_certs(path, contents)?;
    check_validity(path, &certs[0])?;
    Ok(certs)
}

/// Every certificate of a PEM file, at least one.
fn parse_certs(path: &Path, contents: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(contents)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::invalid(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::invalid(
            path,
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
///
/// # Errors
/// No key or a malformed one.
pub fn read_key(path: &Path, contents: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(contents).map_err(|e| {
        TlsError::invalid(
            path,
            format!("holds no usable private key (expected PEM PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

/// A root store of every certificate of a PEM CA file.
///
/// # Errors
/// No certificate, or one rustls cannot use as a trust anchor.
pub fn read_roots(path: &Path, contents: &[u8]) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in parse_certs(path, contents)? {
        roots
            .add(cert)
            .map_err(|e| TlsError::invalid(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// Refuses a certificate outside its validity period now.
///
/// # Errors
/// [`TlsError::Validity`] ("expired at ...", "is not valid before ..."), or
/// [`TlsError::Invalid`] when the certificate does not parse.
pub fn check_validity(path: &Path, cert: &CertificateDer<'_>) -> Result<(), TlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| TlsError::invalid(path, format!("certificate does not parse: {e}")))?;
    let validity = parsed.validity();
    let now = x509_parser::time::ASN1Time::now();
    if now > validity.not_after {
        return Err(TlsError::Validity {
            path: path.to_path_buf(),
            problem: format!("expired at {}", validity.not_after),
        });
    }
    if now < validity.not_before {
        return Err(TlsError::Validity {
            path: path.to_path_buf(),
            problem: format!("is not valid before {}", validity.not_before),
        });
    }
    Ok(())
}

/// The subject common name of a certificate (a client certificate's
/// identity on the client port), if it parses and has exactly one that is
/// printable ASCII.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let mut names = parsed.subject().iter_common_name();
    let name = names.next()?.as_str().ok()?.to_string();
    if names.next().is_some() || crate::text::check_printable("common name", &name, 256).is_err() {
        return None;
    }
    Some(name)
}
