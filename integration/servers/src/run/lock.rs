//! One `services` at a time per state directory: `up`, `down`, `deps`,
//! `restart` and `restart-member` hold an exclusive lock on
//! `<state>/.lock` (the bash's `flock -w 600`). The lock is released when
//! the guard drops; the servers started meanwhile do not inherit it
//! (std opens the file close-on-exec).

use std::fs::{self, File, TryLockError};
use std::time::{Duration, Instant};

use crate::Paths;

/// How long to wait for another `services` to finish.
const WAIT: Duration = Duration::from_secs(600);

/// The held lock.
#[derive(Debug)]
pub(crate) struct Lock {
    _file: File,
}

impl Lock {
    /// Makes the state directories and takes the lock, waiting up to 600 s.
    pub(crate) fn take(paths: &Paths) -> Result<Self, String> {
        for dir in [&paths.state, &paths.pids, &paths.logs, &paths.data] {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let path = paths.state.join(".lock");
        let file = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let until = Instant::now() + WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Self { _file: file }),
                Err(TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(format!(
                        "another services.sh holds {} (waited {}s)",
                        path.display(),
                        WAIT.as_secs()
                    ));
                }
                Err(TryLockError::Error(e)) => {
                    return Err(format!("cannot lock {}: {e}", path.display()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("fencing-lock-test-{}", std::process::id()));
        let paths = Paths::new(&dir, None);
        let first = Lock::take(&paths).unwrap();
        // flock locks belong to the open file, so a second open in this
        // process contends like another process would.
        let other = File::create(dir.join(".lock")).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        drop(first);
        assert!(other.try_lock().is_ok());
        let _ = fs::remove_dir_all(&dir);
    }
}
