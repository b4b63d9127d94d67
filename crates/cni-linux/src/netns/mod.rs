//! Network-namespace handles.
//!
//! A [`NetNs`] owns an open file descriptor on a network namespace (a path such as
//! `/run/netns/<name>` or `/proc/<pid>/ns/net`). Work that must happen *inside* the namespace
//! (creating a netlink socket, writing `/proc/sys/net` keys) goes through [`NetNs::run`], which
//! starts a short-lived scoped thread that calls `setns(CLONE_NEWNET)` first and then runs the
//! closure. The calling thread never changes namespace, so there is nothing to restore and no
//! way to leak a namespace switch through an early return or a panic.
//!
//! Netlink sockets stay bound to the namespace they were created in, so the usual pattern is to
//! create the socket inside `run` and use it from the calling thread (see
//! [`crate::rtnl::Handle::in_netns`]).
//!
//! [`NetNs::open`] never blocks and never opens anything that is not a namespace file: it
//! takes an `O_PATH` handle first (which opens nothing: a FIFO, a device or a directory is not
//! touched), requires nsfs or procfs, and only then opens the file and checks that it is a
//! *network* namespace. The type check is what `NS_GET_NSTYPE` would answer, found without
//! an ioctl (the workspace forbids `unsafe`): the kernel's name for the handle
//! (`net:[<inode>]`) when it gives one, else (a bind-mounted namespace, the usual CNI_NETNS) an
//! RTM_GETNSID request naming the file by descriptor, which the kernel refuses with EINVAL for
//! anything but a network namespace (a `setns(CLONE_NEWNET)` on a throwaway thread, the same
//! check, only where that request cannot be made).
//!
//! [`NetNs::create_named`] and [`NetNs::delete_named`] manage persistent named namespaces the way
//! `ip netns add`/`ip netns delete` do (a bind mount under `/run/netns`); they are meant for the
//! CLI and for tests.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::stat::fstat;
use nix::sys::statfs::{fstatfs, NSFS_MAGIC, PROC_SUPER_MAGIC};

pub(crate) mod error;

pub use error::NsError;

/// Directory holding persistent named namespaces, as used by iproute2.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// An open handle on a network namespace.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

impl NetNs {
    /// Opens the namespace at `path` (`/run/netns/<name>`, `/proc/<pid>/ns/net`, ...).
    ///
    /// Never blocks, whatever the path names (a FIFO, a device, a directory). Fails with
    /// [`NsError::NotFound`] if the path is missing, [`NsError::NotANamespace`] if it is not
    /// a namespace file on nsfs or procfs, [`NsError::OtherNamespace`] for a namespace of
    /// another type and [`NsError::BadPath`] for a symlink loop or an over-long name.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, NsError> {
        let path = path.as_ref();
        // O_PATH opens nothing (no FIFO rendezvous, no device open), so it cannot block.
        let handle = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(path)
        {
            Ok(f) => f,
            Err(e) => return Err(open_error(path, e)),
        };
        let fs = fstatfs(&handle).map_err(|e| NsError::io("statfs", path, e))?;
        let fs_type = fs.filesystem_type();
        if fs_type != NSFS_MAGIC && fs_type != PROC_SUPER_MAGIC {
            return Err(NsError::NotANamespace(path.to_path_buf()));
        }
        // The kernel names a namespace handle `<type>:[<inode>]` (nsfs's dentry name), except
        // a bind-mounted one, which reads back as its mount point.
        let fd_link = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
        let name =
            std::fs::read_link(&fd_link).map_err(|e| NsError::io("read the type of", path, e))?;
        let kind = namespace_kind(&name.to_string_lossy());
        if let Some(kind) = kind.clone().filter(|k| k != "net") {
            return Err(NsError::OtherNamespace {
                path: path.to_path_buf(),
                kind: Some(kind),
            });
        }
        // On nsfs or procfs: opening reads nothing and cannot block.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&fd_link)
            .map_err(|e| NsError::io("open", path, e))?;
        if kind.is_none() {
            match probe_network_namespace(&file) {
                Ok(()) => {}
                Err(Errno::EINVAL) if fs_type == NSFS_MAGIC => {
                    return Err(NsError::OtherNamespace {
                        path: path.to_path_buf(),
                        kind: None,
                    })
                }
                Err(Errno::EINVAL) => return Err(NsError::NotANamespace(path.to_path_buf())),
                Err(e) => return Err(NsError::io("check the namespace type of", path, e)),
            }
        }
        Ok(NetNs {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Opens the network namespace of the calling thread (`/proc/thread-self/ns/net`).
    pub fn current() -> Result<Self, NsError> {
        Self::open("/proc/thread-self/ns/net")
    }

    /// The path this handle was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The id the calling thread's namespace knows this one by (`ip netns list-id`), `None`
    /// when it has none. Asked with RTM_GETNSID naming the namespace by descriptor, which
    /// only reads an id, never assigns one.
    pub fn id(&self) -> Result<Option<i32>, NsError> {
        crate::rtnl::Handle::new()
            .and_then(|mut h| h.netns_id(self.file.as_fd()))
            .map_err(|e| NsError::io("read the id of", &self.path, io::Error::other(e)))
    }

    /// Runs `f` inside this namespace on a short-lived thread and returns its value.
    ///
    /// The thread calls `setns(CLONE_NEWNET)` before `f` and exits afterwards; the calling thread
    /// is never switched. A panic in `f` is propagated to the caller.
    pub fn run<T, F>(&self, f: F) -> Result<T, NsError>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        crate::counters::timed(crate::counters::Kind::NsThread, || self.run_untimed(f))
    }

    fn run_untimed<T, F>(&self, f: F) -> Result<T, NsError>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        std::thread::scope(|scope| {
            let worker = scope.spawn(|| {
                setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET)
                    .map_err(|e| NsError::io("setns", &self.path, e))?;
                Ok(f())
            });
            match worker.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// True if both handles refer to the same namespace (same device and inode).
    pub fn same_as(&self, other: &NetNs) -> Result<bool, NsError> {
        let a = fstat(self.file.as_fd()).map_err(|e| NsError::io("stat", &self.path, e))?;
        let b = fstat(other.file.as_fd()).map_err(|e| NsError::io("stat", &other.path, e))?;
        Ok(a.st_dev == b.st_dev && a.st_ino == b.st_ino)
    }

    /// Creates a fresh network namespace and pins it at `/run/netns/<name>`, like
    /// `ip netns add <name>`. Returns a handle on it.
    pub fn create_named(name: &str) -> Result<NetNs, NsError> {
        let path = named_path(name)?;
        let dir = Path::new(NETNS_RUN_DIR);
        std::fs::create_dir_all(dir).map_err(|e| NsError::io("create directory", dir, e))?;
        make_run_dir_shared(dir)?;

        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(NsError::AlreadyExists(path))
            }
            Err(e) => return Err(NsError::io("create", &path, e)),
        }

        // unshare() only moves this helper thread; the bind mount then pins the new namespace.
        let pinned = std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<(), NsError> {
                    unshare(CloneFlags::CLONE_NEWNET)
                        .map_err(|e| NsError::io("unshare", &path, e))?;
                    mount(
                        Some("/proc/thread-self/ns/net"),
                        &path,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    )
                    .map_err(|e| NsError::io("bind mount namespace on", &path, e))
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(NsError::io(
                        "create namespace",
                        &path,
                        io::Error::other("helper thread panicked"),
                    ))
                })
        });
        if let Err(e) = pinned {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        NetNs::open(&path)
    }

    /// Removes the named namespace `/run/netns/<name>`, like `ip netns delete <name>`.
    ///
    /// Fails with [`NsError::NotFound`] if it does not exist. The namespace itself lives on
    /// while other handles or processes still use it.
    pub fn delete_named(name: &str) -> Result<(), NsError> {
        let path = named_path(name)?;
        if !path.exists() {
            return Err(NsError::NotFound(path));
        }
        match umount2(&path, MntFlags::MNT_DETACH) {
            // EINVAL: not a mount point (a leftover file from a failed create).
            Ok(()) | Err(Errno::EINVAL) => {}
            Err(e) => return Err(NsError::io("unmount", &path, e)),
        }
        std::fs::remove_file(&path).map_err(|e| NsError::io("remove", &path, e))
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// The type in a namespace handle's name `<type>:[<inode>]` (`net`, `mnt`, ...); `None` for
/// any other name (a path).
fn namespace_kind(name: &str) -> Option<String> {
    let (kind, rest) = name.split_once(":[")?;
    let inode = rest.strip_suffix(']')?;
    let plain = !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    (plain && inode.bytes().all(|b| b.is_ascii_digit())).then(|| kind.to_string())
}

/// The kernel's own type check of `file`: EINVAL for anything that is not a network namespace.
/// Asked over netlink (RTM_GETNSID names a namespace by file descriptor; it only reads an id,
/// never assigns one), which costs a plugin a round trip instead of a thread; where that
/// request cannot be made, by joining `file` on a throwaway thread. The calling thread never
/// moves.
fn probe_network_namespace(file: &File) -> Result<(), Errno> {
    let asked = crate::rtnl::Handle::new().and_then(|mut h| h.netns_id(file.as_fd()));
    match asked {
        Ok(_) => Ok(()),
        Err(crate::rtnl::Error::Kernel(k)) => Err(Errno::from_raw(k.errno)),
        Err(e) => {
            log::debug!("RTM_GETNSID failed ({e}); checking the namespace type on a thread");
            probe_on_thread(file)
        }
    }
}

/// [`probe_network_namespace`] by `setns(CLONE_NEWNET)` on a throwaway thread.
fn probe_on_thread(file: &File) -> Result<(), Errno> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| setns(file.as_fd(), CloneFlags::CLONE_NEWNET))
            .join()
            .unwrap_or(Err(Errno::EIO))
    })
}

/// The error of opening `path` with `O_PATH`.
fn open_error(path: &Path, e: io::Error) -> NsError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => NsError::NotFound(path.to_path_buf()),
        Some(libc::ELOOP | libc::ENAMETOOLONG | libc::ENOTDIR) => NsError::BadPath {
            path: path.to_path_buf(),
            source: e,
        },
        _ => NsError::io("open", path, e),
    }
}

/// `/run/netns/<name>` for a valid single-component name.
pub fn named_path(name: &str) -> Result<PathBuf, NsError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(NsError::InvalidName(name.to_string()));
    }
    Ok(Path::new(NETNS_RUN_DIR).join(name))
}

/// Makes the run directory a shared mount (binding it onto itself first if it is not a mount
/// point yet), as iproute2 does, so namespace mounts propagate to other mount namespaces.
fn make_run_dir_shared(dir: &Path) -> Result<(), NsError> {
    let shared = MsFlags::MS_SHARED | MsFlags::MS_REC;
    match mount(None::<&str>, dir, None::<&str>, shared, None::<&str>) {
        Ok(()) => return Ok(()),
        Err(Errno::EINVAL) => {}
        Err(e) => return Err(NsError::io("make shared", dir, e)),
    }
    mount(
        Some(dir),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| NsError::io("bind mount", dir, e))?;
    mount(None::<&str>, dir, None::<&str>, shared, None::<&str>)
        .map_err(|e| NsError::io("make shared", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_path_is_not_found() {
        let err = NetNs::open("/nonexistent/rcni/netns").unwrap_err();
        assert!(err.is_not_found(), "{err}");
    }

    #[test]
    fn regular_file_is_not_a_namespace() {
        let err = NetNs::open("/etc/hostname")
            .or_else(|_| NetNs::open("/etc/passwd"))
            .unwrap_err();
        assert!(matches!(err, NsError::NotANamespace(_)), "{err}");
    }

    #[test]
    fn current_is_same_as_itself_and_run_returns_value() {
        let a = NetNs::current().unwrap();
        let b = NetNs::current().unwrap();
        assert!(a.same_as(&b).unwrap());
        assert_eq!(a.run(|| 41 + 1).unwrap(), 42);
    }

    #[test]
    fn handle_names_give_the_namespace_kind() {
        assert_eq!(namespace_kind("net:[4026531840]").as_deref(), Some("net"));
        assert_eq!(namespace_kind("mnt:[4026531841]").as_deref(), Some("mnt"));
        assert_eq!(
            namespace_kind("pid_for_children:[1]").as_deref(),
            Some("pid_for_children")
        );
        for path in [
            "/run/netns/x",
            "/tmp/net:[1]",
            "net:[]x",
            "net:[12a]",
            ":[1]",
        ] {
            assert_eq!(namespace_kind(path), None, "{path}");
        }
    }

    #[test]
    fn bad_names_are_rejected() {
        for name in ["", ".", "..", "a/b"] {
            assert!(matches!(named_path(name), Err(NsError::InvalidName(_))));
        }
        assert_eq!(named_path("x").unwrap(), Path::new("/run/netns/x"));
    }
}
