//! Where vSSD checkpoints are kept.
//!
//! A checkpoint is an opaque byte string per vSSD id. The daemon keeps them as files
//! beside the device (written to a temporary name, synced, then renamed, so a crash
//! leaves either the old or the new checkpoint); tests keep them in memory. What
//! the bytes say is the business of [`format`](mod@format).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use parking_lot::Mutex;

use crate::FtlError;

pub(crate) mod format;

/// Durable storage for checkpoints, keyed by vSSD id.
pub trait CheckpointStore: Send + Sync {
    /// The last checkpoint saved for `id`, if any.
    fn load(&self, id: u32) -> Result<Option<Vec<u8>>, FtlError>;
    /// Atomically replaces the checkpoint of `id`.
    fn save(&self, id: u32, bytes: &[u8]) -> Result<(), FtlError>;
    /// Forgets the checkpoint of `id`.
    fn remove(&self, id: u32) -> Result<(), FtlError>;
}

/// Checkpoints as files `vssd-<id>.ckpt` in a directory.
#[derive(Debug)]
pub struct DirCheckpoints {
    dir: PathBuf,
}

impl DirCheckpoints {
    /// Keeps checkpoints in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, FtlError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)
            .map_err(|e| FtlError::Checkpoint(format!("create {}: {e}", dir.display())))?;
        Ok(Self { dir })
    }

    fn path(&self, id: u32) -> PathBuf {
        self.dir.join(format!("vssd-{id}.ckpt"))
    }
}

impl CheckpointStore for DirCheckpoints {
    fn load(&self, id: u32) -> Result<Option<Vec<u8>>, FtlError> {
        match std::fs::read(self.path(id)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FtlError::Checkpoint(format!(
                "read {}: {e}",
                self.path(id).display()
            ))),
        }
    }

    fn save(&self, id: u32, bytes: &[u8]) -> Result<(), FtlError> {
        let path = self.path(id);
        let tmp = path.with_extension("ckpt.tmp");
        let err = |what: &str, e: std::io::Error| {
            FtlError::Checkpoint(format!("{what} {}: {e}", tmp.display()))
        };
        let mut f = std::fs::File::create(&tmp).map_err(|e| err("create", e))?;
        f.write_all(bytes).map_err(|e| err("write", e))?;
        f.sync_all().map_err(|e| err("sync", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| err("rename", e))?;
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    fn remove(&self, id: u32) -> Result<(), FtlError> {
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(FtlError::Checkpoint(format!(
                "remove {}: {e}",
                self.path(id).display()
            ))),
        }
    }
}

/// Checkpoints in memory (tests, simulator).
#[derive(Debug, Default)]
pub struct MemCheckpoints {
    map: Mutex<HashMap<u32, Vec<u8>>>,
}

impl CheckpointStore for MemCheckpoints {
    fn load(&self, id: u32) -> Result<Option<Vec<u8>>, FtlError> {
        Ok(self.map.lock().get(&id).cloned())
    }
    fn save(&self, id: u32, bytes: &[u8]) -> Result<(), FtlError> {
        self.map.lock().insert(id, bytes.to_vec());
        Ok(())
    }
    fn remove(&self, id: u32) -> Result<(), FtlError> {
        self.map.lock().remove(&id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_store_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let s = DirCheckpoints::new(d.path().join("c")).unwrap();
        assert_eq!(s.load(3).unwrap(), None);
        s.save(3, b"abc").unwrap();
        s.save(3, b"abcd").unwrap();
        assert_eq!(s.load(3).unwrap().as_deref(), Some(&b"abcd"[..]));
        s.remove(3).unwrap();
        s.remove(3).unwrap();
        assert_eq!(s.load(3).unwrap(), None);
    }
}
