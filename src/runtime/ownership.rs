//! Which process owns a job's transactional id right now.
//!
//! A fenced producer does not say why: with Kafka 4 a transaction that the
//! broker aborted after `transaction.timeout.ms` (the process was paused)
//! looks the same to librdkafka as a newer instance's `init_transactions`.
//! Restarting in the first case is right; in the second it would fence the
//! live replacement in turn. So every process writes an owner token into
//! the job's checkpoint folder (shared by every instance of the job) before
//! it fences anyone, and checks it before each restart: a token that is not
//! its own means another instance took over, and this one stops
//! (docs/operations.md).

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::checkpoint::store::{create_private_dir, sync_dir};
use crate::error::{Result, WeirError};

/// This process's claim on a transactional id.
#[derive(Debug, Clone)]
pub struct Ownership {
    path: PathBuf,
    token: String,
    transactional_id: String,
}

impl Ownership {
    /// Writes a new token for `transactional_id` under `job_dir`
    /// (atomically: temp file, fsync, rename, fsync the folder).
    pub fn claim(job_dir: &Path, transactional_id: &str) -> Result<Self> {
        create_private_dir(job_dir)?;
        let path = job_dir.join(format!("owner-{transactional_id}"));
        let token = format!(
            "pid={} host={} started_ms={} nonce={:x}",
            std::process::id(),
            hostname(),
            super::now_ms(),
            nonce()
        );
        let tmp = path.with_extension("tmp");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| WeirError::io(&tmp, e))?;
        f.write_all(token.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| WeirError::io(&tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| WeirError::io(&path, e))?;
        sync_dir(job_dir)?;
        Ok(Self {
            path,
            token,
            transactional_id: transactional_id.to_string(),
        })
    }

    /// Fails with [`WeirError::Fenced`] if another process has claimed the
    /// transactional id since. A token that cannot be read (the checkpoint
    /// storage is failing) is no evidence of a takeover: the restart goes
    /// ahead, and its recovery meets the storage problem itself.
    pub fn check(&self) -> Result<()> {
        let current = match fs::read_to_string(&self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "owner token unreadable; restarting anyway");
                return Ok(());
            }
        };
        if current == self.token {
            return Ok(());
        }
        Err(WeirError::Fenced {
            transactional_id: self.transactional_id.clone(),
            evidence: format!(
                "{} names another process ({}), not this one ({})",
                self.path.display(),
                current.trim(),
                self.token
            ),
        })
    }
}

fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    xxhash_rust::xxh3::xxh3_64(
        &[t.to_le_bytes(), u64::from(std::process::id()).to_le_bytes()].concat(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_claim_takes_the_id_over() {
        let tmp = tempfile::tempdir().unwrap();
        let a = Ownership::claim(tmp.path(), "wc-0").unwrap();
        a.check().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = Ownership::claim(tmp.path(), "wc-0").unwrap();
        b.check().unwrap();
        let e = a.check().unwrap_err();
        assert!(e.is_fatal());
        assert!(e.to_string().contains("took over"), "{e}");
        // Other transactional ids are other claims.
        Ownership::claim(tmp.path(), "wc-1").unwrap();
        b.check().unwrap();
        // Storage trouble is not a takeover.
        std::fs::remove_file(tmp.path().join("owner-wc-0")).unwrap();
        b.check().unwrap();
    }
}
