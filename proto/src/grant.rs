//! Takeover grants: signed by the cluster signing key (ed25519) that every
//! gateway holds, verified by every sandbox runtime against its set of
//! trusted grant keys (configured, never learned from the wire).
//!
//! A grant names the sandbox, generation, new owner member and incarnation,
//! term and credential epoch. The signature covers the exact protobuf bytes
//! of the [`Grant`], which travel unchanged inside [`SignedGrant`], and is
//! checked with ed25519-dalek's `verify_strict` (rejects non-canonical
//! signatures and small-order public keys, so one grant has exactly one
//! valid signature). The runtime also checks that the grant names the
//! sandbox and the generation it was started for (`supervisor::runtime`).
//!
//! # Key files (one format each)
//!
//! - The **signing key file** of a gateway holds the 32-byte ed25519 seed as
//!   64 hex characters (surrounding whitespace ignored).
//! - A **trusted grant keys file** of a supervisor or runtime holds the
//!   public keys it accepts grants from: one 64-hex-character ed25519 public
//!   key per line; blank lines and lines starting with `#` are ignored; a
//!   key listed twice, a line that is not 64 hex characters, a small-order
//!   (weak) key or a file without any key is refused, naming the line
//!   ([`parse_trusted_keys`]). Several keys are trusted at once during a key
//!   rotation (docs/security.md).
//!
//! A key is named in logs and errors by its [`fingerprint`]: the first 16
//! hex characters of the public key (public keys are not secret; the prefix
//! is what an operator greps the key files for).

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use prost::Message;

use crate::sandbox_runtime::{Grant, SignedGrant};

/// A key or grant that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The key text is not 64 hex characters.
    #[error("invalid key: {0}")]
    BadKey(String),
    /// The signature does not verify with any trusted grant key.
    #[error("grant signature does not verify with any trusted grant key")]
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

/// The fingerprint of a public key given as hex: its first 16 hex
/// characters (lowercase).
pub fn fingerprint(public_hex: &str) -> String {
    public_hex
        .trim()
        .to_ascii_lowercase()
        .chars()
        .take(16)
        .collect()
}

/// A public key from hex, refusing small-order (weak) keys.
fn public_key(text: &str) -> Result<VerifyingKey, GrantError> {
    let key = VerifyingKey::from_bytes(&key_bytes(text)?)
        .map_err(|e| GrantError::BadKey(e.to_string()))?;
    if key.is_weak() {
        return Err(GrantError::BadKey(
            "a small-order (weak) ed25519 public key".into(),
        ));
    }
    Ok(key)
}

/// Parses a trusted grant keys file (format in the module doc).
///
/// # Errors
/// `line N: <problem>` for the first bad line, or when no key is listed.
pub fn parse_trusted_keys(text: &str) -> Result<GrantVerifier, String> {
    let mut keys: Vec<VerifyingKey> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = public_key(line).map_err(|e| {
            format!(
                "line {}: {e} (each line holds one 64-hex-character ed25519 public key)",
                i + 1
            )
        })?;
        if keys.contains(&key) {
            return Err(format!(
                "line {}: key {} is listed twice",
                i + 1,
                fingerprint(line)
            ));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("no trusted grant key (one 64-hex-character public key per line)".into());
    }
    Ok(GrantVerifier { keys })
}

/// Verifies grants (runtimes) against a set of trusted grant keys: a grant
/// is valid when its signature verifies with any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantVerifier {
    /// The trusted keys (at least one), in the order given.
    keys: Vec<VerifyingKey>,
}

impl GrantVerifier {
    /// A verifier trusting the one public key given as hex.
    ///
    /// # Errors
    /// [`GrantError::BadKey`] when the text is not a valid ed25519 public key
    /// or is a small-order (weak) one.
    pub fn from_public_hex(text: &str) -> Result<Self, GrantError> {
        Ok(GrantVerifier {
            keys: vec![public_key(text)?],
        })
    }

    /// A verifier trusting every key of `texts` (hex; duplicates count once).
    ///
    /// # Errors
    /// [`GrantError::BadKey`] for the first bad key, or when `texts` is empty.
    pub fn from_public_hexes<S: AsRef<str>>(texts: &[S]) -> Result<Self, GrantError> {
        let mut keys = Vec::new();
        for text in texts {
            let key = public_key(text.as_ref())?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        if keys.is_empty() {
            return Err(GrantError::BadKey("no trusted grant key given".into()));
        }
        Ok(GrantVerifier { keys })
    }

    /// Whether the public key `public_hex` is one of the trusted keys.
    pub fn trusts(&self, public_hex: &str) -> bool {
        public_key(public_hex)
            .map(|key| self.keys.contains(&key))
            .unwrap_or(false)
    }

    /// The fingerprints of the trusted keys, in order.
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| fingerprint(&hex::encode(k.to_bytes())))
            .collect()
    }

    /// Verifies the signature with each trusted key in turn
    /// (`verify_strict`: non-canonical signatures and weak keys are
    /// refused) and decodes the grant.
    ///
    /// # Errors
    /// [`GrantError::BadSignature`] when no trusted key verifies it, or
    /// [`GrantError::Malformed`].
    pub fn verify(&self, signed: &SignedGrant) -> Result<Grant, GrantError> {
        let signature =
            Signature::from_slice(&signed.signature).map_err(|_| GrantError::BadSignature)?;
        if !self
            .keys
            .iter()
            .any(|key| key.verify_strict(&signed.grant, &signature).is_ok())
        {
            return Err(GrantError::BadSignature);
        }
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
            keys: vec![VerifyingKey::from_bytes(&identity).unwrap_or_else(|e| panic!("{e}"))],
        };
        let mut signature = identity.to_vec();
        signature.extend([0u8; 32]);
        let forged = SignedGrant {
            grant: grant(3).encode_to_vec(),
            signature,
        };
        assert_eq!(verifier.verify(&forged), Err(GrantError::BadSignature));
    }

    #[test]
    fn a_set_verifies_grants_of_each_of_its_keys_only() {
        let old = GrantSigner::from_seed_hex(&"11".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let new = GrantSigner::from_seed_hex(&"22".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let other = GrantSigner::from_seed_hex(&"33".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let both = GrantVerifier::from_public_hexes(&[old.public_key_hex(), new.public_key_hex()])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(both.verify(&old.sign(&grant(3))), Ok(grant(3)));
        assert_eq!(both.verify(&new.sign(&grant(4))), Ok(grant(4)));
        assert_eq!(
            both.verify(&other.sign(&grant(3))),
            Err(GrantError::BadSignature)
        );
        assert!(both.trusts(&new.public_key_hex()));
        assert!(!both.trusts(&other.public_key_hex()));
        assert!(!both.trusts("zz"));
        assert_eq!(
            both.fingerprints(),
            vec![
                fingerprint(&old.public_key_hex()),
                fingerprint(&new.public_key_hex())
            ]
        );
        assert_eq!(fingerprint(&old.public_key_hex()).len(), 16);
        let empty: [&str; 0] = [];
        assert!(GrantVerifier::from_public_hexes(&empty).is_err());
    }

    #[test]
    fn trusted_keys_files_have_one_key_per_line_and_comments() {
        let old = GrantSigner::from_seed_hex(&"11".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let new = GrantSigner::from_seed_hex(&"22".repeat(32)).unwrap_or_else(|e| panic!("{e}"));
        let text = format!(
            "# rotation 2026-12\n\n{}\n  # the new key\n  {}  \n",
            old.public_key_hex(),
            new.public_key_hex().to_uppercase()
        );
        let set = parse_trusted_keys(&text).unwrap_or_else(|e| panic!("{e}"));
        assert!(set.trusts(&old.public_key_hex()) && set.trusts(&new.public_key_hex()));
        let refused = |text: &str| parse_trusted_keys(text).err().unwrap_or_default();
        let e = refused(&format!("# c\n{}\nzz\n", old.public_key_hex()));
        assert!(e.starts_with("line 3: invalid key: not hex"), "{e}");
        let e = refused(&format!("{}\n", "ab".repeat(31)));
        assert!(e.starts_with("line 1: invalid key: 31 bytes"), "{e}");
        let e = refused(&format!(
            "{}\n# again\n{}\n",
            old.public_key_hex(),
            old.public_key_hex()
        ));
        assert_eq!(
            e,
            format!(
                "line 3: key {} is listed twice",
                fingerprint(&old.public_key_hex())
            )
        );
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let e = refused(&hex::encode(identity));
        assert!(e.contains("line 1") && e.contains("small-order"), "{e}");
        let e = refused("# only comments\n\n");
        assert!(e.starts_with("no trusted grant key"), "{e}");
        // A signing key file (the seed) is 64 hex characters too: it parses
        // as *a* key, but not as the public key of that seed.
        let seed_as_key = parse_trusted_keys(&"11".repeat(32));
        assert!(seed_as_key
            .map(|s| !s.trusts(&old.public_key_hex()))
            .unwrap_or(true));
    }
}
