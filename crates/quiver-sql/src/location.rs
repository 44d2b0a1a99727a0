//! Where a table in place lies: a local path or an object store URL, as a
//! `--table` or [`crate::SqlEngine::register_location`] names it, made into
//! the listing DataFusion scans.

use datafusion::catalog::Session;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionState;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use url::Url;

use crate::{Result, SqlError};
use quiver_objects::is_object_store_url;

/// Characters that make a location's last part a glob.
const GLOB: [char; 3] = ['*', '?', '['];

/// The listing of `location`: one file, a directory (or prefix) of files,
/// or the files a glob picks. A URL's key that is no object is taken as a
/// prefix, as `s3://bucket/trips` is meant.
pub(crate) async fn table_url(state: &SessionState, location: &str) -> Result<ListingTableUrl> {
    if !is_object_store_url(location) {
        // A URL of another scheme is no local path: refused as the
        // object stores refuse it, before anything is reached.
        match Url::parse(location) {
            Ok(url) if url.scheme() == "file" => return local_url(url.path()),
            Ok(url) if url.scheme().len() > 1 => {
                return Err(
                    quiver_objects::Error::UnsupportedScheme(url.scheme().to_string()).into(),
                );
            }
            _ => return local_url(location),
        }
    }
    let url = Url::parse(location).map_err(|e| SqlError::File(format!("{location}: {e}")))?;
    let path = url.path().to_string();
    if let Some(at) = path.find(GLOB) {
        // The prefix up to the glob's directory; the glob matches below it.
        let split = path[..at].rfind('/').map_or(0, |i| i + 1);
        let pattern = glob::Pattern::new(&path[split..])
            .map_err(|e| SqlError::File(format!("{location}: not a glob: {e}")))?;
        let mut prefix = url.clone();
        prefix.set_path(&path[..split]);
        return Ok(ListingTableUrl::try_new(prefix, Some(pattern))?);
    }
    if path.ends_with('/') || path.is_empty() {
        let mut directory = url.clone();
        if path.is_empty() {
            directory.set_path("/");
        }
        return Ok(ListingTableUrl::try_new(directory, None)?);
    }
    let store = state
        .runtime_env()
        .object_store(ListingTableUrl::try_new(url.clone(), None)?)?;
    let key =
        ObjectPath::from_url_path(&path).map_err(|e| SqlError::File(format!("{location}: {e}")))?;
    match store.head(&key).await {
        Ok(_) => Ok(ListingTableUrl::try_new(url, None)?),
        Err(object_store::Error::NotFound { .. }) => {
            let mut directory = url;
            directory.set_path(&format!("{path}/"));
            Ok(ListingTableUrl::try_new(directory, None)?)
        }
        Err(e) => Err(about(location, e.into())),
    }
}

/// A local file, directory or glob.
fn local_url(location: &str) -> Result<ListingTableUrl> {
    if location.contains(GLOB) {
        return Ok(ListingTableUrl::parse(location)?);
    }
    let metadata = std::fs::metadata(location).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => SqlError::NotFound(format!("{location}: {e}")),
        _ => SqlError::File(format!("{location}: {e}")),
    })?;
    let location = if metadata.is_dir() && !location.ends_with('/') {
        format!("{location}/")
    } else {
        location.to_string()
    };
    Ok(ListingTableUrl::parse(location)?)
}

/// The extension of the file `url` names, or of the first data file it
/// lists (names starting with `.` or `_` are no data: `_SUCCESS`, `.crc`).
pub(crate) async fn data_extension(
    state: &SessionState,
    url: &ListingTableUrl,
    location: &str,
) -> Result<String> {
    let extension_of = |name: &str| {
        name.rsplit_once('.')
            .map(|(_, extension)| extension.to_ascii_lowercase())
            .filter(|e| !e.is_empty() && !e.contains('/'))
    };
    if !url.is_collection() && url.get_glob().is_none() {
        let name = url.prefix().filename().unwrap_or_default();
        return extension_of(name).ok_or_else(|| {
            SqlError::File(format!("{location}: no extension to tell its format by"))
        });
    }
    let store = state.runtime_env().object_store(url)?;
    let session: &dyn Session = state;
    let mut files = url
        .list_all_files(session, store.as_ref(), "")
        .await
        .map_err(|e| about(location, e))?;
    while let Some(file) = files.next().await {
        let file = file.map_err(|e| about(location, e))?;
        let Some(name) = file.location.filename() else {
            continue;
        };
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        if let Some(extension) = extension_of(name) {
            return Ok(extension);
        }
    }
    Err(SqlError::NotFound(format!(
        "{location}: no data files there"
    )))
}

/// `error` of reading `location`, with the location named.
pub(crate) fn about(location: &str, error: DataFusionError) -> SqlError {
    SqlError::from(error.context(format!("table in place at {location}")))
}
