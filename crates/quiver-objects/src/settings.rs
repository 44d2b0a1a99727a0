//! How the server reaches buckets: [`ObjectStoreSettings`], from `--s3`
//! and the config file's `[s3.BUCKET]` blocks, and the checks that keep a
//! statement from choosing it ([`refused_option`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use url::Url;

use crate::{Error, Result};

/// How the server reaches one bucket, over the environment: a `[s3.BUCKET]`
/// block of the config file, or `--s3 BUCKET.KEY=VALUE`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketSettings {
    /// The S3 API's URL (`http://127.0.0.1:8333`), for S3-compatible
    /// servers; plain `http://` is allowed with it.
    pub endpoint: Option<String>,
    /// The bucket's region.
    pub region: Option<String>,
    /// Requests as `ENDPOINT/BUCKET/KEY` (`true`) or
    /// `BUCKET.ENDPOINT/KEY` (`false`, AWS's virtual-hosted style).
    pub path_style: Option<bool>,
    /// A shared credentials file (the format of `~/.aws/credentials`) whose
    /// profile holds the bucket's keys.
    pub credentials_file: Option<PathBuf>,
    /// The profile of that file (default: `default`).
    pub profile: Option<String>,
}

impl BucketSettings {
    /// The keys a block or `--s3` takes.
    pub const KEYS: [&str; 5] = [
        "endpoint",
        "region",
        "path-style",
        "credentials-file",
        "profile",
    ];

    /// Sets `key` to `value`; fails on a key it does not have or a value
    /// the key does not take.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "endpoint" => {
                let url = Url::parse(value).map_err(|e| format!("endpoint {value:?}: {e}"))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(format!("endpoint {value:?}: expected an http(s):// URL"));
                }
                self.endpoint = Some(value.trim_end_matches('/').to_string());
            }
            "region" => self.region = Some(value.to_string()),
            "path-style" => {
                self.path_style = Some(match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("path-style must be true or false, got {value:?}")),
                });
            }
            "credentials-file" => self.credentials_file = Some(PathBuf::from(value)),
            "profile" => self.profile = Some(value.to_string()),
            _ => {
                return Err(format!(
                    "unknown bucket setting {key:?} (expected one of {})",
                    Self::KEYS.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// Every bucket's settings, by bucket name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectStoreSettings {
    /// The settings of each bucket named in the configuration.
    pub buckets: BTreeMap<String, BucketSettings>,
}

impl ObjectStoreSettings {
    /// Applies one `BUCKET.KEY=VALUE` (`--s3`). The key is what follows the
    /// last dot before `=`, so a bucket's name may hold dots.
    pub fn apply(&mut self, setting: &str) -> Result<(), String> {
        let (target, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("expected BUCKET.KEY=VALUE, got {setting:?}"))?;
        let (bucket, key) = target
            .rsplit_once('.')
            .ok_or_else(|| format!("expected BUCKET.KEY=VALUE, got {setting:?}"))?;
        check_bucket_name(bucket).map_err(|e| e.to_string())?;
        self.buckets
            .entry(bucket.to_string())
            .or_default()
            .set(key, value)
    }
}

/// The kinds of object store quiver reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    S3,
    Gcs,
    Azure,
}

impl StoreKind {
    /// The kind `url`'s scheme names, if any.
    pub(crate) fn of(url: &Url) -> Option<Self> {
        match url.scheme() {
            "s3" | "s3a" => Some(Self::S3),
            "gs" => Some(Self::Gcs),
            "az" | "adl" | "azure" | "abfs" | "abfss" => Some(Self::Azure),
            _ => None,
        }
    }
}

/// Whether `location` is an object store URL (`s3://`, `gs://`, `az://`,
/// ...), not a local path.
pub fn is_object_store_url(location: &str) -> bool {
    Url::parse(location).is_ok_and(|url| StoreKind::of(&url).is_some())
}

/// Why a statement's `OPTIONS` key is refused, if it is: keys that would
/// choose how an object store is reached (its endpoint, credentials or
/// client settings). The server's configuration alone says that.
pub fn refused_option(key: &str) -> Option<String> {
    let lower = key.to_ascii_lowercase();
    let namespace = lower.split('.').next().unwrap_or_default();
    let reaching = ["aws", "s3", "gcp", "gcs", "google", "azure", "az", "client"];
    let named = [
        "endpoint",
        "credential",
        "access_key",
        "secret",
        "token",
        "region",
        "role_arn",
        "allow_http",
        "proxy",
    ];
    (reaching.contains(&namespace) || named.iter().any(|n| lower.contains(n))).then(|| {
        format!(
            "option '{key}' is not allowed: how object storage is reached (endpoint, region, \
             credentials) is the server's configuration (docs/object-storage.md)"
        )
    })
}

/// A bucket's name as S3 allows it: 3 to 63 lower-case letters, digits,
/// dots and hyphens, a letter or digit at each end. Anything else never
/// reaches a URL the server calls.
pub(crate) fn check_bucket_name(bucket: &str) -> Result<()> {
    let bytes = bucket.as_bytes();
    let valid = (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidBucket(bucket.to_string()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;

    #[test]
    fn bucket_settings_take_the_last_dot_as_the_keys() {
        let mut settings = ObjectStoreSettings::default();
        settings
            .apply("my.data.bucket.endpoint=http://127.0.0.1:8333/")
            .unwrap();
        settings.apply("my.data.bucket.path-style=true").unwrap();
        let bucket = &settings.buckets["my.data.bucket"];
        assert_eq!(bucket.endpoint.as_deref(), Some("http://127.0.0.1:8333"));
        assert_eq!(bucket.path_style, Some(true));
        for bad in [
            "trips.endpoint",
            "trips=x",
            "trips.color=red",
            "trips.path-style=yes",
            "trips.endpoint=ftp://x",
            "Trips!.region=x",
        ] {
            assert!(settings.apply(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_that_choose_how_a_store_is_reached_are_refused() {
        for key in [
            "aws.endpoint",
            "AWS.ACCESS_KEY_ID",
            "aws.secret_access_key",
            "gcp.service_account_path",
            "azure.account_key",
            "endpoint_url",
            "client.proxy_url",
        ] {
            assert!(refused_option(key).is_some(), "{key}");
        }
        for key in ["format.has_header", "format.delimiter", "execution.x"] {
            assert!(refused_option(key).is_none(), "{key}");
        }
    }

    #[test]
    fn bucket_names_are_checked_before_any_url_is_made() {
        for good in ["trips", "my-bucket.v2", "abc"] {
            check_bucket_name(good).unwrap();
        }
        let long = "x".repeat(64);
        for bad in ["ab", "Trips", "evil.com#", "a_b", "-abc", &long] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_store_urls_are_told_from_paths() {
        assert!(is_object_store_url("s3://lake/trips/"));
        assert!(is_object_store_url("gs://lake/x.parquet"));
        assert!(!is_object_store_url("/data/trips"));
        assert!(!is_object_store_url("file:///data/trips"));
        assert!(!is_object_store_url("http://127.0.0.1:9/x.parquet"));
    }
}
