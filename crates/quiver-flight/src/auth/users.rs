//! The users file: users with argon2 password hashes, and static API tokens,
//! each with a role. TOML, written by `quiver user add` and `quiver user token`.
//!
//! ```toml
//! [users.alice]
//! role = "write"
//! password = "$argon2id$v=19$m=19456,t=2,p=1$..."
//!
//! [tokens.nightly-load]
//! role = "write"
//! sha256 = "5c1e..."   # of the token; the token itself is never stored
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Role;
use crate::{Error, Result};

/// Every static API token starts with this.
pub const API_TOKEN_PREFIX: &str = "qk_";

/// Random bytes in an API token: 32 (256 bits), so a plain SHA-256 of it is
/// as safe to store as a slow password hash.
const API_TOKEN_BYTES: usize = 32;

/// The contents of a users file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    /// Users who log in with a password, by name.
    #[serde(default)]
    pub users: BTreeMap<String, UserEntry>,
    /// Static API tokens, by a name that says what they are for.
    #[serde(default)]
    pub tokens: BTreeMap<String, ApiTokenEntry>,
}

/// A user of the users file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// What the user may do.
    pub role: Role,
    /// The password's argon2 hash, in PHC string format.
    pub password: String,
}

/// A static API token of the users file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiTokenEntry {
    /// What the token may do.
    pub role: Role,
    /// SHA-256 of the token, in lowercase hex.
    pub sha256: String,
}

fn config(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Config(format!("{}: {what}", path.display()))
}

fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    Ok(bytes)
}

/// The argon2id hash of `password` with a fresh salt, in PHC string format.
pub fn hash_password(password: &str) -> Result<String> {
    let salt = SaltString::encode_b64(&random_bytes::<16>()?)
        .map_err(|e| Error::Internal(format!("salt: {e}")))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| Error::Internal(format!("hashing a password: {e}")))?
        .to_string())
}

/// Whether `password` matches the PHC string `hash` (false for a malformed hash).
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// SHA-256 of an API token, in lowercase hex: what the users file keeps.
pub fn api_token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// Whether `name` can be a user name: 1 to 256 bytes, no control characters
/// and no `:` (basic credentials are `user:password`).
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 256 || name.chars().any(|c| c.is_control() || c == ':') {
        return Err(Error::invalid(format!(
            "{name:?} cannot be a user or token name: 1 to 256 bytes, no ':' or control \
             characters"
        )));
    }
    Ok(())
}

impl UsersFile {
    /// Reads and checks a users file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| config(path, e))?;
        let file: Self = toml::from_str(&text).map_err(|e| config(path, e))?;
        for (name, user) in &file.users {
            check_name(name).map_err(|e| config(path, e))?;
            PasswordHash::new(&user.password)
                .map_err(|e| config(path, format!("user '{name}': not a password hash: {e}")))?;
        }
        for (name, token) in &file.tokens {
            if token.sha256.len() != 64 || !token.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(config(
                    path,
                    format!("token '{name}': sha256 must be 64 hex digits"),
                ));
            }
        }
        Ok(file)
    }

    /// Reads a users file, or an empty one if there is no file at `path`.
    pub fn load_or_default(path: &Path) -> Result<Self> {
        if path.exists() {
            Self::load(path)
        } else {
            Ok(Self::default())
        }
    }

    /// Writes the file atomically (a temporary file renamed over it), readable
    /// and writable by its owner only (mode 0600).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string(self).map_err(|e| config(path, e))?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| config(path, "not a file name"))?;
        let temp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temp).map_err(|e| config(&temp, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| config(&temp, e))?;
        }
        file.write_all(b"# quiver users: written by `quiver user add` and `quiver user token`\n")
            .and_then(|()| file.write_all(text.as_bytes()))
            .and_then(|()| file.sync_all())
            .map_err(|e| config(&temp, e))?;
        std::fs::rename(&temp, path).map_err(|e| config(path, e))
    }

    /// Adds user `name`, or replaces its role and password.
    pub fn set_user(&mut self, name: &str, role: Role, password: &str) -> Result<()> {
        check_name(name)?;
        if password.is_empty() {
            return Err(Error::invalid("the password is empty"));
        }
        self.users.insert(
            name.to_string(),
            UserEntry {
                role,
                password: hash_password(password)?,
            },
        );
        Ok(())
    }

    /// Makes a new API token called `name` (replacing one of that name) and
    /// returns it: the file keeps only its digest.
    pub fn new_api_token(&mut self, name: &str, role: Role) -> Result<String> {
        check_name(name)?;
        let token = format!(
            "{API_TOKEN_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(random_bytes::<API_TOKEN_BYTES>()?)
        );
        self.tokens.insert(
            name.to_string(),
            ApiTokenEntry {
                role,
                sha256: api_token_digest(&token),
            },
        );
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_tokens_round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        let mut file = UsersFile::load_or_default(&path).unwrap();
        assert_eq!(file, UsersFile::default());
        file.set_user("alice", Role::Write, "s3cret").unwrap();
        let token = file.new_api_token("loader", Role::Read).unwrap();
        file.save(&path).unwrap();

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("s3cret") && !text.contains(&token));

        let read = UsersFile::load(&path).unwrap();
        assert_eq!(read, file);
        let alice = &read.users["alice"];
        assert_eq!(alice.role, Role::Write);
        assert!(alice.password.starts_with("$argon2id$"));
        assert!(verify_password("s3cret", &alice.password));
        assert!(!verify_password("s3creT", &alice.password));
        assert_eq!(read.tokens["loader"].sha256, api_token_digest(&token));

        // Updating a user keeps the others and changes the hash.
        let mut again = read.clone();
        again.set_user("alice", Role::Admin, "other").unwrap();
        assert_ne!(again.users["alice"].password, alice.password);
        assert_eq!(again.users["alice"].role, Role::Admin);
        assert_eq!(again.tokens, read.tokens);
    }

    #[test]
    fn bad_files_and_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        for bad in [
            "[users.a]\nrole = \"root\"\npassword = \"$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaA\"\n",
            "[users.a]\nrole = \"read\"\npassword = \"plain text\"\n",
            "[tokens.t]\nrole = \"read\"\nsha256 = \"abc\"\n",
            "[users.a]\nrole = \"read\"\n",
            "[groups]\n",
            "not toml",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(
                matches!(UsersFile::load(&path), Err(Error::Config(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            UsersFile::load(&dir.path().join("missing.toml")),
            Err(Error::Config(_))
        ));
        let mut file = UsersFile::default();
        assert!(file.set_user("a:b", Role::Read, "pw").is_err());
        assert!(file.set_user("", Role::Read, "pw").is_err());
        assert!(file.set_user("a", Role::Read, "").is_err());
    }
}
