//! Why a request to one etcd endpoint failed, in one line an operator can act on.
//!
//! The client reports TLS and gRPC failures as nested errors (tonic's transport error over
//! hyper's over rustls'); the causes are told apart by the messages of that chain. A
//! [`Cause::refused`] cause is the server saying no to this client (its certificate, its
//! credentials, its permissions): retrying does not help, so an agent that is starting stops
//! with it; the others (a member down, no leader, a timeout) are outages.

use std::error::Error as _;
use std::fmt;

/// What went wrong with one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Not reachable, timed out, or without a leader: an outage.
    Unreachable,
    /// The server's certificate does not verify against --etcd-cafile.
    ServerNotTrusted,
    /// The server wants a client certificate and got none.
    NoClientCertificate,
    /// The server rejected the client certificate (another CA, revoked, expired).
    ClientCertificateRejected,
    /// The endpoint does not speak TLS (an https:// URL for an http server).
    NotTls,
    /// Wrong user name or password.
    BadCredentials,
    /// The server has authentication enabled and no user was given.
    AuthRequired,
    /// The user lacks a permission on the key prefix.
    PermissionDenied,
    /// The client's own TLS material is unusable.
    TlsMaterial,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Unreachable => "unreachable",
            Kind::ServerNotTrusted => {
                "the server's certificate is not signed by --etcd-cafile (or not issued for this address)"
            }
            Kind::NoClientCertificate => {
                "the server requires a client certificate (give --etcd-certfile and --etcd-keyfile)"
            }
            Kind::ClientCertificateRejected => {
                "the server rejected the client certificate (--etcd-certfile not signed by a CA the server trusts)"
            }
            Kind::NotTls => "the endpoint does not speak TLS (use http://)",
            Kind::BadCredentials => "authentication failed (wrong --etcd-username or password)",
            Kind::AuthRequired => {
                "the server has authentication enabled (give --etcd-username and a password)"
            }
            Kind::PermissionDenied => {
                "permission denied (the etcd user needs read and write on the key prefix)"
            }
            Kind::TlsMaterial => "the client's TLS files are unusable",
        }
    }
}

/// A failure of one endpoint: what it means and the client's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The endpoint.
    pub endpoint: String,
    /// What went wrong.
    pub kind: Kind,
    /// The error chain, one line.
    pub detail: String,
}

impl Cause {
    /// Whether the server refused this client (no retry helps), as opposed to an outage.
    pub fn refused(&self) -> bool {
        self.kind != Kind::Unreachable
    }

    /// Classifies `error`, seen talking to `endpoint`.
    pub fn of(endpoint: &str, error: &etcd_client::Error) -> Cause {
        let detail = chain(error);
        Cause {
            endpoint: endpoint.to_string(),
            kind: classify(&detail),
            detail,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "etcd {}: {} ({})",
            self.endpoint,
            self.kind.describe(),
            self.detail
        )
    }
}

/// The messages of `error` and its sources, joined on one line (repeats dropped).
fn chain(error: &etcd_client::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ").replace('\n', " ")
}

/// The kind of failure a message chain tells.
fn classify(detail: &str) -> Kind {
    let d = detail.to_lowercase();
    let has = |s: &str| d.contains(s);
    if has("invalid peer certificate") || has("unknownissuer") || has("notvalidforname") {
        Kind::ServerNotTrusted
    } else if has("certificaterequired") {
        Kind::NoClientCertificate
    } else if has("received fatal alert") {
        Kind::ClientCertificateRejected
    } else if has("invalidcontenttype") || has("corrupt message") {
        Kind::NotTls
    } else if has("authentication failed") || has("invalid user id or password") {
        Kind::BadCredentials
    } else if has("user name is empty") || has("user name not found") {
        Kind::AuthRequired
    } else if has("permission denied") {
        Kind::PermissionDenied
    } else if has("private key") || has("pem") || has("tls config") {
        Kind::TlsMaterial
    } else {
        Kind::Unreachable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_the_client_map_to_causes() {
        let cases = [
            ("transport error: invalid peer certificate: UnknownIssuer", Kind::ServerNotTrusted),
            ("status: Unknown, message: \"h2 protocol error: received fatal alert: CertificateRequired\"", Kind::NoClientCertificate),
            ("received fatal alert: BadCertificate", Kind::ClientCertificateRejected),
            ("received corrupt message of type InvalidContentType", Kind::NotTls),
            ("status: InvalidArgument, message: \"etcdserver: authentication failed, invalid user ID or password\"", Kind::BadCredentials),
            ("status: InvalidArgument, message: \"etcdserver: user name is empty\"", Kind::AuthRequired),
            ("status: PermissionDenied, message: \"etcdserver: permission denied\"", Kind::PermissionDenied),
            ("transport error: tcp connect error: Connection refused (os error 111)", Kind::Unreachable),
            ("status: Unavailable, message: \"etcdserver: no leader\"", Kind::Unreachable),
        ];
        for (detail, kind) in cases {
            assert_eq!(classify(detail), kind, "{detail}");
        }
        let cause = Cause {
            endpoint: "https://198.18.0.2:2379".into(),
            kind: Kind::BadCredentials,
            detail: "etcdserver: authentication failed".into(),
        };
        assert!(cause.refused());
        assert_eq!(
            cause.to_string(),
            "etcd https://198.18.0.2:2379: authentication failed (wrong --etcd-username or password) (etcdserver: authentication failed)"
        );
        assert!(!cause.to_string().contains('\n'));
    }
}
