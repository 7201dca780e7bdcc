//! Takeover grants: signed by the cluster signing key (ed25519) that every
//! gateway holds, verified by every sandbox runtime with the public key.
//!
//! A grant names the sandbox, generation, new owner member and incarnation,
//! term and credential epoch. The signature covers the exact protobuf bytes
//! of the [`Grant`], which travel unchanged inside [`SignedGrant`], and is
//! checked with ed25519-dalek's `verify_strict` (rejects non-canonical
//! signatures and small-order public keys, so one grant has exactly one
//! valid signature). The runtime also checks that the grant names the
//! sandbox and the generation it was started for (`supervisor::runtime`).
//!
//! Key files hold the 32-byte ed25519 seed as 64 hex characters.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use prost::Message;

use crate::sandbox_runtime::{Grant, SignedGrant};

/// A key or grant that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The key text is not 64 hex characters.
    #[error("invalid key: {0}")]
    BadKey(String),
    /// The signature does not verify with the cluster public key.
    #[error("grant signature does not verify with the cluster key")]
    BadSignature,
    /// The grant bytes do not decode.
    #[error("grant does not decode: {0}")]
    Malformed(String),
}

fn key_bytes(text: &str) -> Result<[u8; 32], GrantError> {
    let bytes =
        hex::decode(text.trim()).map_err(|e| GrantError::BadKey(format!("not hex: {e}")))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| GrantError::BadKey(format!("{} bytes, expected 32", b.len())))
}

/// Signs grants (gateways).
#[derive(Clone)]
pub struct GrantSigner {
    key: SigningKey,
}

impl std::fmt::Debug for GrantSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GrantSigner(public key {})", self.public_key_hex())
    }
}

impl GrantSigner {
    /// A signer from the hex seed in a key file.
    ///
    /// # Errors
    /// [`GrantError::BadKey`] when the text is not 64 hex characters.
    pub fn from_seed_hex(text: &str) -> Result<Self, GrantError> {
        Ok(GrantSigner {
            key: SigningKey::from_bytes(&key_bytes(text)?),
        })
    }

    /// An INSECURE key derived from the cluster id, for local development
    /// only: anyone who knows the cluster id can forge grants.
    pub fn insecure_development_key(cluster_id: &str) -> Self {
        let mut seed = *b"openshell-insecure-dev-signing-k";
        for (i, b) in cluster_id.bytes().enumerate() {
            seed[i % 32] ^= b.rotate_left((i / 32) as u32 % 8);
        }
        GrantSigner {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key runtimes verify with, as hex.
    pub fn public_key_hex(&self) -> String {
        hex::encode(self.key.verifying_key().to_bytes())
    }

    /// Signs a grant.
    pub fn sign(&self, grant: &Grant) -> SignedGrant {
        let bytes = grant.encode_to_vec();
        let signature = self.key.sign(&bytes);
        SignedGrant {
            grant: bytes,
            signature: signature.to_bytes().to_vec(),
        }
    }
}

/// Verifies grants (runtimes).
#[derive(Clone, Debug)]
pub struct GrantVerifier {
    key: VerifyingKey,
}

impl GrantVerifier {
    /// A verifier from the cluster public key as hex.
    ///
    /// # Errors
    /// [`GrantError::BadKey`] when the text is not a valid ed25519 public key
    /// or is a small-order (weak) one.
    pub fn from_public_hex(text: &str) -> Result<Self, GrantError> {
        let key = VerifyingKey::from_bytes(&key_bytes(text)?)
            .map_err(|e| GrantError::BadKey(e.to_string()))?;
        if key.is_weak() {
            return Err(GrantError::BadKey(
                "a small-order (weak) ed25519 public key".into(),
            ));
        }
        Ok(GrantVerifier { key })
    }

    /// Verifies the signature (`verify_strict`: non-canonical signatures
    /// and weak keys are refused) and decodes the grant.
    ///
    /// # Errors
    /// [`GrantError::BadSignature`] or [`GrantError::Malformed`].
    pub fn verify(&self, signed: &SignedGrant) -> Result<Grant, GrantError> {
        let signature =
            Signature::from_slice(&signed.signature).map_err(|_| GrantError::BadSignature)?;
        self.key
            .verify_strict(&signed.grant, &signature)
            .map_err(|_| GrantError::BadSignature)?;
        Grant::decode(signed.grant.as_slice()).map_err(|e| GrantError::Malformed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(credential_epoch: u64) -> Grant {
        Grant {
            sandbox_id: "sb".into(),
            generation: 1,
            member_id: "m1".into(),
            incarnation: 7,
            term: 2,
            credential_epoch,
            log_index: 42,
            release: false,
        }
    }

    #[test]
    fn signed_grants_verify_and_tampering_is_refused() {
        let signer = GrantSigner::from_seed_hex(&"11".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let verifier = GrantVerifier::from_public_hex(&signer.public_key_hex())
            .unwrap_or_else(|e| panic!("{e}"));
        let signed = signer.sign(&grant(3));
        assert_eq!(verifier.verify(&signed), Ok(grant(3)));
        let mut tampered = signed.clone();
        tampered.grant = grant(4).encode_to_vec();
        assert_eq!(verifier.verify(&tampered), Err(GrantError::BadSignature));
        let other = GrantSigner::insecure_development_key("x");
        assert_eq!(
            verifier.verify(&other.sign(&grant(3))),
            Err(GrantError::BadSignature)
        );
        assert!(GrantSigner::from_seed_hex("zz").is_err());
        assert!(GrantVerifier::from_public_hex(&"00".repeat(31)).is_err());
    }

    /// The group order L of ed25519, little endian.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];

    #[test]
    fn a_non_canonical_signature_is_refused() {
        // s + L is the same scalar mod L: lax verification would accept it
        // (malleability); `verify_strict` and `Signature` parsing refuse it.
        let signer = GrantSigner::from_seed_hex(&"11".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let verifier = GrantVerifier::from_public_hex(&signer.public_key_hex())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut signed = signer.sign(&grant(3));
        let mut carry = 0u16;
        for (i, l) in L.iter().enumerate() {
            let sum = u16::from(signed.signature[32 + i]) + u16::from(*l) + carry;
            signed.signature[32 + i] = (sum & 0xff) as u8;
            carry = sum >> 8;
        }
        assert_eq!(verifier.verify(&signed), Err(GrantError::BadSignature));
    }

    #[test]
    fn a_small_order_public_key_is_refused() {
        // The identity point (y = 1) has small order: any "signature" with
        // R = identity and s = 0 verifies under lax rules for every message.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert!(GrantVerifier::from_public_hex(&hex::encode(identity)).is_err());
        let verifier = GrantVerifier {
            key: VerifyingKey::from_bytes(&identity).unwrap_or_else(|e| panic!("{e}")),
        };
        let mut signature = identity.to_vec();
        signature.extend([0u8; 32]);
        let forged = SignedGrant {
            grant: grant(3).encode_to_vec(),
            signature,
        };
        assert_eq!(verifier.verify(&forged), Err(GrantError::BadSignature));
    }
}
