//! The node's WireGuard key: generated on first start into the key file (base64, as `wg
//! genkey` and flannel's `/run/flannel/wgkey` hold it; mode 0600 in a 0700 directory, written
//! whole through a temp file and fsynced), read back by every later start, replaced by
//! [`rotate`] (`rcni-node rotate-wireguard-key`). The running agent follows the file
//! ([`KeyFile::changed`]): a rotated key is put on the devices and published in the lease.
//! The optional preshared key comes from a file the same way (a Kubernetes Secret).
//!
//! Private and preshared keys are [`SecretKey`]s: they never reach a log line, `/metrics` or a
//! status file.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cni_linux::wireguard::{PublicKey, SecretKey};
use cni_persist::{DirRule, Durability};
use x25519_dalek::{PublicKey as X25519Public, StaticSecret};

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading or writing it failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Its content is not a key.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: cni_linux::wireguard::KeyError,
    },
    /// Its directory is not private.
    #[error(transparent)]
    Dir(#[from] cni_persist::PersistError),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A new private key from the OS's random source, clamped as Curve25519 and `wg genkey` do.
pub fn generate() -> SecretKey {
    let mut bytes = StaticSecret::random().to_bytes();
    bytes[0] &= 248;
    bytes[31] &= 127;
    bytes[31] |= 64;
    SecretKey::from_bytes(bytes)
}

/// The public key of `private`.
pub fn public_of(private: &SecretKey) -> PublicKey {
    let secret = StaticSecret::from(*private.expose());
    PublicKey(X25519Public::from(&secret).to_bytes())
}

/// Reads a base64 key from `path` (surrounding whitespace ignored).
pub fn read_key(path: &Path) -> Result<SecretKey, KeyError> {
    let text = fs::read_to_string(path).map_err(io_error(path))?;
    SecretKey::from_base64(&text).map_err(|source| KeyError::Format {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `key` to `path` whole (a 0600 temp file renamed over it, fsynced), creating its
/// private directory.
fn write_key(path: &Path, key: &SecretKey) -> Result<(), KeyError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    cni_persist::ensure_dir(dir, DirRule::PRIVATE)?;
    let text = format!("{}\n", key.expose_base64());
    cni_persist::replace(path, text.as_bytes(), Durability::Fsync)?;
    Ok(())
}

/// Replaces the key in `path` with a new one; returns the new public key. The running agent
/// picks it up within a second ([`KeyFile::changed`]).
pub fn rotate(path: &Path) -> Result<PublicKey, KeyError> {
    let key = generate();
    write_key(path, &key)?;
    Ok(public_of(&key))
}

/// What identifies one version of a file: a replaced file is a new inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

impl Stamp {
    fn of(path: &Path) -> io::Result<Stamp> {
        let m = fs::metadata(path)?;
        Ok(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            len: m.len(),
        })
    }
}

/// A key file the agent follows: the private key, or a preshared key (a Secret updated in
/// place).
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
    seen: Option<Stamp>,
    key: SecretKey,
}

impl KeyFile {
    /// The key in `path`.
    pub fn load(path: &Path) -> Result<KeyFile, KeyError> {
        let seen = Stamp::of(path).ok();
        Ok(KeyFile {
            path: path.to_path_buf(),
            seen,
            key: read_key(path)?,
        })
    }

    /// The private key in `path`, generated there first when the file does not exist. A file
    /// others may read is made 0600 (and said so).
    pub fn load_or_create(path: &Path) -> Result<KeyFile, KeyError> {
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                write_key(path, &generate())?;
                log::info!(
                    "wireguard: generated a new private key in {}",
                    path.display()
                );
            }
            Err(e) => return Err(io_error(path)(e)),
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                log::warn!(
                    "wireguard: {} was readable by others (mode {:o}): made 0600",
                    path.display(),
                    meta.permissions().mode() & 0o777
                );
                fs::set_permissions(path, fs::Permissions::from_mode(0o600))
                    .map_err(io_error(path))?;
            }
            Ok(_) => {}
        }
        KeyFile::load(path)
    }

    /// The current key.
    pub fn key(&self) -> SecretKey {
        self.key
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The new key when the file was replaced by a different one since it was last read. A
    /// file that is gone gets the current key back (said once); an unreadable one is an error
    /// and the current key stays.
    pub fn changed(&mut self) -> Result<Option<SecretKey>, KeyError> {
        let stamp = match Stamp::of(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                log::warn!(
                    "wireguard: {} was removed: writing the key in use back",
                    self.path.display()
                );
                write_key(&self.path, &self.key)?;
                Stamp::of(&self.path).map_err(io_error(&self.path))?
            }
            other => other.map_err(io_error(&self.path))?,
        };
        if self.seen == Some(stamp) {
            return Ok(None);
        }
        let key = read_key(&self.path)?;
        self.seen = Some(stamp);
        if key == self.key {
            return Ok(None);
        }
        self.key = key;
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_key_is_curve25519s_of_the_private_one() {
        // RFC 7748 section 6.1: Alice's private and public keys.
        let private = SecretKey::from_bytes(
            *b"\x77\x07\x6d\x0a\x73\x18\xa5\x7d\x3c\x16\xc1\x72\x51\xb2\x66\x45\
               \xdf\x4c\x2f\x87\xeb\xc0\x99\x2a\xb1\x77\xfb\xa5\x1d\xb9\x2c\x2a",
        );
        assert_eq!(
            public_of(&private).to_hex(),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert_eq!(a.expose()[0] & 7, 0, "clamped");
        assert_eq!(a.expose()[31] & 0xc0, 0x40, "clamped");
    }

    #[test]
    fn the_key_file_is_made_once_private_and_followed_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wireguard/private.key");
        let mut file = KeyFile::load_or_create(&path).unwrap();
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let first = file.key();
        assert_eq!(KeyFile::load_or_create(&path).unwrap().key(), first, "kept");
        assert_eq!(file.changed().unwrap(), None);
        let public = rotate(&path).unwrap();
        let new = file.changed().unwrap().expect("a new key");
        assert_ne!(new, first);
        assert_eq!(public_of(&new), public);
        assert_eq!(file.changed().unwrap(), None, "seen once");
        // A loosened file is made private again.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        KeyFile::load_or_create(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A removed file gets the key in use back.
        let in_use = file.key();
        fs::remove_file(&path).unwrap();
        assert_eq!(file.changed().unwrap(), None);
        assert_eq!(read_key(&path).unwrap(), in_use);
        // Garbage is refused, with the path.
        fs::write(&path, "nope").unwrap();
        let err = file.changed().unwrap_err().to_string();
        assert!(err.contains("private.key"), "{err}");
    }
}
