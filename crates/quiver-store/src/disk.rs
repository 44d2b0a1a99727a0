//! The file operations a durable store's writes make, behind a trait so that
//! tests can make any one of them fail.
//!
//! Only the steps of a write go through [`Disk`]: creating and writing a file,
//! syncing it, renaming, syncing a directory, removing. Reading (recovery,
//! memory-mapping) uses `std` directly.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// A file being written.
pub(crate) trait DiskFile: Write + Send {
    /// Flushes the file's data and metadata to stable storage (`fsync`).
    fn sync(&mut self) -> io::Result<()>;
}

/// The write-side file operations of a data directory.
pub(crate) trait Disk: Send + Sync + fmt::Debug {
    /// Creates `path`, which must not exist, for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>>;
    /// Renames `from` to `to`, replacing `to` atomically if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries (created, renamed, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OsDisk;

impl DiskFile for File {
    fn sync(&mut self) -> io::Result<()> {
        crate::metrics::fsync("file", || self.sync_all())
    }
}

impl Disk for OsDisk {
    fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(file))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let dir = File::open(dir)?;
        crate::metrics::fsync("dir", || dir.sync_all())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}

/// A [`Disk`] over the real file system whose `n`th operation (counting every
/// create, write, sync, rename, directory sync and remove from 0) fails.
#[cfg(test)]
pub(crate) mod faulty {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Shared count of operations and the one to fail.
    #[derive(Debug)]
    pub(crate) struct Faults {
        done: AtomicU64,
        fail_at: u64,
        kind: io::ErrorKind,
        /// The operation that failed, once one has.
        failed: std::sync::Mutex<Option<String>>,
    }

    impl Faults {
        fn step(&self, what: &str, path: &Path) -> io::Result<()> {
            if self.done.fetch_add(1, Ordering::SeqCst) == self.fail_at {
                let what = format!("{what} {}", path.display());
                *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
                return Err(io::Error::new(self.kind, "injected fault"));
            }
            Ok(())
        }

        /// Which operation failed, if any did.
        pub(crate) fn failed(&self) -> Option<String> {
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        }
    }

    /// The faulty disk.
    #[derive(Debug, Clone)]
    pub(crate) struct FaultyDisk {
        pub(crate) faults: Arc<Faults>,
    }

    impl FaultyDisk {
        /// Fails operation `fail_at` with an error of `kind`.
        pub(crate) fn new(fail_at: u64, kind: io::ErrorKind) -> Self {
            Self {
                faults: Arc::new(Faults {
                    done: AtomicU64::new(0),
                    fail_at,
                    kind,
                    failed: Default::default(),
                }),
            }
        }
    }

    struct FaultyFile {
        file: File,
        path: std::path::PathBuf,
        faults: Arc<Faults>,
    }

    impl Write for FaultyFile {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.faults.step("write", &self.path)?;
            self.file.write(buf)
        }

        fn flush(&mut self) -> io::Result<()> {
            self.file.flush()
        }
    }

    impl DiskFile for FaultyFile {
        fn sync(&mut self) -> io::Result<()> {
            self.faults.step("sync", &self.path)?;
            self.file.sync_all()
        }
    }

    impl Disk for FaultyDisk {
        fn create(&self, path: &Path) -> io::Result<Box<dyn DiskFile>> {
            self.faults.step("create", path)?;
            let file = OpenOptions::new().write(true).create_new(true).open(path)?;
            Ok(Box::new(FaultyFile {
                file,
                path: path.to_path_buf(),
                faults: Arc::clone(&self.faults),
            }))
        }

        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            self.faults.step("rename", from)?;
            std::fs::rename(from, to)
        }

        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            self.faults.step("sync_dir", dir)?;
            File::open(dir)?.sync_all()
        }

        fn remove(&self, path: &Path) -> io::Result<()> {
            self.faults.step("remove", path)?;
            std::fs::remove_file(path)
        }
    }
}
