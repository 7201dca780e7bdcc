//! A small configuration file that is re-read when it changes, so that an
//! operator edits it in place (or Kubernetes swaps a mounted Secret) and the
//! process picks the change up without a restart: the trusted grant keys of
//! supervisors and runtimes, the gateway's member credentials.
//!
//! [`WatchedFile::refresh`] re-reads the file at most once per interval (the
//! callers use 2 s) and re-parses it when its contents changed. A file that
//! no longer parses, or cannot be read, is reported once
//! ([`Refresh::Kept`], naming the file and the line) and the previous,
//! valid contents stay in force: a typo never empties a trusted set. The
//! first load ([`WatchedFile::load`]) fails instead, so a process never
//! starts on a bad file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a [`WatchedFile::refresh`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// Not due yet, or the contents did not change.
    Unchanged,
    /// New contents parsed and are now in force.
    Reloaded,
    /// The file changed but cannot be used (the message names the file and
    /// the line); the previous contents stay in force. Reported once per
    /// bad version of the file.
    Kept(String),
}

/// Parses a file's text; the error names the line (`line 3: ...`).
pub type Parse<T> = fn(&str) -> Result<T, String>;

struct State<T> {
    /// The contents in force.
    current: Arc<T>,
    /// The text last read (good or bad): a change is a different text.
    text: String,
    /// When the file was last read.
    checked: Instant,
}

/// A parsed file, re-read on change. Clones share the state.
pub struct WatchedFile<T> {
    path: PathBuf,
    parse: Parse<T>,
    every: Duration,
    /// A std lock: held only to read or swap, never across an await.
    state: Arc<Mutex<State<T>>>,
}

impl<T> Clone for WatchedFile<T> {
    fn clone(&self) -> Self {
        WatchedFile {
            path: self.path.clone(),
            parse: self.parse,
            every: self.every,
            state: self.state.clone(),
        }
    }
}

impl<T> std::fmt::Debug for WatchedFile<T> {
    /// The path only: the contents may be secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WatchedFile({})", self.path.display())
    }
}

impl<T> PartialEq for WatchedFile<T> {
    /// The same file (the contents are what the file says).
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl<T> Eq for WatchedFile<T> {}

impl<T> WatchedFile<T> {
    /// Reads and parses `path`, then re-reads it at most every `every`.
    ///
    /// # Errors
    /// `<path>: <problem>` when the file cannot be read or parsed.
    pub fn load(path: &Path, parse: Parse<T>, every: Duration) -> Result<Self, String> {
        let text = read(path)?;
        let current = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(WatchedFile {
            path: path.to_path_buf(),
            parse,
            every,
            state: Arc::new(Mutex::new(State {
                current: Arc::new(current),
                text,
                checked: Instant::now(),
            })),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The contents in force (as of the last [`WatchedFile::refresh`]).
    pub fn current(&self) -> Arc<T> {
        self.lock().current.clone()
    }

    /// Re-reads the file if the interval has passed since the last read,
    /// and takes its contents if they changed and parse.
    pub fn refresh(&self) -> Refresh {
        let mut state = self.lock();
        if state.checked.elapsed() < self.every {
            return Refresh::Unchanged;
        }
        state.checked = Instant::now();
        let text = match read(&self.path) {
            Ok(text) => text,
            Err(e) => {
                // Reported once per failure, not at every interval.
                let marker = format!("\0unreadable: {e}");
                if state.text == marker {
                    return Refresh::Unchanged;
                }
                state.text = marker;
                return Refresh::Kept(format!("{e}; keeping the previous contents"));
            }
        };
        if text == state.text {
            return Refresh::Unchanged;
        }
        let parsed = (self.parse)(&text);
        state.text = text;
        match parsed {
            Ok(current) => {
                state.current = Arc::new(current);
                Refresh::Reloaded
            }
            Err(e) => Refresh::Kept(format!(
                "{}: {e}; keeping the previous contents",
                self.path.display()
            )),
        }
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: cannot be read: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(text: &str) -> Result<Vec<u32>, String> {
        text.lines()
            .enumerate()
            .map(|(i, l)| {
                l.trim()
                    .parse()
                    .map_err(|_| format!("line {}: not a number", i + 1))
            })
            .collect()
    }

    #[test]
    fn a_changed_file_is_taken_and_a_bad_one_kept_out() {
        let dir = tempfile_dir();
        let path = dir.join("n");
        std::fs::write(&path, "1\n2\n").unwrap();
        let file = WatchedFile::load(&path, numbers, Duration::ZERO).unwrap();
        assert_eq!(*file.current(), vec![1, 2]);
        assert_eq!(file.refresh(), Refresh::Unchanged);
        std::fs::write(&path, "1\n2\n3\n").unwrap();
        assert_eq!(file.refresh(), Refresh::Reloaded);
        assert_eq!(*file.current(), vec![1, 2, 3]);
        std::fs::write(&path, "1\nx\n").unwrap();
        match file.refresh() {
            Refresh::Kept(e) => assert!(e.contains("line 2") && e.contains("/n:"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(file.refresh(), Refresh::Unchanged, "reported once");
        assert_eq!(*file.current(), vec![1, 2, 3]);
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(file.refresh(), Refresh::Kept(_)));
        assert_eq!(file.refresh(), Refresh::Unchanged, "reported once");
        std::fs::write(&path, "4\n").unwrap();
        assert_eq!(file.refresh(), Refresh::Reloaded);
        assert_eq!(*file.clone().current(), vec![4]);
        std::fs::write(&path, "x\n").unwrap();
        let e = WatchedFile::load(&path, numbers, Duration::ZERO).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_wait_for_the_interval() {
        let dir = tempfile_dir().join("interval");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("n");
        std::fs::write(&path, "1\n").unwrap();
        let file = WatchedFile::load(&path, numbers, Duration::from_secs(3600)).unwrap();
        std::fs::write(&path, "2\n").unwrap();
        assert_eq!(file.refresh(), Refresh::Unchanged);
        assert_eq!(*file.current(), vec![1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "proto-watched-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
