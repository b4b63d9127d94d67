//! The flow socket: `<state-dir>/flows.sock`, a unix socket only root may open (mode 0600 in
//! the agent's own directory), serving the flow endpoints of [`super::routes`] to
//! `rcni flows` on the node without any TCP port. A socket left by an earlier run is
//! replaced; the socket is removed when the agent stops.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;
use tokio::sync::watch;

use super::routes;
use super::SharedFlows;

/// The socket's path in the agent's state directory.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(cni_attribution::names::NODE_FLOWS_SOCKET)
}

/// Binds the socket at `path` (replacing a stale one), readable and writable by root only.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves the flow endpoints on `listener` until `shutdown`, then removes the socket.
pub async fn serve(
    listener: UnixListener,
    path: PathBuf,
    flows: SharedFlows,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    log::warn!("flow socket {}: {e}", path.display());
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let flows = flows.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let flows = flows.clone();
                async move {
                    let (path, query) = (req.uri().path(), req.uri().query());
                    Ok::<_, std::convert::Infallible>(routes::answer(path, query, &flows))
                }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                log::debug!("flow socket connection: {e}");
            }
        });
    }
    let _ = std::fs::remove_file(&path);
}
