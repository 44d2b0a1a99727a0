//! [`ObjectStores`]: the engine's one `ObjectStoreRegistry` (crate docs).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreRegistry;
use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{ClientConfigKey, RetryConfig};
use url::Url;

use crate::bucket::Bucket;
use crate::cache::RangeCache;
use crate::profile::Profile;
use crate::settings::{BucketSettings, ObjectStoreSettings, StoreKind, check_bucket_name};
use crate::{Error, Result, WriteHold};

/// How long connecting to an object store may take before the request
/// fails (and is retried).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request to an object store may take, its body included;
/// reads are of byte ranges, a few MiB at most.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Times a failed request to an object store (a refused connection, a 5xx)
/// is tried again before the read fails as UNAVAILABLE.
pub const RETRIES: usize = 3;

/// How long a request is retried for, from its first try.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// The object stores of one engine (crate docs): the local file system,
/// and a store per bucket, built when a URL first names it.
pub struct ObjectStores {
    local: Arc<dyn ObjectStore>,
    settings: ObjectStoreSettings,
    cache: Option<Arc<RangeCache>>,
    /// Buckets by `scheme://bucket`, built when first named.
    buckets: RwLock<HashMap<String, Arc<Bucket>>>,
    /// Stores registered by DataFusion's `register_object_store`, over the
    /// buckets.
    registered: RwLock<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl std::fmt::Debug for ObjectStores {
    // No store's configuration: it may hold credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let buckets = self.buckets.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("ObjectStores")
            .field("local", &self.local.to_string())
            .field("buckets", &buckets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// `scheme://bucket` of `url`: the key of its store.
fn store_key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
}

impl ObjectStores {
    /// The stores: `local` for `file://` URLs, and object storage reached
    /// as `settings` say, over the environment, its ranges read through
    /// `cache` if given.
    pub fn new(
        local: Arc<dyn ObjectStore>,
        settings: ObjectStoreSettings,
        cache: Option<Arc<RangeCache>>,
    ) -> Self {
        Self {
            local,
            settings,
            cache,
            buckets: RwLock::default(),
            registered: RwLock::default(),
        }
    }

    /// The bucket `url` names (built now if it is the first time).
    pub fn bucket(&self, url: &Url) -> Result<Arc<Bucket>> {
        let kind =
            StoreKind::of(url).ok_or_else(|| Error::UnsupportedScheme(url.scheme().to_string()))?;
        let key = store_key(url);
        if let Some(bucket) = self
            .buckets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(bucket));
        }
        let bucket = self.build(kind, url)?;
        let mut buckets = self.buckets.write().unwrap_or_else(PoisonError::into_inner);
        Ok(Arc::clone(buckets.entry(key).or_insert(bucket)))
    }

    /// Takes each of `objects`, of the bucket `url` names, as the version
    /// of its object ([`Bucket::note_listed`]): a scan another node listed
    /// reads them here as that node found them.
    pub fn note_listed(
        &self,
        url: &Url,
        objects: impl IntoIterator<Item = object_store::ObjectMeta>,
    ) -> Result<()> {
        let bucket = self.bucket(url)?;
        for meta in objects {
            bucket.note_listed(meta);
        }
        Ok(())
    }

    /// Holds the writes under `url` (an object, or a prefix of them) until
    /// the hold is committed ([`WriteHold`]).
    pub fn hold_writes(&self, url: &Url) -> Result<WriteHold> {
        let prefix = Path::from_url_path(url.path()).map_err(|e| Error::Setup {
            store: store_key(url),
            reason: e.to_string(),
        })?;
        self.bucket(url)?.hold_writes(prefix)
    }

    /// The store of `url`'s bucket, built now.
    fn build(&self, kind: StoreKind, url: &Url) -> Result<Arc<Bucket>> {
        let bucket = url.host_str().unwrap_or_default();
        let key = store_key(url);
        let failed = |e: object_store::Error| Error::Setup {
            store: key.clone(),
            reason: e.to_string(),
        };
        let store: Arc<dyn ObjectStore> = match kind {
            StoreKind::S3 => {
                check_bucket_name(bucket)?;
                let settings = self.settings.buckets.get(bucket);
                Arc::new(s3_builder(bucket, settings)?.build().map_err(failed)?)
            }
            StoreKind::Gcs => Arc::new(
                GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry())
                    .build()
                    .map_err(failed)?,
            ),
            StoreKind::Azure => Arc::new(
                MicrosoftAzureBuilder::from_env()
                    .with_url(url.as_str())
                    .with_retry(retry())
                    .build()
                    .map_err(failed)?,
            ),
        };
        tracing::info!(store = %key, "object store set up");
        Ok(Arc::new(Bucket::new(key, store, self.cache.clone())))
    }
}

impl ObjectStoreRegistry for ObjectStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.registered
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(store_key(url), store)
    }

    fn deregister_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        let key = store_key(url);
        self.registered
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key)
            .ok_or_else(|| DataFusionError::Plan(format!("no object store for {key}")))
    }

    fn get_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        if let Some(store) = self
            .registered
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&store_key(url))
        {
            return Ok(Arc::clone(store));
        }
        if url.scheme() == "file" {
            return Ok(Arc::clone(&self.local));
        }
        let bucket = self
            .bucket(url)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(bucket)
    }
}

/// The retries of every object store: few and short, so that a store out
/// of reach fails a read as UNAVAILABLE well within a client's deadline.
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    }
}

/// A duration as `object_store`'s settings parse it.
fn millis(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

/// S3's builder for `bucket`: the environment, else a profile of the shared
/// files, then `settings` over both.
fn s3_builder(bucket: &str, settings: Option<&BucketSettings>) -> Result<AmazonS3Builder> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry())
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            millis(CONNECT_TIMEOUT),
        )
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            millis(REQUEST_TIMEOUT),
        );
    // The shared files, where the environment leaves keys, region or
    // endpoint out.
    let profile_name = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
    let home = env("HOME").map(PathBuf::from);
    let credentials_file = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")));
    let config_file = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
    let shared = Profile::read(
        credentials_file.as_deref(),
        config_file.as_deref(),
        &profile_name,
    )?;
    if env("AWS_ACCESS_KEY_ID").is_none() && env("AWS_WEB_IDENTITY_TOKEN_FILE").is_none() {
        builder = shared.keys_onto(builder);
    }
    if env("AWS_REGION").is_none()
        && env("AWS_DEFAULT_REGION").is_none()
        && let Some(region) = &shared.region
    {
        builder = builder.with_region(region);
    }
    if env("AWS_ENDPOINT_URL").is_none()
        && env("AWS_ENDPOINT").is_none()
        && let Some(endpoint) = &shared.endpoint
    {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    let Some(settings) = settings else {
        return Ok(builder);
    };
    if let Some(endpoint) = &settings.endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    if let Some(region) = &settings.region {
        builder = builder.with_region(region);
    }
    if let Some(path_style) = settings.path_style {
        builder = builder.with_virtual_hosted_style_request(!path_style);
    }
    if settings.credentials_file.is_some() || settings.profile.is_some() {
        let setup = |reason: String| Error::Setup {
            store: format!("s3://{bucket}"),
            reason,
        };
        let file = settings
            .credentials_file
            .clone()
            .or(credentials_file)
            .ok_or_else(|| setup("a profile is set but there is no credentials file".into()))?;
        let name = settings.profile.as_deref().unwrap_or("default");
        let profile = Profile::read(Some(&file), None, name)?;
        if profile.access_key_id.is_none() {
            return Err(setup(format!(
                "profile '{name}' of {} has no aws_access_key_id",
                file.display()
            )));
        }
        builder = profile.keys_onto(builder);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;

    fn stores() -> ObjectStores {
        ObjectStores::new(
            Arc::new(object_store::local::LocalFileSystem::new()),
            ObjectStoreSettings::default(),
            None,
        )
    }

    #[test]
    fn an_unknown_scheme_is_refused_before_anything_is_reached() {
        let error = stores()
            .get_store(&Url::parse("http://127.0.0.1:9/x.parquet").unwrap())
            .unwrap_err();
        let DataFusionError::External(inner) = error else {
            panic!("not the crate's error: {error}");
        };
        assert!(
            matches!(inner.downcast_ref::<Error>(), Some(Error::UnsupportedScheme(s)) if s == "http"),
            "{inner}"
        );
        assert!(
            stores()
                .get_store(&Url::parse("file:///tmp/x").unwrap())
                .is_ok()
        );
    }

    #[test]
    fn a_bucket_is_set_up_once_and_named() {
        let stores = stores();
        let url = Url::parse("s3://lake-a/trips/").unwrap();
        let first = stores.get_store(&url).unwrap();
        let again = stores
            .get_store(&Url::parse("s3://lake-a/other/x.parquet").unwrap())
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(first.to_string(), "Bucket(s3://lake-a)");
        assert!(
            stores
                .get_store(&Url::parse("s3://Not_A_Bucket/x").unwrap())
                .is_err()
        );
    }
}
