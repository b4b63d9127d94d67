//! How to reach etcd: the endpoints, the TLS files and the credentials, from flags or the
//! `RCNI_ETCD_*` environment variables (a DaemonSet takes them from a Secret). The flag names
//! and meaning are flannel's (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`,
//! `--etcd-username`, `--etcd-password`); the password may also come from a file.
//!
//! [`EtcdOptions`] is what a command line accepts; [`Access`] is the checked result, which
//! refuses at start what cannot work (an https endpoint without a CA, a certificate without
//! its key, a user without a password). The TLS files are read again on every connection
//! ([`Access::tls_material`]), so a rotated certificate is used from the next reconnection on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// A password: never shown by `Debug` (options are logged and echoed in errors).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The password itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

/// The etcd client options of a command line (flatten into a `clap::Parser`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EtcdOptions {
    /// etcd endpoints, comma-separated (http://host:2379 or https://host:2379, ...); every one
    /// is used: the agent talks to one and moves to the next when it fails.
    #[arg(
        long = "etcd-endpoints",
        env = "RCNI_ETCD_ENDPOINTS",
        value_delimiter = ',',
        required = true
    )]
    pub endpoints: Vec<String>,
    /// PEM file of the CA(s) that signed the etcd servers' certificates (required for https).
    #[arg(long = "etcd-cafile", env = "RCNI_ETCD_CAFILE")]
    pub cafile: Option<PathBuf>,
    /// PEM client certificate presented to etcd (`--client-cert-auth`); needs --etcd-keyfile.
    #[arg(long = "etcd-certfile", env = "RCNI_ETCD_CERTFILE")]
    pub certfile: Option<PathBuf>,
    /// PEM private key of --etcd-certfile.
    #[arg(long = "etcd-keyfile", env = "RCNI_ETCD_KEYFILE")]
    pub keyfile: Option<PathBuf>,
    /// etcd user (etcd authentication enabled); needs a password.
    #[arg(long = "etcd-username", env = "RCNI_ETCD_USERNAME")]
    pub username: Option<String>,
    /// The user's password (prefer RCNI_ETCD_PASSWORD or --etcd-password-file: a flag is
    /// visible in the process list).
    #[arg(
        long = "etcd-password",
        env = "RCNI_ETCD_PASSWORD",
        hide_env_values = true,
        conflicts_with = "password_file"
    )]
    pub password: Option<Secret>,
    /// A file holding the user's password (one line; a trailing newline is ignored).
    #[arg(long = "etcd-password-file", env = "RCNI_ETCD_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
}

/// Options that cannot work, refused at start.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("--etcd-endpoints is empty")]
    NoEndpoints,
    #[error("etcd endpoint {0}: give http:// or https://")]
    Scheme(String),
    #[error("etcd endpoints mix http:// and https:// ({0}): use one scheme")]
    MixedSchemes(String),
    #[error("etcd endpoint {0}: https needs --etcd-cafile (the CA that signed the server's certificate)")]
    HttpsWithoutCa(String),
    #[error("etcd endpoint {0}: --etcd-cafile, --etcd-certfile and --etcd-keyfile need https:// endpoints")]
    TlsOnHttp(String),
    #[error("--etcd-certfile and --etcd-keyfile go together (one of them is missing)")]
    HalfIdentity,
    #[error("--etcd-username needs a password (--etcd-password, RCNI_ETCD_PASSWORD or --etcd-password-file)")]
    NoPassword,
    #[error("an etcd password was given without --etcd-username")]
    NoUser,
    #[error("{flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {path}: no PEM {what} in it")]
    NotPem {
        flag: &'static str,
        path: PathBuf,
        what: &'static str,
    },
}

/// The TLS files of an https setup.
#[derive(Debug, Clone)]
struct TlsFiles {
    ca: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
}

/// The contents of the TLS files at one moment (compared to notice a rotation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsMaterial {
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Checked etcd client options.
#[derive(Debug, Clone)]
pub struct Access {
    /// The endpoints, in the order given.
    pub endpoints: Vec<String>,
    tls: Option<TlsFiles>,
    user: Option<(String, Secret)>,
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, AccessError> {
    std::fs::read(path).map_err(|source| AccessError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// Refuses a file without the PEM block it must hold (a swapped or empty file).
fn pem(
    flag: &'static str,
    path: &Path,
    what: &'static str,
    marker: &str,
) -> Result<Vec<u8>, AccessError> {
    let bytes = read(flag, path)?;
    let text = String::from_utf8_lossy(&bytes);
    if !text.contains("-----BEGIN ") || !text.contains(marker) {
        return Err(AccessError::NotPem {
            flag,
            path: path.to_path_buf(),
            what,
        });
    }
    Ok(bytes)
}

impl Access {
    /// Checks `o`; reads the password file.
    pub fn new(o: &EtcdOptions) -> Result<Access, AccessError> {
        let endpoints: Vec<String> = o
            .endpoints
            .iter()
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect();
        let first = endpoints.first().ok_or(AccessError::NoEndpoints)?;
        let https = |e: &str| e.starts_with("https://");
        if let Some(bad) = endpoints
            .iter()
            .find(|e| !https(e) && !e.starts_with("http://"))
        {
            return Err(AccessError::Scheme(bad.clone()));
        }
        if endpoints.iter().any(|e| https(e) != https(first)) {
            return Err(AccessError::MixedSchemes(endpoints.join(",")));
        }
        let identity = match (&o.certfile, &o.keyfile) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => return Err(AccessError::HalfIdentity),
        };
        let tls = match (https(first), &o.cafile) {
            (true, Some(ca)) => Some(TlsFiles {
                ca: ca.clone(),
                identity,
            }),
            (true, None) => return Err(AccessError::HttpsWithoutCa(first.clone())),
            (false, None) if identity.is_none() => None,
            (false, _) => return Err(AccessError::TlsOnHttp(first.clone())),
        };
        let password = match (&o.password, &o.password_file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(path)) => {
                let text = read("--etcd-password-file", path)?;
                let text = String::from_utf8_lossy(&text);
                Some(Secret(text.trim_end_matches(['\r', '\n']).to_string()))
            }
            (None, None) => None,
        };
        let user = match (&o.username, password) {
            (Some(u), Some(p)) => Some((u.clone(), p)),
            (Some(_), None) => return Err(AccessError::NoPassword),
            (None, Some(_)) => return Err(AccessError::NoUser),
            (None, None) => None,
        };
        let access = Access {
            endpoints,
            tls,
            user,
        };
        access.tls_material()?;
        Ok(access)
    }

    /// The TLS files as they are now (empty without TLS); refused when one cannot be read or
    /// holds no PEM block of its kind.
    pub fn tls_material(&self) -> Result<TlsMaterial, AccessError> {
        let Some(files) = &self.tls else {
            return Ok(TlsMaterial::default());
        };
        let ca = pem("--etcd-cafile", &files.ca, "certificate", "CERTIFICATE")?;
        let identity = match &files.identity {
            Some((cert, key)) => Some((
                pem("--etcd-certfile", cert, "certificate", "CERTIFICATE")?,
                pem("--etcd-keyfile", key, "private key", "PRIVATE KEY")?,
            )),
            None => None,
        };
        Ok(TlsMaterial { ca, identity })
    }

    /// Whether the connection is TLS without a client certificate.
    pub fn tls_without_identity(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.identity.is_none())
    }

    /// The client options for `material` (from [`Access::tls_material`]).
    pub fn connect_options(&self, material: &TlsMaterial) -> ConnectOptions {
        let mut options = ConnectOptions::new();
        if self.tls.is_some() {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(&material.ca));
            if let Some((cert, key)) = &material.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.user {
            options = options
                .with_user(user.clone(), password.expose())
                .with_auto_token_refresh(true);
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(endpoints: &[&str]) -> EtcdOptions {
        EtcdOptions {
            endpoints: endpoints.iter().map(|s| s.to_string()).collect(),
            ..EtcdOptions::default()
        }
    }

    #[test]
    fn what_cannot_work_is_refused_with_the_endpoint_or_flag_named() {
        let e = Access::new(&opts(&["https://198.18.0.2:2379"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "etcd endpoint https://198.18.0.2:2379: https needs --etcd-cafile (the CA that signed the server's certificate)"
        );
        let e = Access::new(&opts(&["http://a:2379", "https://b:2379"])).unwrap_err();
        assert!(matches!(e, AccessError::MixedSchemes(_)), "{e}");
        assert!(matches!(
            Access::new(&opts(&["a:2379"])).unwrap_err(),
            AccessError::Scheme(_)
        ));
        let mut o = opts(&["http://a:2379"]);
        o.certfile = Some("/c.pem".into());
        assert!(matches!(
            Access::new(&o).unwrap_err(),
            AccessError::HalfIdentity
        ));
        o.keyfile = Some("/k.pem".into());
        assert!(matches!(
            Access::new(&o).unwrap_err(),
            AccessError::TlsOnHttp(_)
        ));
        let mut o = opts(&["http://a:2379"]);
        o.username = Some("rcni".into());
        assert!(matches!(
            Access::new(&o).unwrap_err(),
            AccessError::NoPassword
        ));
        let mut o = opts(&["http://a:2379"]);
        o.password = Some("s3cret".parse().unwrap());
        assert!(matches!(Access::new(&o).unwrap_err(), AccessError::NoUser));
        assert_eq!(
            Access::new(&opts(&["http://a:2379"]))
                .unwrap()
                .endpoints
                .len(),
            1
        );
    }

    #[test]
    fn the_password_comes_from_a_file_and_is_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let mut o = opts(&["http://a:2379"]);
        o.username = Some("rcni".into());
        o.password_file = Some(file);
        let access = Access::new(&o).unwrap();
        let (_, password) = access.user.as_ref().unwrap();
        assert_eq!(password.expose(), "s3cret");
        assert!(!format!("{access:?} {o:?}").contains("s3cret"));
    }

    #[test]
    fn a_file_without_its_pem_block_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let mut o = opts(&["https://a:2379"]);
        o.cafile = Some(ca.clone());
        let e = Access::new(&o).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("--etcd-cafile {}: no PEM certificate in it", ca.display())
        );
        o.cafile = Some(dir.path().join("missing.pem"));
        assert!(Access::new(&o)
            .unwrap_err()
            .to_string()
            .starts_with("--etcd-cafile "));
    }
}
