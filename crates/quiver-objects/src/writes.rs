//! Writes held until a statement succeeds: what makes `COPY ... TO`
//! atomic.
//!
//! DataFusion's file writers finish each file they started when their input
//! ends, also when it ends in an error: a `COPY` whose query fails midway
//! would leave an object holding the rows written so far. While a
//! [`WriteHold`] holds a prefix of a bucket, the writes under it are kept
//! back instead: a plain put keeps its payload, a multipart upload uploads
//! its parts but is not completed. [`WriteHold::commit`] then makes them
//! (each object appears whole), and [`WriteHold::abort`], or dropping the
//! hold, abandons them (no object appears).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{
    MultipartUpload, ObjectStore, PutOptions, PutPayload, PutResult, Result, UploadPart,
};

/// A write kept back until its statement ends.
#[derive(Debug)]
enum Held {
    Put(Path, PutPayload, PutOptions),
    Upload(Box<dyn MultipartUpload>),
}

/// The writes kept back under one prefix.
#[derive(Debug)]
pub(crate) struct Hold {
    prefix: Path,
    held: Mutex<Vec<Held>>,
}

impl Hold {
    /// Whether `location` is `prefix` or lies below it.
    fn covers(&self, location: &Path) -> bool {
        location.as_ref() == self.prefix.as_ref() || location.prefix_matches(&self.prefix)
    }

    fn keep(&self, held: Held) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(held);
    }

    fn take(&self) -> Vec<Held> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The holds of one bucket.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    holds: Mutex<Vec<Arc<Hold>>>,
}

impl Holds {
    /// The hold covering `location`, if any.
    pub(crate) fn covering(&self, location: &Path) -> Option<Arc<Hold>> {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|hold| hold.covers(location))
            .cloned()
    }

    /// Holds the writes under `prefix`; fails if another hold overlaps it
    /// (two statements writing the same objects at once).
    pub(crate) fn hold(&self, prefix: Path) -> Result<Arc<Hold>, String> {
        let mut holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        let overlaps = |h: &Arc<Hold>| {
            h.covers(&prefix) || prefix.as_ref().is_empty() || h.prefix.prefix_matches(&prefix)
        };
        if holds.iter().any(overlaps) {
            return Err(format!(
                "another statement is writing to {prefix} now: try again when it ends"
            ));
        }
        let hold = Arc::new(Hold {
            prefix,
            held: Mutex::default(),
        });
        holds.push(Arc::clone(&hold));
        Ok(hold)
    }

    fn release(&self, hold: &Arc<Hold>) {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|h| !Arc::ptr_eq(h, hold));
    }
}

/// A put under a hold: kept, and answered as done.
pub(crate) fn hold_put(
    hold: &Hold,
    location: &Path,
    payload: PutPayload,
    opts: PutOptions,
) -> PutResult {
    hold.keep(Held::Put(location.clone(), payload, opts));
    PutResult {
        e_tag: None,
        version: None,
    }
}

/// A multipart upload under a hold: its parts go up, its completion waits.
#[derive(Debug)]
pub(crate) struct HeldUpload {
    inner: Option<Box<dyn MultipartUpload>>,
    hold: Arc<Hold>,
}

impl HeldUpload {
    pub(crate) fn new(inner: Box<dyn MultipartUpload>, hold: Arc<Hold>) -> Self {
        Self {
            inner: Some(inner),
            hold,
        }
    }
}

#[async_trait]
impl MultipartUpload for HeldUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        match &mut self.inner {
            Some(inner) => inner.put_part(data),
            None => Box::pin(async {
                Err(object_store::Error::Generic {
                    store: "quiver",
                    source: "a part after the upload was completed".into(),
                })
            }),
        }
    }

    async fn complete(&mut self) -> Result<PutResult> {
        if let Some(inner) = self.inner.take() {
            self.hold.keep(Held::Upload(inner));
        }
        Ok(PutResult {
            e_tag: None,
            version: None,
        })
    }

    async fn abort(&mut self) -> Result<()> {
        match self.inner.take() {
            Some(mut inner) => inner.abort().await,
            None => Ok(()),
        }
    }
}

/// The writes of one statement under one prefix of a bucket, held until
/// [`WriteHold::commit`] (module docs).
#[derive(Debug)]
pub struct WriteHold {
    /// The bucket's own store, under its [`crate::Bucket`]: what the held
    /// writes are made with.
    store: Arc<dyn ObjectStore>,
    holds: Arc<Holds>,
    hold: Arc<Hold>,
}

impl WriteHold {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, holds: Arc<Holds>, hold: Arc<Hold>) -> Self {
        Self { store, holds, hold }
    }

    /// Makes the held writes: each object appears, whole. Fails at the
    /// first write that fails; the writes not made are abandoned.
    pub async fn commit(self) -> Result<()> {
        let mut held = self.hold.take().into_iter();
        let mut outcome = Ok(());
        for write in held.by_ref() {
            let done = match write {
                Held::Put(location, payload, opts) => self
                    .store
                    .put_opts(&location, payload, opts)
                    .await
                    .map(drop),
                Held::Upload(mut upload) => upload.complete().await.map(drop),
            };
            if let Err(e) = done {
                outcome = Err(e);
                break;
            }
        }
        abandon(held.collect()).await;
        self.holds.release(&self.hold);
        outcome
    }

    /// Abandons the held writes: no object appears.
    pub async fn abort(self) {
        abandon(self.hold.take()).await;
        self.holds.release(&self.hold);
    }
}

impl Drop for WriteHold {
    // A hold dropped uncommitted (its statement cancelled): the uploads'
    // parts are left to the bucket's lifecycle rules, nothing appears.
    fn drop(&mut self) {
        self.holds.release(&self.hold);
    }
}

async fn abandon(held: Vec<Held>) {
    for write in held {
        if let Held::Upload(mut upload) = write
            && let Err(e) = upload.abort().await
        {
            tracing::warn!(error = %e, "could not abort an upload of a failed write");
        }
    }
}
