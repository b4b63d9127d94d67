//! The agent's health as others see it:
//!
//! - [`HealthState`], shared between the reconcile loop (which updates it) and the readers;
//! - the status file the plugins' ADD and STATUS read (`{"healthy":…,"reason":…,"until":<unix s>,
//!   "node":…,"unhealthySince":<unix s>}`), rewritten every [`STATUS_PERIOD`] by a task of its
//!   own (the kernel work runs on blocking threads, so a long resync cannot stall it) and valid
//!   for [`STATUS_VALIDITY`]: `until` (exclusive) lets a plugin tell a killed agent's stale
//!   "healthy" from a live one within seconds;
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
use tokio::sync::watch;

use crate::files::write_atomic;
use crate::lease::Subnets;
use crate::policy_health::PolicyHealth;
use crate::prometheus::label;

/// What the agent knows about itself.
#[derive(Debug, Default)]
pub struct HealthState {
    /// The node's name (`--node-name`).
    pub node_name: String,
    /// The node subnets, once a lease is held.
    pub subnet: Option<Subnets>,
    /// Since when the datastore has failed, while it does.
    pub store_down_since: Option<Instant>,
    /// The datastore's last error while it fails (endpoint and cause).
    pub store_error: Option<String>,
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
    /// nf_tables objects put back after something else removed them (`rule_repair`).
    pub rule_repairs: u64,
    /// The first complete list of leases has been programmed.
    pub leases_loaded: bool,
    /// Completed GC rounds of forgotten sandboxes (`--cri-socket`).
    pub gc_runs: u64,
    /// Attachments of forgotten sandboxes reclaimed (chain DEL done).
    pub gc_reclaimed: u64,
    /// GC failures: rounds that could not run, DELs and plugin GCs that failed.
    pub gc_errors: u64,
    /// NetworkPolicy enforcement, when on.
    pub policy: Option<PolicyHealth>,
    /// The WireGuard tunnels and their peers, with the `wireguard` backend.
    pub tunnels: Option<crate::backend::wireguard::status::TunnelStatus>,
}

impl HealthState {
    /// `Ok` while healthy, else why not: no lease, the first list of leases not programmed
    /// yet, the datastore failing for longer than `grace`, or NetworkPolicy not in force
    /// ([`PolicyHealth::verdict`]).
    pub fn verdict(&self, grace: Duration) -> Result<(), String> {
        if self.subnet.is_none() {
            return Err("no subnet lease held".into());
        }
        if !self.leases_loaded {
            return Err("the other nodes' leases are not programmed yet".into());
        }
        match self.store_down_since {
            Some(since) if since.elapsed() > grace => Err(format!(
                "datastore unreachable for {} s: {}",
                since.elapsed().as_secs(),
                self.store_error.as_deref().unwrap_or("no answer")
            )),
            _ => self.policy.as_ref().map_or(Ok(()), |p| p.verdict(grace)),
        }
    }

    /// The datastore failed now, for `why`.
    pub fn store_failed(&mut self, why: impl std::fmt::Display) {
        self.etcd_errors += 1;
        self.store_down_since.get_or_insert_with(Instant::now);
        self.store_error = Some(why.to_string());
    }

    /// The datastore answered now.
    pub fn store_ok(&mut self) {
        self.store_down_since = None;
        self.store_error = None;
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
             # HELP rcni_node_rule_repairs_total nf_tables objects put back after another firewall removed them.\n\
             # TYPE rcni_node_rule_repairs_total counter\nrcni_node_rule_repairs_total {}\n\
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
            self.rule_repairs,
            self.gc_runs,
            self.gc_reclaimed,
            self.gc_errors,
        ) + &self
            .policy
            .as_ref()
            .map(|p| p.metrics(grace))
            .unwrap_or_default()
            + &self
                .tunnels
                .as_ref()
                .map(crate::backend::wireguard::status::TunnelStatus::metrics)
                .unwrap_or_default()
    }
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

/// How often the status file is rewritten.
pub const STATUS_PERIOD: Duration = Duration::from_secs(1);
/// How long one write of the status file stays valid (whole seconds; `until` is exclusive, so
/// it expires 3 to 4 s after the write, 2 to 4 s after the agent's death).
pub const STATUS_VALIDITY: Duration = Duration::from_secs(4);

/// Writes the status file, remembering since when the agent has been unhealthy.
#[derive(Debug)]
pub struct StatusWriter {
    path: PathBuf,
    node_name: String,
    unhealthy_since: Option<u64>,
}

impl StatusWriter {
    /// A writer of `path` for the node `node_name`.
    pub fn new(path: PathBuf, node_name: String) -> Self {
        StatusWriter {
            path,
            node_name,
            unhealthy_since: None,
        }
    }

    /// Writes `verdict`, valid for [`STATUS_VALIDITY`].
    pub fn write(&mut self, verdict: &Result<(), String>) -> std::io::Result<()> {
        let now = unix_now();
        self.unhealthy_since = match verdict {
            Ok(()) => None,
            Err(_) => Some(self.unhealthy_since.unwrap_or(now)),
        };
        let body = json!({
            "healthy": verdict.is_ok(),
            "reason": verdict.as_ref().err(),
            "until": now + STATUS_VALIDITY.as_secs(),
            "node": self.node_name,
            "unhealthySince": self.unhealthy_since,
        });
        write_atomic(&self.path, body.to_string().as_bytes())
    }
}

/// Writes `verdict` on a blocking thread (the write fsyncs) and hands the writer back.
async fn write_blocking(mut writer: StatusWriter, verdict: Result<(), String>) -> StatusWriter {
    let written = tokio::task::spawn_blocking(move || {
        if let Err(e) = writer.write(&verdict) {
            log::warn!("write {}: {e}", writer.path.display());
        }
        writer
    })
    .await;
    written.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// How often the status task looks at the verdict, so that a change is written at once.
const VERDICT_POLL: Duration = Duration::from_millis(100);

/// Rewrites the status file every [`STATUS_PERIOD`] with the verdict of `health`, and at once
/// when the verdict changes, until `stop` carries the reason the agent stops; writes that
/// reason (unhealthy) and returns. After each write `written` says whether the file now says
/// healthy, so the agent can publish its conflist only once a plugin's ADD would be accepted.
pub async fn keep_status_file(
    mut writer: StatusWriter,
    health: SharedHealth,
    grace: Duration,
    mut stop: watch::Receiver<Option<String>>,
    written: watch::Sender<bool>,
) {
    let mut tick = tokio::time::interval(VERDICT_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Result<(), String>, Instant)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let verdict = lock(&health).verdict(grace);
                let due = last.as_ref().is_none_or(|(said, at)| {
                    *said != verdict || at.elapsed() >= STATUS_PERIOD
                });
                if due {
                    writer = write_blocking(writer, verdict.clone()).await;
                    written.send_replace(verdict.is_ok());
                    last = Some((verdict, Instant::now()));
                }
            }
            changed = stop.changed() => {
                let reason = stop.borrow().clone();
                if changed.is_err() || reason.is_some() {
                    let reason = reason.unwrap_or_else(|| "agent stopped".into());
                    write_blocking(writer, Err(reason)).await;
                    written.send_replace(false);
                    return;
                }
            }
        }
    }
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
        s.leases_loaded = true;
        assert!(s.verdict(Duration::from_secs(10)).is_ok());
        assert!(s.metrics(Duration::ZERO).contains(
            "rcni_node_info{node=\"node \\\"a\\\"\",subnet=\"198.19.1.0/24\",ipv6_subnet=\"2001:2:0:1::/64\"} 1\n"
        ));
        s.store_failed("etcd https://198.18.0.2:2379: unreachable");
        assert!(s.verdict(Duration::from_secs(10)).is_ok(), "within grace");
        assert!(s
            .verdict(Duration::ZERO)
            .unwrap_err()
            .ends_with(": etcd https://198.18.0.2:2379: unreachable"));
        s.store_ok();
        assert!(s.verdict(Duration::ZERO).is_ok());
        assert_eq!(s.etcd_errors, 1);
        assert!(s
            .metrics(Duration::ZERO)
            .contains("rcni_node_etcd_errors_total 1\n"));
    }

    #[test]
    fn status_file_carries_the_verdict_the_node_an_expiry_and_since_when_it_is_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let read = || -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
        };
        let mut w = StatusWriter::new(path.clone(), "node-a".into());
        let before = unix_now();
        w.write(&Err("starting".into())).unwrap();
        let v = read();
        assert_eq!(v["healthy"], false);
        assert_eq!(v["reason"], "starting");
        assert_eq!(v["node"], "node-a");
        let since = v["unhealthySince"].as_u64().unwrap();
        assert!(since >= before);
        let until = v["until"].as_u64().unwrap();
        assert!((before + 4..=unix_now() + 4).contains(&until), "{v}");
        // Still unhealthy: the same start; healthy: none; unhealthy again: a new start.
        w.write(&Err("no lease".into())).unwrap();
        assert_eq!(read()["unhealthySince"].as_u64(), Some(since));
        w.write(&Ok(())).unwrap();
        assert_eq!(read()["unhealthySince"], serde_json::Value::Null);
        assert_eq!(read()["healthy"], true);
    }

    #[tokio::test]
    async fn the_status_task_follows_the_verdict_and_writes_the_stop_reason_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let health = SharedHealth::default();
        let (stop, stopped) = watch::channel(None);
        let (written, mut says_healthy) = watch::channel(false);
        let writer = StatusWriter::new(path.clone(), "node-a".into());
        let task = tokio::spawn(keep_status_file(
            writer,
            health.clone(),
            Duration::from_secs(10),
            stopped,
            written,
        ));
        let said = |path: &Path| -> Option<serde_json::Value> {
            serde_json::from_slice(&std::fs::read(path).ok()?).ok()
        };
        let wait_until = |want: fn(&serde_json::Value) -> bool| {
            let path = path.clone();
            async move {
                for _ in 0..100 {
                    if said(&path).is_some_and(|v| want(&v)) {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                false
            }
        };
        assert!(wait_until(|v| v["reason"] == "no subnet lease held").await);
        {
            let mut h = lock(&health);
            h.subnet = Some(crate::lease::Subnets {
                v4: Some("198.19.1.0/24".parse().unwrap()),
                v6: None,
            });
            h.leases_loaded = true;
        }
        assert!(wait_until(|v| v["healthy"] == true).await);
        // The healthy signal follows the write: the file already says so when it comes.
        says_healthy.wait_for(|h| *h).await.unwrap();
        assert_eq!(said(&path).unwrap()["healthy"], true);
        stop.send(Some("agent stopped".into())).unwrap();
        task.await.unwrap();
        let last = said(&path).unwrap();
        assert_eq!(last["healthy"], false);
        assert_eq!(last["reason"], "agent stopped");
        assert_eq!(last["node"], "node-a");
    }

    #[test]
    fn a_loaded_list_of_leases_is_needed_to_be_healthy() {
        let mut s = HealthState {
            subnet: Some(crate::lease::Subnets {
                v4: Some("198.19.1.0/24".parse().unwrap()),
                v6: None,
            }),
            ..HealthState::default()
        };
        assert!(s
            .verdict(Duration::ZERO)
            .unwrap_err()
            .contains("not programmed yet"));
        s.leases_loaded = true;
        assert!(s.verdict(Duration::ZERO).is_ok());
    }
}
