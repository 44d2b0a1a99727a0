//! The AWS shared credentials and config files (`~/.aws/credentials`,
//! `~/.aws/config`): the static keys, region and endpoint of a profile.
//! Single sign-on and role chains in those files are not read; web
//! identity and container or instance credentials come from the
//! environment, as `object_store` reads them.

use std::collections::HashMap;
use std::path::Path;

use object_store::aws::AmazonS3Builder;

use crate::{Error, Result};

/// What one profile of the shared files holds.
#[derive(Default, PartialEq, Eq)]
pub(crate) struct Profile {
    pub(crate) access_key_id: Option<String>,
    secret_access_key: Option<String>,
    session_token: Option<String>,
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
}

impl std::fmt::Debug for Profile {
    // No secret in what a log line would print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Profile {
    /// Profile `name` of the credentials file (section `[name]`) and the
    /// config file (`[profile name]`, or `[default]`); a file that does not
    /// exist holds nothing.
    pub(crate) fn read(
        credentials: Option<&Path>,
        config: Option<&Path>,
        name: &str,
    ) -> Result<Self> {
        let mut profile = Self::default();
        if let Some(path) = config {
            let section = if name == "default" {
                "default".to_string()
            } else {
                format!("profile {name}")
            };
            profile.merge(read_ini_section(path, &section)?);
        }
        if let Some(path) = credentials {
            profile.merge(read_ini_section(path, name)?);
        }
        Ok(profile)
    }

    fn merge(&mut self, values: HashMap<String, String>) {
        for (key, value) in values {
            let slot = match key.as_str() {
                "aws_access_key_id" => &mut self.access_key_id,
                "aws_secret_access_key" => &mut self.secret_access_key,
                "aws_session_token" => &mut self.session_token,
                "region" => &mut self.region,
                "endpoint_url" => &mut self.endpoint,
                _ => continue,
            };
            *slot = Some(value);
        }
    }

    /// `builder` with this profile's keys, if it has both.
    pub(crate) fn keys_onto(&self, mut builder: AmazonS3Builder) -> AmazonS3Builder {
        if let (Some(id), Some(secret)) = (&self.access_key_id, &self.secret_access_key) {
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
            if let Some(token) = &self.session_token {
                builder = builder.with_token(token);
            }
        }
        builder
    }
}

/// The `key = value` lines of `[section]` in the INI file at `path`
/// (nothing if the file does not exist).
fn read_ini_section(path: &Path, section: &str) -> Result<HashMap<String, String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => {
            return Err(Error::Setup {
                store: "s3".into(),
                reason: format!("{}: {e}", path.display()),
            });
        }
    };
    let mut values = HashMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside && let Some((key, value)) = line.split_once('=') {
            values.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;

    #[test]
    fn a_profile_is_read_from_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let credentials = dir.path().join("credentials");
        std::fs::write(
            &credentials,
            "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n\
             [lake]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token=E\n",
        )
        .unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[default]\nregion = eu-west-1\n[profile lake]\nregion = us-west-2\n\
             endpoint_url = http://127.0.0.1:9000\n",
        )
        .unwrap();
        let lake = Profile::read(Some(&credentials), Some(&config), "lake").unwrap();
        assert_eq!(lake.access_key_id.as_deref(), Some("C"));
        assert_eq!(lake.session_token.as_deref(), Some("E"));
        assert_eq!(lake.region.as_deref(), Some("us-west-2"));
        assert_eq!(lake.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        let default = Profile::read(Some(&credentials), Some(&config), "default").unwrap();
        assert_eq!(default.access_key_id.as_deref(), Some("A"));
        assert_eq!(default.region.as_deref(), Some("eu-west-1"));
        // No secret in what a log line would print.
        assert!(!format!("{lake:?}").contains('D'), "{lake:?}");
        let none = Profile::read(Some(&dir.path().join("missing")), None, "x").unwrap();
        assert_eq!(none, Profile::default());
    }
}
