//! The volatile cache of one file: its whole contents as the processes above
//! see them, and the byte ranges that differ from the backing file. Nothing
//! here does I/O except [`Image::persist`], which an fsync calls.
//!
//! Pure and unit-tested: writes past EOF zero-fill the gap, a shrinking
//! truncate drops the dirty ranges beyond the new length, and a truncate
//! that later grows again reads (and persists) zeros, never the old bytes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A file's contents held in memory until fsync.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Image {
    /// What a read sees (the logical contents, length = the file's size).
    data: Vec<u8>,
    /// Byte ranges `[start, end)` that the backing file does not have yet,
    /// merged and disjoint (start -> end).
    dirty: BTreeMap<u64, u64>,
    /// The length the backing file has (as of the last persist or load).
    backing_len: u64,
}

impl Image {
    /// An image of a backing file whose contents are `data`.
    pub fn load(data: Vec<u8>) -> Image {
        let backing_len = data.len() as u64;
        Image {
            data,
            dirty: BTreeMap::new(),
            backing_len,
        }
    }

    /// The file's size as the processes above see it.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Whether anything is not yet on the backing file.
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty() || self.backing_len != self.len()
    }

    /// Up to `size` bytes from `offset` (fewer at EOF, none past it).
    pub fn read(&self, offset: u64, size: u32) -> &[u8] {
        let len = self.data.len();
        let start = usize::try_from(offset).map_or(len, |o| o.min(len));
        let end = start.saturating_add(size as usize).min(len);
        &self.data[start..end]
    }

    /// Writes `bytes` at `offset`, zero-filling any gap past EOF.
    ///
    /// # Errors
    /// `EFBIG` when the end does not fit in memory.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let end = offset
            .checked_add(bytes.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let (start, end_usize) = match (usize::try_from(offset), usize::try_from(end)) {
            (Ok(s), Ok(e)) => (s, e),
            _ => return Err(io::Error::from_raw_os_error(libc::EFBIG)),
        };
        if end_usize > self.data.len() {
            self.grow(end)?;
        }
        self.data[start..end_usize].copy_from_slice(bytes);
        self.mark(offset, end);
        Ok(())
    }

    /// Truncates or extends (with zeros) to `len`.
    ///
    /// # Errors
    /// `EFBIG` when `len` does not fit in memory.
    pub fn set_len(&mut self, len: u64) -> io::Result<()> {
        if len >= self.len() {
            return self.grow(len);
        }
        let new = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        self.data.truncate(new);
        // Drop what lies past the new end; clip a range that straddles it.
        let past: Vec<u64> = self.dirty.range(len..).map(|(s, _)| *s).collect();
        for s in past {
            self.dirty.remove(&s);
        }
        if let Some((_, e)) = self.dirty.range_mut(..len).next_back() {
            *e = (*e).min(len);
        }
        Ok(())
    }

    /// Extends with zeros to `len` and marks the new bytes dirty (the
    /// backing file may hold old bytes there after an earlier shrink).
    fn grow(&mut self, len: u64) -> io::Result<()> {
        let old = self.len();
        let new = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        self.data
            .try_reserve(new.saturating_sub(self.data.len()))
            .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        self.data.resize(new, 0);
        if len > old {
            self.mark(old, len);
        }
        Ok(())
    }

    /// Adds `[start, end)` to the dirty set, merging neighbours.
    fn mark(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // A range that starts before `start` and reaches it.
        if let Some((&s, &e)) = self.dirty.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.dirty.remove(&s);
            }
        }
        // Ranges that start inside [start, end].
        let inside: Vec<(u64, u64)> = self
            .dirty
            .range(start..=end)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in inside {
            end = end.max(e);
            self.dirty.remove(&s);
        }
        self.dirty.insert(start, end);
    }

    /// The dirty ranges, for tests and logs.
    pub fn dirty_ranges(&self) -> Vec<(u64, u64)> {
        self.dirty.iter().map(|(s, e)| (*s, *e)).collect()
    }

    /// Writes what the backing `file` lacks (its length, then the dirty
    /// ranges) and `fdatasync`s it; afterwards nothing is dirty.
    ///
    /// # Errors
    /// The I/O error; the image stays dirty so a later fsync retries.
    pub fn persist(&mut self, file: &File) -> io::Result<()> {
        if self.backing_len != self.len() {
            file.set_len(self.len())?;
        }
        for (&s, &e) in &self.dirty {
            let (Ok(su), Ok(eu)) = (usize::try_from(s), usize::try_from(e)) else {
                return Err(io::Error::from_raw_os_error(libc::EFBIG));
            };
            file.write_all_at(&self.data[su..eu], s)?;
        }
        file.sync_data()?;
        self.dirty.clear();
        self.backing_len = self.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn backing(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), bytes).unwrap();
        let h = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(f.path())
            .unwrap();
        (f, h)
    }

    fn contents(f: &tempfile::NamedTempFile) -> Vec<u8> {
        let mut v = Vec::new();
        File::open(f.path()).unwrap().read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn write_past_eof_zero_fills_and_merges_ranges() {
        let mut i = Image::load(b"abc".to_vec());
        i.write(5, b"xy").unwrap();
        assert_eq!(i.read(0, 100), b"abc\0\0xy");
        assert_eq!(i.dirty_ranges(), vec![(3, 7)]);
        i.write(0, b"A").unwrap();
        i.write(1, b"B").unwrap();
        assert_eq!(i.dirty_ranges(), vec![(0, 2), (3, 7)]);
        i.write(2, b"C").unwrap();
        assert_eq!(i.dirty_ranges(), vec![(0, 7)]);
        assert_eq!(i.read(6, 10), b"y");
        assert_eq!(i.read(70, 10), b"");
    }

    #[test]
    fn unsynced_writes_stay_off_the_backing_file_until_persist() {
        let (f, h) = backing(b"hello");
        let mut i = Image::load(contents(&f));
        i.write(0, b"J").unwrap();
        i.write(10, b"!").unwrap();
        assert_eq!(contents(&f), b"hello");
        assert!(i.is_dirty());
        i.persist(&h).unwrap();
        assert_eq!(contents(&f), b"Jello\0\0\0\0\0!");
        assert!(!i.is_dirty());
    }

    #[test]
    fn shrink_then_grow_persists_zeros_not_old_bytes() {
        let (f, h) = backing(b"0123456789");
        let mut i = Image::load(contents(&f));
        i.write(8, b"AB").unwrap();
        i.set_len(4).unwrap();
        assert_eq!(i.dirty_ranges(), vec![]);
        assert!(i.is_dirty(), "the length differs from the backing file");
        i.set_len(6).unwrap();
        assert_eq!(i.read(0, 100), b"0123\0\0");
        i.persist(&h).unwrap();
        assert_eq!(contents(&f), b"0123\0\0");
    }

    #[test]
    fn truncate_clips_a_straddling_range() {
        let mut i = Image::load(Vec::new());
        i.write(0, b"abcdef").unwrap();
        i.set_len(3).unwrap();
        assert_eq!(i.dirty_ranges(), vec![(0, 3)]);
        assert_eq!(i.len(), 3);
    }
}
