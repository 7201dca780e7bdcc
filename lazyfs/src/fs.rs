//! The FUSE filesystem: a passthrough to a backing directory whose file
//! *data* stays in this process's memory ([`crate::cache::Image`]) until an
//! fsync/fdatasync of that file. Owns the inode table (our own numbers,
//! mapped to paths relative to the backing directory) and every reply.
//!
//! Metadata is immediately durable: create, mkdir, unlink, rmdir, rename,
//! chmod and chown go straight to the backing directory (stronger than a
//! real disk, which may lose a create or rename without a directory fsync;
//! see the crate README). Size changes (truncate, writes past EOF) are data
//! and stay in memory like writes. Every open file replies
//! `FOPEN_DIRECT_IO`, so the kernel's page cache holds nothing of ours.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::cache::Image;

/// Attributes and entries are never cached by the kernel: sizes change
/// in memory here, and a cut must not leave the kernel with stale ones.
const TTL: Duration = Duration::ZERO;

/// One inode.
#[derive(Default)]
struct Node {
    /// Path relative to the backing directory; `None` once unlinked.
    path: Option<PathBuf>,
    /// A handle on the backing file (regular files, opened on first use).
    file: Option<File>,
    /// The cached contents (loaded on the first write or truncate).
    image: Option<Image>,
}

/// The inode table.
struct Table {
    /// The backing directory.
    root: PathBuf,
    /// Inode number -> node; 1 is the root.
    nodes: HashMap<u64, Node>,
    /// Path -> inode number, for every linked node.
    by_path: HashMap<PathBuf, u64>,
    /// The next inode number to hand out.
    next: u64,
}

/// The filesystem. One lock over the table: fuser calls with `&self`, and
/// the session runs one thread, so the lock is never contended; it is
/// there because the trait hands out shared references.
pub struct LazyFs {
    /// The inode table and every cached image.
    table: Mutex<Table>,
}

fn errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind_of(m: &Metadata) -> FileType {
    FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile)
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = u32::try_from(nsecs).unwrap_or(0);
    match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, nanos),
        Err(_) => UNIX_EPOCH,
    }
}

fn attr_of(ino: u64, m: &Metadata, image: Option<&Image>) -> FileAttr {
    let size = image.map_or(m.size(), Image::len);
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: time(m.ctime(), m.ctime_nsec()),
        kind: kind_of(m),
        perm: (m.mode() & 0o7777) as u16,
        nlink: u32::try_from(m.nlink()).unwrap_or(u32::MAX),
        uid: m.uid(),
        gid: m.gid(),
        rdev: u32::try_from(m.rdev()).unwrap_or(0),
        blksize: 4096,
        flags: 0,
    }
}

impl Table {
    fn abs(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    fn path(&self, ino: u64) -> Result<PathBuf, Errno> {
        self.nodes
            .get(&ino)
            .and_then(|n| n.path.clone())
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    /// The inode of `rel`, allocating one the first time it is seen.
    fn ino_of(&mut self, rel: &Path) -> u64 {
        if let Some(i) = self.by_path.get(rel) {
            return *i;
        }
        let ino = self.next;
        self.next += 1;
        self.by_path.insert(rel.to_path_buf(), ino);
        self.nodes.insert(
            ino,
            Node {
                path: Some(rel.to_path_buf()),
                ..Node::default()
            },
        );
        ino
    }

    /// Attributes of `ino`: the backing file's, with the cached size.
    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let node = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let meta = match (&node.file, &node.path) {
            (Some(f), _) => f.metadata(),
            (None, Some(p)) => std::fs::symlink_metadata(self.abs(p)),
            (None, None) => return Err(Errno::ENOENT),
        }
        .map_err(|e| errno(&e))?;
        Ok(attr_of(ino, &meta, node.image.as_ref()))
    }

    /// Looks `rel` up: its inode and attributes.
    fn entry(&mut self, rel: &Path) -> Result<FileAttr, Errno> {
        std::fs::symlink_metadata(self.abs(rel)).map_err(|e| errno(&e))?;
        let ino = self.ino_of(rel);
        self.attr(ino)
    }

    /// The node of `ino` with its backing file open.
    fn open_file(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        let root = self.root.clone();
        let node = self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if node.file.is_none() {
            let rel = node.path.clone().ok_or(Errno::ENOENT)?;
            let abs = root.join(rel);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&abs)
                .or_else(|_| File::open(&abs))
                .map_err(|e| errno(&e))?;
            node.file = Some(f);
        }
        Ok(node)
    }

    /// The node of `ino` with its contents cached.
    fn image(&mut self, ino: u64) -> Result<&mut Image, Errno> {
        let node = self.open_file(ino)?;
        if node.image.is_none() {
            let file = node.file.as_ref().ok_or(Errno::EBADF)?;
            let len = file.metadata().map_err(|e| errno(&e))?.len();
            let len = usize::try_from(len).map_err(|_| Errno::EFBIG)?;
            let mut data = vec![0; len];
            file.read_exact_at(&mut data, 0).map_err(|e| errno(&e))?;
            node.image = Some(Image::load(data));
        }
        node.image.as_mut().ok_or(Errno::EIO)
    }

    /// Forgets the path `rel` (unlinked or replaced by a rename).
    fn unlink_path(&mut self, rel: &Path) {
        if let Some(ino) = self.by_path.remove(rel) {
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.path = None;
            }
        }
    }

    /// Moves `from` (and, for a directory, everything under it) to `to`.
    fn move_path(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, ino) in moved {
            self.by_path.remove(&p);
            let rest = p
                .strip_prefix(from)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.by_path.insert(new.clone(), ino);
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.path = Some(new);
            }
        }
    }
}

impl LazyFs {
    /// A filesystem over `root` (must be a directory).
    pub fn new(root: PathBuf) -> LazyFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                path: Some(PathBuf::new()),
                ..Node::default()
            },
        );
        let mut by_path = HashMap::new();
        by_path.insert(PathBuf::new(), 1);
        LazyFs {
            table: Mutex::new(Table {
                root,
                nodes,
                by_path,
                next: 2,
            }),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        match self.table.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Creates `name` under `parent` with `make`, then looks it up.
    fn make(
        &self,
        parent: INodeNo,
        name: &OsStr,
        make: impl FnOnce(&Path) -> io::Result<()>,
    ) -> Result<(u64, FileAttr), Errno> {
        let mut t = self.table();
        let rel = t.child(parent.0, name)?;
        make(&t.abs(&rel)).map_err(|e| errno(&e))?;
        let attr = t.entry(&rel)?;
        Ok((attr.ino.0, attr))
    }
}

impl fuser::Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut t = self.table();
        match t.child(parent.0, name).and_then(|rel| t.entry(&rel)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.table().attr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut t = self.table();
        let result = (|| -> Result<FileAttr, Errno> {
            if let Some(len) = size {
                t.image(ino.0)?.set_len(len).map_err(|e| errno(&e))?;
            }
            if mode.is_some() || uid.is_some() || gid.is_some() {
                let abs = t.abs(&t.path(ino.0)?);
                if let Some(m) = mode {
                    std::fs::set_permissions(&abs, std::fs::Permissions::from_mode(m & 0o7777))
                        .map_err(|e| errno(&e))?;
                }
                if uid.is_some() || gid.is_some() {
                    std::os::unix::fs::lchown(&abs, uid, gid).map_err(|e| errno(&e))?;
                }
            }
            t.attr(ino.0)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let made = self.make(parent, name, |abs| {
            std::fs::create_dir(abs)?;
            std::fs::set_permissions(abs, std::fs::Permissions::from_mode(mode & !umask & 0o7777))
        });
        match made {
            Ok((_, attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.table();
        let result = t.child(parent.0, name).and_then(|rel| {
            std::fs::remove_file(t.abs(&rel)).map_err(|e| errno(&e))?;
            t.unlink_path(&rel);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.table();
        let result = t.child(parent.0, name).and_then(|rel| {
            std::fs::remove_dir(t.abs(&rel)).map_err(|e| errno(&e))?;
            t.unlink_path(&rel);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            reply.error(Errno::EINVAL);
            return;
        }
        let mut t = self.table();
        let result = (|| -> Result<(), Errno> {
            let from = t.child(parent.0, name)?;
            let to = t.child(newparent.0, newname)?;
            std::fs::rename(t.abs(&from), t.abs(&to)).map_err(|e| errno(&e))?;
            t.unlink_path(&to);
            t.move_path(&from, &to);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.table().open_file(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self.make(parent, name, |abs| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).mode(mode & !umask & 0o7777);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            } else {
                o.create(true);
            }
            o.open(abs).map(drop)
        });
        let opened = made.and_then(|(ino, attr)| self.table().open_file(ino).map(|_| attr));
        match opened {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let mut t = self.table();
        let node = match t.open_file(ino.0) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        if let Some(image) = &node.image {
            return reply.data(image.read(offset, size));
        }
        let Some(file) = &node.file else {
            return reply.error(Errno::EBADF);
        };
        let mut buf = vec![0; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(errno(&e)),
            }
        }
        reply.data(&buf[..got]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut t = self.table();
        let written = t
            .image(ino.0)
            .and_then(|i| i.write(offset, data).map_err(|e| errno(&e)));
        match (written, u32::try_from(data.len())) {
            (Ok(()), Ok(n)) => reply.written(n),
            (Err(e), _) => reply.error(e),
            (_, Err(_)) => reply.error(Errno::EFBIG),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) persists nothing on a real disk either.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut t = self.table();
        let result = t.open_file(ino.0).and_then(|node| {
            let file = node.file.as_ref().ok_or(Errno::EBADF)?;
            match node.image.as_mut() {
                Some(image) => image.persist(file),
                None => file.sync_data(),
            }
            .map_err(|e| errno(&e))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let t = self.table();
        let result = t.path(ino.0).and_then(|rel| {
            File::open(t.abs(&rel))
                .and_then(|d| d.sync_all())
                .map_err(|e| errno(&e))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut t = self.table();
        let rel = match t.path(ino.0) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let read = match std::fs::read_dir(t.abs(&rel)) {
            Ok(r) => r,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut entries = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for entry in read.flatten() {
            let name = entry.file_name();
            let kind = entry
                .file_type()
                .ok()
                .and_then(FileType::from_std)
                .unwrap_or(FileType::RegularFile);
            let child = t.ino_of(&rel.join(&name));
            entries.push((child, kind, name));
        }
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(skip) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let root = self.table().root.clone();
        let Ok(c) = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: `c` is a valid NUL-terminated path; `st` is written by the call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return reply.error(errno(&io::Error::last_os_error()));
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            u32::try_from(st.f_bsize).unwrap_or(4096),
            u32::try_from(st.f_namemax).unwrap_or(255),
            u32::try_from(st.f_frsize).unwrap_or(4096),
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // Everything runs as root; permissions are the backing directory's.
        reply.ok();
    }
}
