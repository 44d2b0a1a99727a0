//! Signed, expiring bearer tokens: what a Handshake with a password gives out.
//!
//! A token is `qs1.PAYLOAD.MAC`, both parts base64url without padding.
//! `PAYLOAD` is the expiry (seconds since the Unix epoch, 8 bytes big-endian),
//! the role (1 byte) and the user name (UTF-8); `MAC` is HMAC-SHA256 over a
//! domain label and `PAYLOAD`, keyed with the server's secret. Nothing in a
//! token is secret; it cannot be changed or made without the key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::Role;
use crate::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

/// Every signed token starts with this.
pub const TOKEN_PREFIX: &str = "qs1.";

/// What the MAC covers besides the payload: no MAC made for anything else
/// with the same key can pass as a token's.
const DOMAIN: &[u8] = b"quiver bearer token v1\0";

/// Length of a random secret: 32 bytes, SHA-256's block of entropy.
const SECRET_LEN: usize = 32;

/// Signs and verifies bearer tokens with one secret key.
#[derive(Clone)]
pub struct TokenSigner {
    key: Vec<u8>,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner").finish_non_exhaustive()
    }
}

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The user it was given to.
    pub user: String,
    /// The user's role when it was given.
    pub role: Role,
    /// When it stops being valid, in seconds since the Unix epoch.
    pub expires: u64,
}

impl TokenSigner {
    /// A signer with a fresh random secret: its tokens are valid only in this
    /// process.
    pub fn random() -> Result<Self> {
        let mut key = vec![0u8; SECRET_LEN];
        getrandom::fill(&mut key)
            .map_err(|e| Error::Internal(format!("no randomness for the token secret: {e}")))?;
        Ok(Self { key })
    }

    /// A signer keyed with `secret` (e.g. read from `--token-secret-file`), so
    /// tokens stay valid across restarts and between servers sharing it.
    pub fn from_secret(secret: &[u8]) -> Result<Self> {
        if secret.len() < SECRET_LEN {
            return Err(Error::Config(format!(
                "a token secret must hold at least {SECRET_LEN} bytes, this one has {}",
                secret.len()
            )));
        }
        Ok(Self {
            key: secret.to_vec(),
        })
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length: this cannot fail.
        let mut mac = HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(DOMAIN);
        mac
    }

    /// A token for `user` with `role`, valid until `expires`.
    pub fn sign(&self, user: &str, role: Role, expires: u64) -> String {
        let mut payload = Vec::with_capacity(9 + user.len());
        payload.extend_from_slice(&expires.to_be_bytes());
        payload.push(role.code());
        payload.extend_from_slice(user.as_bytes());
        let mut mac = self.mac();
        mac.update(&payload);
        let tag = mac.finalize().into_bytes();
        format!(
            "{TOKEN_PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The claims of `token` if this signer made it and it has not expired at
    /// `now`; otherwise an [`Error::Unauthenticated`] saying which.
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims> {
        let invalid = || Error::Unauthenticated("invalid bearer token".into());
        let rest = token.strip_prefix(TOKEN_PREFIX).ok_or_else(invalid)?;
        let (payload, tag) = rest.split_once('.').ok_or_else(invalid)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| invalid())?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| invalid())?;
        let mut mac = self.mac();
        mac.update(&payload);
        // verify_slice compares in constant time.
        mac.verify_slice(&tag).map_err(|_| {
            Error::Unauthenticated(
                "invalid bearer token: its signature does not match (forged, altered, or \
                 signed by another server)"
                    .into(),
            )
        })?;
        let (expires, rest) = payload.split_first_chunk::<8>().ok_or_else(invalid)?;
        let (role, user) = rest.split_first().ok_or_else(invalid)?;
        let claims = Claims {
            user: String::from_utf8(user.to_vec()).map_err(|_| invalid())?,
            role: Role::from_code(*role).ok_or_else(invalid)?,
            expires: u64::from_be_bytes(*expires),
        };
        if claims.expires <= now {
            return Err(Error::Unauthenticated(format!(
                "the bearer token of user '{}' expired {} s ago: handshake again",
                claims.user,
                now - claims.expires
            )));
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: Error) -> String {
        match e {
            Error::Unauthenticated(m) => m,
            other => panic!("expected Unauthenticated, got {other:?}"),
        }
    }

    #[test]
    fn a_token_verifies_until_it_expires() {
        let signer = TokenSigner::random().unwrap();
        let token = signer.sign("alice", Role::Write, 1_000);
        assert!(token.starts_with(TOKEN_PREFIX));
        let claims = signer.verify(&token, 999).unwrap();
        assert_eq!(
            claims,
            Claims {
                user: "alice".into(),
                role: Role::Write,
                expires: 1_000
            }
        );
        assert!(message(signer.verify(&token, 1_000).unwrap_err()).contains("expired"));
    }

    #[test]
    fn another_key_or_an_altered_token_fails() {
        let signer = TokenSigner::random().unwrap();
        let other = TokenSigner::random().unwrap();
        let token = signer.sign("bob", Role::Read, u64::MAX);
        assert!(message(other.verify(&token, 0).unwrap_err()).contains("signature"));

        // Raise the role in the payload and keep the MAC: the MAC no longer matches.
        let rest = token.strip_prefix(TOKEN_PREFIX).unwrap();
        let (payload, tag) = rest.split_once('.').unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(payload).unwrap();
        bytes[8] = Role::Admin.code();
        let forged = format!("{TOKEN_PREFIX}{}.{tag}", URL_SAFE_NO_PAD.encode(&bytes));
        assert!(message(signer.verify(&forged, 0).unwrap_err()).contains("signature"));

        // A flipped bit in the MAC, garbage, a truncated token.
        let mut flipped = token.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(signer.verify(&flipped, 0).is_err());
        for bad in [
            "",
            "qs1.",
            "qs1..",
            "qs1.!!!.???",
            "Bearer x",
            &token[..token.len() - 5],
        ] {
            assert!(signer.verify(bad, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_configured_secret_signs_the_same_tokens() {
        let secret = [7u8; 32];
        let a = TokenSigner::from_secret(&secret).unwrap();
        let b = TokenSigner::from_secret(&secret).unwrap();
        let token = a.sign("carol", Role::Admin, 50);
        assert_eq!(b.verify(&token, 10).unwrap().role, Role::Admin);
        assert!(matches!(
            TokenSigner::from_secret(b"short"),
            Err(Error::Config(_))
        ));
    }
}
