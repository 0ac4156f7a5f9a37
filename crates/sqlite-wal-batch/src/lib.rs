//! A SQLite VFS that hands each transaction's WAL frames to the operating system in one write.
//!
//! SQLite writes a WAL frame as two `pwrite`s, its 24-byte header and its page, so a commit of
//! 20 pages costs 40 system calls before its `fsync`. This VFS wraps the default one (the
//! `unix` VFS on the platforms Stele runs on) and changes one thing: writes to a WAL file that
//! follow each other in the file are gathered in a buffer and written as one when SQLite next
//! does anything else with that file (a sync, a read, a truncation, its size, closing it), or
//! when the next write would take the buffer past 128 KiB. Every other file, and every other call, goes to the default
//! VFS untouched.
//!
//! # When it is correct
//!
//! Only for a connection whose `PRAGMA synchronous` is `FULL` or `EXTRA`. SQLite publishes a
//! commit to other connections (in the WAL index, shared memory, not a file call) only after
//! the commit's frames are written, and under `FULL` it syncs the WAL file between the two;
//! the sync gives this VFS the moment to write the buffer. Under `NORMAL` or `OFF` a commit is
//! published without any call on the WAL file, so another connection could be told of frames
//! still in this buffer: do not open such a connection with this VFS.
//!
//! Nothing is weakened by a crash: a frame in the buffer belongs to a transaction whose sync
//! has not happened, which SQLite never reported committed, exactly as a frame the operating
//! system had not written back. A write that fails when the buffer is flushed fails the call
//! that flushed it (the commit's sync), and SQLite rolls the transaction back.
//!
//! ```
//! let name = sqlite_wal_batch::register().expect("the default VFS exists");
//! # let dir = tempfile::tempdir().unwrap();
//! let conn = rusqlite::Connection::open_with_flags_and_vfs(
//!     dir.path().join("db.sqlite"),
//!     rusqlite::OpenFlags::default(),
//!     name,
//! )
//! .unwrap();
//! conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;").unwrap();
//! ```

use rusqlite::ffi;
use std::{
    ffi::{CStr, c_int, c_void},
    ptr,
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

/// The name [`register`] registers the VFS under, for `Connection::open_with_flags_and_vfs`.
pub const NAME: &str = "stele-wal-batch";
const NAME_C: &CStr = c"stele-wal-batch";

/// The most the buffer holds: the `unix` VFS hands the system at most 128 KiB less one byte per
/// `pwrite` (it masks the length with `0x1ffff`, and a remainder that masks to zero fails as a
/// full disk), so a larger buffer would be written in several calls or not at all. 31 frames
/// of 4 KiB pages; a larger transaction is written in buffers of this size.
const MAX_PENDING: usize = 0x1ffff;

/// Why the VFS could not be registered: SQLite's result code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterError(pub c_int);

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SQLite refused to register the VFS {NAME} (code {})",
            self.0
        )
    }
}

impl std::error::Error for RegisterError {}

/// The default VFS this one wraps, and this one, both alive for the rest of the process.
struct Vfs {
    inner: *mut ffi::sqlite3_vfs,
}

// SAFETY: both structures are never written after registration; SQLite's VFS calls are made
// from any thread and the default VFS is thread-safe (SQLite is built with SQLITE_THREADSAFE=1).
unsafe impl Send for Vfs {}
// SAFETY: as above.
unsafe impl Sync for Vfs {}

static VFS: OnceLock<Result<Vfs, RegisterError>> = OnceLock::new();

/// Registers the VFS (once per process; later calls return the first call's answer) and
/// returns its name.
///
/// # Errors
///
/// When SQLite has no default VFS or refuses the registration.
pub fn register() -> Result<&'static str, RegisterError> {
    VFS.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find` initializes SQLite if needed and returns the default VFS
        // or null; the default VFS lives as long as the process.
        let inner = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
        if inner.is_null() {
            return Err(RegisterError(ffi::SQLITE_ERROR));
        }
        // SAFETY: `inner` is a valid VFS (above). The copy keeps its methods and their data
        // (`pAppData`, `mxPathname`); only the file size, the name and `xOpen` are this VFS's.
        // The copy is leaked: SQLite keeps the pointer for the rest of the process.
        let ours = unsafe {
            let mut ours = *inner;
            ours.szOsFile = c_int::try_from(INNER_OFFSET).unwrap_or(c_int::MAX) + (*inner).szOsFile;
            ours.zName = NAME_C.as_ptr();
            ours.pNext = ptr::null_mut();
            ours.xOpen = Some(open);
            Box::into_raw(Box::new(ours))
        };
        // SAFETY: `ours` is a complete VFS that outlives the process; 0 keeps the default VFS.
        let rc = unsafe { ffi::sqlite3_vfs_register(ours, 0) };
        if rc != ffi::SQLITE_OK {
            return Err(RegisterError(rc));
        }
        Ok(Vfs { inner })
    })
    .as_ref()
    .map(|_| NAME)
    .map_err(|err| *err)
}

/// How many writes the WAL files of this process took into a buffer, and how many writes the
/// buffers handed to the default VFS: a commit of `n` frames is `2n` of the first and one of
/// the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Writes SQLite made to a WAL file through this VFS.
    pub gathered: u64,
    /// Writes this VFS made to the default VFS's WAL files.
    pub written: u64,
}

static GATHERED: AtomicU64 = AtomicU64::new(0);
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// The counters of this process so far.
pub fn counters() -> Counters {
    Counters {
        gathered: GATHERED.load(Ordering::Relaxed),
        written: WRITTEN.load(Ordering::Relaxed),
    }
}

/// A WAL file: SQLite's file structure first (SQLite sees only it), then the buffer; the
/// default VFS's own file structure follows at [`INNER_OFFSET`] in the memory SQLite gave.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    pending: Vec<u8>,
    /// The offset in the file of `pending[0]`.
    pending_at: i64,
}

const INNER_OFFSET: usize = std::mem::size_of::<WalFile>().next_multiple_of(16);

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Ok(Vfs { inner: inner_vfs })) = VFS.get() else {
        return ffi::SQLITE_ERROR;
    };
    let inner_vfs = *inner_vfs;
    // SAFETY: `inner_vfs` is the default VFS, alive for the process, whose `xOpen` is set.
    let inner_open = unsafe { (*inner_vfs).xOpen }.expect("a VFS opens files");
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Any other file is the default VFS's own: SQLite calls its methods directly. The
        // memory SQLite gave is larger than the default VFS asks for.
        // SAFETY: the arguments are SQLite's, unchanged.
        return unsafe { inner_open(inner_vfs, name, file, flags, out_flags) };
    }
    // SAFETY: SQLite gave `szOsFile` bytes at `file`, `INNER_OFFSET` more than the default
    // VFS's, so the default VFS's structure fits after ours.
    let inner_file = unsafe { file.cast::<u8>().add(INNER_OFFSET) }.cast::<ffi::sqlite3_file>();
    // SAFETY: as above; on failure the default VFS left nothing to close.
    let rc = unsafe { inner_open(inner_vfs, name, inner_file, flags, out_flags) };
    let methods = if rc == ffi::SQLITE_OK {
        &raw const METHODS
    } else {
        ptr::null()
    };
    let wal = WalFile {
        base: ffi::sqlite3_file { pMethods: methods },
        inner: inner_file,
        pending: Vec::new(),
        pending_at: 0,
    };
    // SAFETY: `file` is SQLite's memory for this file, aligned for any structure; SQLite calls
    // `xClose` (which drops it) only when `pMethods` is set.
    unsafe { ptr::write(file.cast::<WalFile>(), wal) };
    rc
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

/// The file behind a method's pointer.
///
/// # Safety
///
/// `file` was opened by [`open`] as a WAL file and not closed, and SQLite makes one call on a
/// file at a time.
unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    // SAFETY: the caller's contract.
    unsafe { &mut *file.cast::<WalFile>() }
}

impl WalFile {
    fn methods(&self) -> &ffi::sqlite3_io_methods {
        // SAFETY: `inner` was opened by the default VFS, which set its methods.
        unsafe { &*(*self.inner).pMethods }
    }

    /// Writes the buffer, if anything is in it, and empties it either way.
    fn flush(&mut self) -> c_int {
        if self.pending.is_empty() {
            return ffi::SQLITE_OK;
        }
        let len = c_int::try_from(self.pending.len()).unwrap_or(c_int::MAX);
        let xwrite = self.methods().xWrite.expect("a file is written");
        // SAFETY: `inner` is open; the buffer holds `len` bytes.
        let rc = unsafe {
            xwrite(
                self.inner,
                self.pending.as_ptr().cast(),
                len,
                self.pending_at,
            )
        };
        self.pending.clear();
        WRITTEN.fetch_add(1, Ordering::Relaxed);
        rc
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite calls the methods of a file `open` opened.
    let wal = unsafe { wal(file) };
    let len = usize::try_from(amount).unwrap_or(0);
    let end = wal.pending_at + i64::try_from(wal.pending.len()).unwrap_or(i64::MAX);
    if !wal.pending.is_empty() && (offset != end || wal.pending.len() + len > MAX_PENDING) {
        let rc = wal.flush();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if len > MAX_PENDING {
        let xwrite = wal.methods().xWrite.expect("a file is written");
        // SAFETY: `inner` is open; the arguments are SQLite's, unchanged.
        return unsafe { xwrite(wal.inner, buf, amount, offset) };
    }
    if wal.pending.is_empty() {
        wal.pending_at = offset;
    }
    // SAFETY: SQLite hands `amount` readable bytes at `buf`.
    let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    wal.pending.extend_from_slice(bytes);
    GATHERED.fetch_add(1, Ordering::Relaxed);
    ffi::SQLITE_OK
}

/// Each method but `write`: the buffer written first, then the default VFS's method.
macro_rules! flushed_then {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*), $ret:ty) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
            // SAFETY: SQLite calls the methods of a file `open` opened.
            let wal = unsafe { wal(file) };
            let rc = wal.flush();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            let method = wal.methods().$field.expect("the default VFS's file method");
            // SAFETY: `inner` is open; the other arguments are SQLite's, unchanged.
            unsafe { method(wal.inner $(, $arg)*) }
        }
    };
}

flushed_then!(read, xRead, (buf: *mut c_void, amount: c_int, offset: i64), c_int);
flushed_then!(truncate, xTruncate, (size: i64), c_int);
flushed_then!(sync, xSync, (flags: c_int), c_int);
flushed_then!(file_size, xFileSize, (size: *mut i64), c_int);
flushed_then!(lock, xLock, (level: c_int), c_int);
flushed_then!(unlock, xUnlock, (level: c_int), c_int);
flushed_then!(check_reserved_lock, xCheckReservedLock, (out: *mut c_int), c_int);
flushed_then!(file_control, xFileControl, (op: c_int, arg: *mut c_void), c_int);

/// The two methods that answer a number, not a result code: the default VFS's, as they are.
macro_rules! passed {
    ($name:ident, $field:ident) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file) -> c_int {
            // SAFETY: SQLite calls the methods of a file `open` opened.
            let wal = unsafe { wal(file) };
            let method = wal.methods().$field.expect("the default VFS's file method");
            // SAFETY: `inner` is open.
            unsafe { method(wal.inner) }
        }
    };
}

passed!(sector_size, xSectorSize);
passed!(device_characteristics, xDeviceCharacteristics);

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite calls the methods of a file `open` opened, and `close` last.
    let wal = unsafe { wal(file) };
    let flushed = wal.flush();
    let xclose = wal.methods().xClose.expect("a file is closed");
    // SAFETY: `inner` is open and closed once, here.
    let closed = unsafe { xclose(wal.inner) };
    // SAFETY: the structure `open` wrote, dropped once: SQLite makes no call after `xClose`.
    unsafe { ptr::drop_in_place(file.cast::<WalFile>()) };
    if flushed == ffi::SQLITE_OK {
        closed
    } else {
        flushed
    }
}
