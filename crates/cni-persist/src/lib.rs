//! The one way rcni's on-disk stores write a file: a reader sees the old content or the new
//! one, never a torn file, and whatever a killed writer leaves behind can be attributed and
//! removed.
//!
//! - [`dir`]: the directories stores write into are checked before use (a real directory, not
//!   a symlink; owned by this user; writable by no one else), and created 0700 when missing.
//! - [`temp`]: temp files are named `.rcni-tmp-<pid>-<random>-<tag>.tmp`, where the tag is the
//!   final file name (or whatever the store attributes its files by) and the pid is the
//!   writer's, created `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC` with mode 0600. A leftover says
//!   whose it is and whether its writer still runs ([`temp::remove_temps`]).
//! - [`write`]: a temp file becomes the final name by rename (replacing) or hard link (never
//!   replacing), with the store's [`Durability`] stated explicitly.
//! - [`lock`]: the `flock` lock files stores serialize on.
//! - [`spare`]: files a store would free are kept and written again, for stores that rewrite
//!   and remove files all the time.
//!
//! Names and layouts of the stores themselves (Go-compatible lease names, libcni's cache
//! layout) stay with the stores: this crate only decides how a file gets there.

pub mod dir;
mod error;
pub mod lock;
pub mod spare;
pub mod temp;
pub mod write;

pub use dir::{check_dir, ensure_dir, DirRule};
pub use error::PersistError;
pub use lock::{lock, open_lock_file, take_lock, LockKind};
pub use temp::{is_temp, remove_temps, TempFile, TempName, TEMP_PREFIX};
pub use write::{create_new, replace, sync_dir, Durability};

pub type Result<T> = std::result::Result<T, PersistError>;
