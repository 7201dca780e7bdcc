//! Grant verification (`proto::grant`), what a sandbox runtime does with a
//! `SignedGrant` that arrives over the network, with one fixed trusted key,
//! and the trusted grant keys file parser.
//!
//! Selector (first byte, modulo 3): 0 the rest is `SignedGrant` bytes;
//! 1 the rest is the grant body, which the harness signs with the trusted
//! key, so the fuzzer reaches the grant decoder behind the signature (a
//! grant a gateway of the cluster signed); 2 the rest is a trusted grant
//! keys file.

use std::sync::OnceLock;

use ed25519_dalek::{Signer, SigningKey};
use prost::Message;
use proto::grant::{parse_trusted_keys, GrantError, GrantSigner, GrantVerifier};
use proto::sandbox_runtime::{Grant, SignedGrant};

/// The fixed signing seed of the harness.
pub const SEED: [u8; 32] = *b"OpenShell fuzz harness key 00000";

/// The signer of the fixed key.
pub fn signer() -> &'static GrantSigner {
    static SIGNER: OnceLock<GrantSigner> = OnceLock::new();
    SIGNER.get_or_init(|| match GrantSigner::from_seed_hex(&hex::encode(SEED)) {
        Ok(s) => s,
        Err(e) => panic!("harness: the fixed seed is not a key: {e}"),
    })
}

fn verifier() -> &'static GrantVerifier {
    static VERIFIER: OnceLock<GrantVerifier> = OnceLock::new();
    VERIFIER.get_or_init(
        || match GrantVerifier::from_public_hex(&signer().public_key_hex()) {
            Ok(v) => v,
            Err(e) => panic!("harness: the fixed public key is refused: {e}"),
        },
    )
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let (selector, bytes) = super::split(data);
    match selector % 3 {
        0 => {
            if let Ok(signed) = SignedGrant::decode(bytes) {
                if let Ok(grant) = verifier().verify(&signed) {
                    // Only the fixed key signs: a grant that verifies is one
                    // it signed, and its bytes are exactly the signed ones.
                    assert!(
                        Grant::decode(signed.grant.as_slice()).ok() == Some(grant),
                        "a verified grant is not the grant that was signed"
                    );
                }
            }
        }
        1 => signed_body(bytes),
        _ => {
            if let Ok(text) = std::str::from_utf8(bytes) {
                if let Ok(keys) = parse_trusted_keys(text) {
                    assert!(
                        !keys.fingerprints().is_empty(),
                        "a keys file without keys passed"
                    );
                }
            }
        }
    }
}

/// Signs `body` as the grant bytes with the fixed key: the signature
/// verifies, so the result is a decoded grant or `Malformed`, never
/// `BadSignature`.
fn signed_body(body: &[u8]) {
    let signed = SignedGrant {
        grant: body.to_vec(),
        signature: raw_key().sign(body).to_bytes().to_vec(),
    };
    match verifier().verify(&signed) {
        Ok(_) | Err(GrantError::Malformed(_)) => {}
        Err(e) => panic!("a grant signed by the trusted key is refused: {e}"),
    }
}

/// The fixed key as ed25519-dalek's, to sign bytes that are not a `Grant`
/// encoding (`GrantSigner` only signs grants).
fn raw_key() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| SigningKey::from_bytes(&SEED))
}
