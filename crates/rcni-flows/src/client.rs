//! Asking a node agent for its flows: over the root-only unix socket in its state directory
//! (the default of `rcni flows`), or over its HTTP address (`--agent URL`). Both serve the
//! same `/flows` endpoint: JSON lines, and with `follow=1` a response that stays open and
//! gets a line per change.
//!
//! The calls are synchronous (each runs its own single-threaded runtime), for the command
//! line; they must not be called from inside an async runtime.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::model::Flow;
use crate::query::Filter;

/// Where the agent answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agent {
    /// Its unix socket.
    Socket(PathBuf),
    /// Its HTTP address (`http://HOST:PORT`).
    Http { host: String, port: u16 },
}

/// Why the agent gave no flows.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}: not an http://HOST:PORT address")]
    BadUrl(String),
    #[error("cannot reach the node agent at {agent}: {source}")]
    Connect {
        agent: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the node agent at {agent}: {why}")]
    Http { agent: String, why: String },
    #[error("the node agent at {agent} answered {status}: {body}")]
    Status {
        agent: String,
        status: StatusCode,
        body: String,
    },
    #[error("the node agent at {agent} sent a flow that cannot be read: {why}")]
    Decode { agent: String, why: String },
    #[error("no async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the node agent at {agent} did not answer within {secs} s")]
    Timeout { agent: String, secs: u64 },
}

impl ClientError {
    /// The agent could not be reached at all (no socket, nothing listening).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. } | ClientError::Timeout { .. }
        )
    }
}

impl Agent {
    /// The socket in the agent's state directory `state_dir`.
    pub fn in_state_dir(state_dir: &Path) -> Agent {
        Agent::Socket(state_dir.join(cni_attribution::names::NODE_FLOWS_SOCKET))
    }

    /// An `http://HOST:PORT` address (the agent's `--health-addr`).
    pub fn from_url(url: &str) -> Result<Agent, ClientError> {
        let bad = || ClientError::BadUrl(url.to_string());
        let uri: Uri = url.parse().map_err(|_| bad())?;
        if uri.scheme_str() != Some("http") || uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad());
        }
        let host = uri.host().ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Agent::Http {
            host: host.to_string(),
            port: uri.port_u16().unwrap_or(80),
        })
    }

    /// The socket's path, or the URL.
    pub fn describe(&self) -> String {
        match self {
            Agent::Socket(p) => p.display().to_string(),
            Agent::Http { host, port } if host.contains(':') => format!("http://[{host}]:{port}"),
            Agent::Http { host, port } => format!("http://{host}:{port}"),
        }
    }

    /// The flows `filter` picks, least recently updated first; the request gives up after
    /// `timeout`.
    pub fn flows(&self, filter: &Filter, timeout: Duration) -> Result<Vec<Flow>, ClientError> {
        let mut out = Vec::new();
        self.run(filter, false, Some(timeout), |f| {
            out.push(f);
            true
        })?;
        Ok(out)
    }

    /// The flows `filter` picks, then every change to them as it comes, each handed to
    /// `each` until it returns false or the agent closes the stream.
    pub fn follow(
        &self,
        filter: &Filter,
        each: impl FnMut(Flow) -> bool,
    ) -> Result<(), ClientError> {
        self.run(filter, true, None, each)
    }

    fn run(
        &self,
        filter: &Filter,
        follow: bool,
        timeout: Option<Duration>,
        each: impl FnMut(Flow) -> bool,
    ) -> Result<(), ClientError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ClientError::Runtime)?;
        let path = format!("/flows?{}", filter.to_query(follow));
        let work = self.stream(&path, each);
        rt.block_on(async {
            match timeout {
                None => work.await,
                Some(t) => tokio::time::timeout(t, work).await.unwrap_or_else(|_| {
                    Err(ClientError::Timeout {
                        agent: self.describe(),
                        secs: t.as_secs(),
                    })
                }),
            }
        })
    }

    async fn stream(
        &self,
        path: &str,
        mut each: impl FnMut(Flow) -> bool,
    ) -> Result<(), ClientError> {
        let agent = self.describe();
        let connect = |source| ClientError::Connect {
            agent: agent.clone(),
            source,
        };
        let mut body = match self {
            Agent::Socket(p) => {
                let s = tokio::net::UnixStream::connect(p).await.map_err(connect)?;
                get(s, "localhost", path, &agent).await?
            }
            Agent::Http { host, port } => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(connect)?;
                get(s, host, path, &agent).await?
            }
        };
        let mut pending: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| http(&agent, e))?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            pending.extend_from_slice(data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = &line[..line.len() - 1];
                if line.is_empty() {
                    continue;
                }
                let flow: Flow = serde_json::from_slice(line).map_err(|e| ClientError::Decode {
                    agent: agent.clone(),
                    why: e.to_string(),
                })?;
                if !each(flow) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

fn http(agent: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Http {
        agent: agent.to_string(),
        why: e.to_string(),
    }
}

/// Sends `GET path` over `io` and returns the body of a 200 answer.
async fn get<T>(
    io: T,
    host: &str,
    path: &str,
    agent: &str,
) -> Result<hyper::body::Incoming, ClientError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| http(agent, e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::get(path)
        .header(hyper::header::HOST, host)
        .body(Empty::<Bytes>::new())
        .map_err(|e| http(agent, e))?;
    let resp = sender.send_request(req).await.map_err(|e| http(agent, e))?;
    let status = resp.status();
    if status != StatusCode::OK {
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
            .unwrap_or_default();
        return Err(ClientError::Status {
            agent: agent.to_string(),
            status,
            body,
        });
    }
    Ok(resp.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_urls() {
        assert_eq!(
            Agent::from_url("http://127.0.0.1:9477").unwrap(),
            Agent::Http {
                host: "127.0.0.1".into(),
                port: 9477
            }
        );
        let v6 = Agent::from_url("http://[::1]:9477/").unwrap();
        assert_eq!(v6.describe(), "http://[::1]:9477");
        for bad in [
            "https://x:1",
            "127.0.0.1:9477",
            "http://x:1/metrics",
            "nonsense",
        ] {
            assert!(Agent::from_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_socket_is_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let err = Agent::in_state_dir(dir.path())
            .flows(&Filter::default(), Duration::from_secs(1))
            .unwrap_err();
        assert!(err.is_unreachable(), "{err}");
        assert!(err.to_string().contains("flows.sock"), "{err}");
    }
}
