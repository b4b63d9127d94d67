//! The agent's health as others see it:
//!
//! - [`HealthState`], shared between the reconcile loop (which updates it) and the readers;
//! - the status file the plugins' STATUS reads (`{"healthy":…,"reason":…,"until":<unix s>}`):
//!   `until` lets a plugin tell a killed agent's stale "healthy" from a live one;
//! - `--health-addr`: `/healthz` (200 or 503) and Prometheus-style `/metrics`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

use crate::files::write_atomic;
use crate::lease::Subnets;

/// What the agent knows about itself.
#[derive(Debug, Default)]
pub struct HealthState {
    /// The node's name (`--node-name`).
    pub node_name: String,
    /// The node subnets, once a lease is held.
    pub subnet: Option<Subnets>,
    /// Since when the datastore has failed, while it does.
    pub store_down_since: Option<Instant>,
    /// Remote leases known.
    pub leases_known: usize,
    /// Remote nodes programmed by the backend.
    pub remotes_programmed: usize,
    /// Unix time of the last completed resync.
    pub last_sync_unix: Option<u64>,
    /// Datastore errors seen.
    pub etcd_errors: u64,
    /// Kernel objects put back by resyncs.
    pub repairs: u64,
    /// Completed GC rounds of forgotten sandboxes (`--cri-socket`).
    pub gc_runs: u64,
    /// Attachments of forgotten sandboxes reclaimed (chain DEL done).
    pub gc_reclaimed: u64,
    /// GC failures: rounds that could not run, DELs and plugin GCs that failed.
    pub gc_errors: u64,
}

impl HealthState {
    /// `Ok` while healthy, else why not: no lease, or the datastore failing for longer than
    /// `grace`.
    pub fn verdict(&self, grace: Duration) -> Result<(), String> {
        if self.subnet.is_none() {
            return Err("no subnet lease held".into());
        }
        match self.store_down_since {
            Some(since) if since.elapsed() > grace => Err(format!(
                "datastore unreachable for {} s",
                since.elapsed().as_secs()
            )),
            _ => Ok(()),
        }
    }

    /// The datastore failed now.
    pub fn store_failed(&mut self) {
        self.etcd_errors += 1;
        self.store_down_since.get_or_insert_with(Instant::now);
    }

    /// The datastore answered now.
    pub fn store_ok(&mut self) {
        self.store_down_since = None;
    }

    fn metrics(&self, grace: Duration) -> String {
        let healthy = u8::from(self.verdict(grace).is_ok());
        let info = format!(
            "# HELP rcni_node_info The node's name and subnets (value 1).\n\
             # TYPE rcni_node_info gauge\n\
             rcni_node_info{{node=\"{}\",subnet=\"{}\",ipv6_subnet=\"{}\"}} 1\n",
            label(&self.node_name),
            self.subnet
                .and_then(|s| s.v4)
                .map(|n| n.to_string())
                .unwrap_or_default(),
            self.subnet
                .and_then(|s| s.v6)
                .map(|n| n.to_string())
                .unwrap_or_default(),
        );
        info + &format!(
            "# HELP rcni_node_healthy 1 when the agent holds a lease and reaches the datastore.\n\
             # TYPE rcni_node_healthy gauge\nrcni_node_healthy {healthy}\n\
             # HELP rcni_node_leases_known Remote subnet leases known.\n\
             # TYPE rcni_node_leases_known gauge\nrcni_node_leases_known {}\n\
             # HELP rcni_node_remotes_programmed Remote nodes programmed in the kernel.\n\
             # TYPE rcni_node_remotes_programmed gauge\nrcni_node_remotes_programmed {}\n\
             # HELP rcni_node_last_sync_timestamp_seconds Unix time of the last resync.\n\
             # TYPE rcni_node_last_sync_timestamp_seconds gauge\nrcni_node_last_sync_timestamp_seconds {}\n\
             # HELP rcni_node_etcd_errors_total Datastore errors.\n\
             # TYPE rcni_node_etcd_errors_total counter\nrcni_node_etcd_errors_total {}\n\
             # HELP rcni_node_repairs_total Kernel objects put back by resyncs.\n\
             # TYPE rcni_node_repairs_total counter\nrcni_node_repairs_total {}\n\
             # HELP rcni_node_gc_runs_total Completed GC rounds of sandboxes the runtime forgot.\n\
             # TYPE rcni_node_gc_runs_total counter\nrcni_node_gc_runs_total {}\n\
             # HELP rcni_node_gc_reclaimed_total Attachments of forgotten sandboxes reclaimed.\n\
             # TYPE rcni_node_gc_reclaimed_total counter\nrcni_node_gc_reclaimed_total {}\n\
             # HELP rcni_node_gc_errors_total Failed GC rounds, DELs and plugin GCs.\n\
             # TYPE rcni_node_gc_errors_total counter\nrcni_node_gc_errors_total {}\n",
            self.leases_known,
            self.remotes_programmed,
            self.last_sync_unix.unwrap_or(0),
            self.etcd_errors,
            self.repairs,
            self.gc_runs,
            self.gc_reclaimed,
            self.gc_errors,
        )
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The state shared by the loop and the readers.
pub type SharedHealth = Arc<Mutex<HealthState>>;

/// Locks the state (a panicked holder does not make it unreadable).
pub fn lock(h: &SharedHealth) -> std::sync::MutexGuard<'_, HealthState> {
    h.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Seconds since the epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Writes the status file; it stays valid for `valid_for`.
pub fn write_status_file(
    path: &Path,
    verdict: &Result<(), String>,
    valid_for: Duration,
) -> std::io::Result<()> {
    let body = json!({
        "healthy": verdict.is_ok(),
        "reason": verdict.as_ref().err(),
        "until": unix_now() + valid_for.as_secs(),
    });
    write_atomic(path, body.to_string().as_bytes())
}

/// Binds the health endpoint (a taken address fails the agent's start, not silently later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/healthz` and `/metrics` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    health: SharedHealth,
    grace: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = shutdown.changed() => return Ok(()),
        };
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let health = health.clone();
                async move { Ok::<_, Infallible>(answer(req.uri().path(), &health, grace)) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                log::debug!("health connection: {e}");
            }
        });
    }
}

fn answer(path: &str, health: &SharedHealth, grace: Duration) -> Response<Full<Bytes>> {
    let state = lock(health);
    let (status, body) = match path {
        "/healthz" => match state.verdict(grace) {
            Ok(()) => (StatusCode::OK, "ok\n".to_string()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/metrics" => (StatusCode::OK, state.metrics(grace)),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}

/// Where the status file lives by default.
pub fn default_status_file(state_dir: &Path) -> PathBuf {
    state_dir.join("node-status.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_only_with_a_lease_and_a_store_within_grace() {
        let mut s = HealthState::default();
        assert!(s.verdict(Duration::from_secs(10)).is_err());
        s.subnet = Some(crate::lease::Subnets {
            v4: Some("198.19.1.0/24".parse().unwrap()),
            v6: Some("2001:2:0:1::/64".parse().unwrap()),
        });
        s.node_name = "node \"a\"".into();
        assert!(s.verdict(Duration::from_secs(10)).is_ok());
        assert!(s.metrics(Duration::ZERO).contains(
            "rcni_node_info{node=\"node \\\"a\\\"\",subnet=\"198.19.1.0/24\",ipv6_subnet=\"2001:2:0:1::/64\"} 1\n"
        ));
        s.store_failed();
        assert!(s.verdict(Duration::from_secs(10)).is_ok(), "within grace");
        assert!(s.verdict(Duration::ZERO).is_err());
        s.store_ok();
        assert!(s.verdict(Duration::ZERO).is_ok());
        assert_eq!(s.etcd_errors, 1);
        assert!(s
            .metrics(Duration::ZERO)
            .contains("rcni_node_etcd_errors_total 1\n"));
    }

    #[test]
    fn status_file_carries_the_verdict_and_an_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        write_status_file(&path, &Err("no lease".into()), Duration::from_secs(10)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["healthy"], false);
        assert_eq!(v["reason"], "no lease");
        assert!(v["until"].as_u64().unwrap() >= unix_now() + 9);
    }
}
