//! Object storage as quiver reads it: tables in place in S3 and
//! S3-compatible servers, Google Cloud Storage and Azure.
//!
//! [`ObjectStores`] is the SQL engine's one `ObjectStoreRegistry`: every
//! scan, listing and `COPY ... TO` reaches its bytes through it, so a
//! `--table`, a `CREATE EXTERNAL TABLE` and a plan's file scans all see the
//! same stores. A bucket's store is built the first time a URL names it,
//! from the standard environment (`AWS_ACCESS_KEY_ID`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, web identity, ...), else the
//! shared credentials and config files (`~/.aws/credentials`,
//! `~/.aws/config`, `AWS_PROFILE`), with the server's [`BucketSettings`]
//! over both. Each is wrapped in a [`Bucket`], whose errors name the bucket,
//! which counts what the bucket serves, and which reads ranges through the
//! [`RangeCache`] (in memory or in `--cache-dir`), by the version of each
//! object the query's listing gave.
//!
//! Only the server's configuration says how a bucket is reached: a
//! statement cannot name an endpoint or credentials ([`refused_option`]),
//! nor a URL of another scheme ([`Error::UnsupportedScheme`]), so a table's
//! location cannot make the server call an address its operator did not
//! choose. docs/object-storage.md is the user's side of it.
#![warn(missing_docs)]

mod bucket;
mod cache;
mod error;
pub mod metrics;
mod profile;
mod settings;
mod stores;
mod writes;

pub use bucket::Bucket;
pub use cache::{CacheSettings, DEFAULT_CACHE_SIZE, RangeCache};
pub use error::{Error, Result};
pub use settings::{BucketSettings, ObjectStoreSettings, is_object_store_url, refused_option};
pub use stores::{CONNECT_TIMEOUT, ObjectStores, REQUEST_TIMEOUT, RETRIES, RETRY_TIMEOUT};
pub use writes::WriteHold;
