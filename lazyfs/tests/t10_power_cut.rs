//! t10: a power cut under `openshell-lazyfs` loses exactly what was not
//! fsynced (through the real binary and the kernel's FUSE).
//!
//! - given: a lazyfs mount over a backing directory
//! - when: files are written, some fsynced (or only `sync_file_range`d),
//!   then the power is cut (`kill -9` + lazy unmount) and a fresh lazyfs
//!   mounts the same backing directory
//! - then: synced data survives, unsynced data is gone, a sync of one file
//!   persists no other file's data, truncates and writes past EOF read
//!   back right before and after the cut

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lazyfs::mount::LazyMount;

fn skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("skipping lazyfs::t10: needs root and /dev/fuse");
        return true;
    }
    false
}

fn mount(dir: &Path) -> LazyMount {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_openshell-lazyfs"));
    LazyMount::start(
        &bin,
        &dir.join("backing"),
        &dir.join("mnt"),
        &dir.join("lazyfs.log"),
    )
    .unwrap_or_else(|e| panic!("mounting lazyfs: {e}"))
}

fn write(path: &Path, bytes: &[u8], sync: bool) -> File {
    let mut f = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    f.write_all(bytes).unwrap();
    if sync {
        f.sync_data().unwrap();
    }
    f
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn unsynced_data_is_lost_and_synced_data_survives_a_cut() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut m = mount(dir.path());
    let mnt = m.mountpoint.clone();

    eprintln!("--- step: write, sync some");
    drop(write(&mnt.join("synced"), b"durable", true));
    drop(write(&mnt.join("unsynced"), b"volatile", false));
    let other = write(&mnt.join("other"), b"not mine", false);
    let mine = write(&mnt.join("mine"), b"mine", false);
    mine.sync_data().unwrap();
    // Synced, then more appended and not synced.
    let tail = write(&mnt.join("tail"), b"head", true);
    tail.write_all_at(b"+tail", 4).unwrap();
    // sled's flush: sync_file_range, which is no fsync.
    let sfr = write(&mnt.join("sync-file-range"), b"flushed?", false);
    // SAFETY: a valid descriptor; flags as sled 0.34 passes them.
    let rc = unsafe {
        libc::sync_file_range(
            sfr.as_raw_fd(),
            0,
            0,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    assert_eq!(rc, 0, "sync_file_range");
    assert_eq!(
        read(&mnt.join("unsynced")),
        b"volatile",
        "reads see the cache"
    );
    assert_eq!(read(&mnt.join("tail")), b"head+tail");
    assert_eq!(
        std::fs::read(dir.path().join("backing/unsynced")).unwrap(),
        b"",
        "nothing reached the backing file before a sync"
    );
    drop((other, mine, tail, sfr));

    eprintln!("--- step: cut the power, remount");
    m.cut().unwrap();
    m.remount().unwrap();

    eprintln!("--- step: only synced data is there");
    assert_eq!(read(&mnt.join("synced")), b"durable");
    assert_eq!(read(&mnt.join("unsynced")), b"", "metadata kept, data lost");
    assert_eq!(read(&mnt.join("mine")), b"mine");
    assert_eq!(
        read(&mnt.join("other")),
        b"",
        "a sync of one file persisted another's data"
    );
    assert_eq!(read(&mnt.join("tail")), b"head");
    assert_eq!(
        read(&mnt.join("sync-file-range")),
        b"",
        "sync_file_range is not durable"
    );
    m.stop().unwrap();
}

#[test]
fn truncate_and_writes_past_eof_survive_only_when_synced() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut m = mount(dir.path());
    let mnt = m.mountpoint.clone();

    eprintln!("--- step: a synced 10-byte file, truncated and not synced");
    let f = write(&mnt.join("t"), b"0123456789", true);
    f.set_len(3).unwrap();
    assert_eq!(read(&mnt.join("t")), b"012");
    f.set_len(5).unwrap();
    assert_eq!(
        read(&mnt.join("t")),
        b"012\0\0",
        "grown after a shrink reads zeros"
    );
    drop(f);

    eprintln!("--- step: a write past EOF, synced");
    let g = write(&mnt.join("sparse"), b"ab", false);
    g.write_all_at(b"z", 6).unwrap();
    g.sync_data().unwrap();
    assert_eq!(read(&mnt.join("sparse")), b"ab\0\0\0\0z");
    drop(g);

    eprintln!("--- step: cut, remount");
    m.cut().unwrap();
    m.remount().unwrap();
    assert_eq!(
        read(&mnt.join("t")),
        b"0123456789",
        "the truncate was not synced"
    );
    assert_eq!(read(&mnt.join("sparse")), b"ab\0\0\0\0z");

    eprintln!("--- step: the shrink and grow synced this time");
    let f = write(&mnt.join("t"), b"", false);
    f.set_len(3).unwrap();
    f.set_len(5).unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.cut().unwrap();
    m.remount().unwrap();
    assert_eq!(read(&mnt.join("t")), b"012\0\0");
    m.stop().unwrap();
    assert!(!lazyfs::mount::is_mounted(&mnt), "stop unmounts");
}
