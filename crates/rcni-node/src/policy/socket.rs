//! The agent's pod socket (`<state-dir>/pods.sock`, named in the conflist's bridge entry as
//! `rcniNodeSocket`): the bridge plugin tells the agent about each pod at ADD and DEL, one
//! JSON line each way (`cni_types::node_agent::PodMessage` and `PodAnswer`). Each
//! connection is served by a task of its own; the message goes to the enforcement loop as a
//! [`Request`] and the answer comes back once the loop has one (for an ADD: once no other
//! pod's program holds its addresses).

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use cni_types::code;
use cni_types::node_agent::{PodAnswer, PodMessage};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::shutdown::stopped;

/// How long a plugin may take to send its message.
const READ_DEADLINE: Duration = Duration::from_secs(5);
/// The longest message read.
const MAX_MESSAGE: u64 = 64 * 1024;

/// One message of a plugin, and where its answer goes.
pub struct Request {
    pub message: PodMessage,
    pub reply: oneshot::Sender<PodAnswer>,
}

/// Listens on `path` (0600; a socket left there by an earlier run is replaced, any other file
/// is an error).
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} exists and is not a socket",
                path.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves `listener` until `shutdown`, handing each message to `requests`.
pub async fn serve(
    listener: UnixListener,
    requests: mpsc::Sender<Request>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::task::spawn_local(handle(stream, requests.clone()));
                }
                Err(e) => {
                    log::warn!("pod socket: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stopped(&mut shutdown) => return,
        }
    }
}

async fn handle(stream: UnixStream, requests: mpsc::Sender<Request>) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_MESSAGE));
    let read = tokio::time::timeout(READ_DEADLINE, reader.read_line(&mut line)).await;
    let answer = match read {
        Ok(Ok(n)) if n > 0 => match serde_json::from_str::<PodMessage>(&line) {
            Ok(message) => ask(message, &requests).await,
            Err(e) => PodAnswer::refused(code::DECODING_FAILURE, format!("bad message: {e}")),
        },
        Ok(Ok(_)) => return,
        Ok(Err(e)) => {
            log::debug!("pod socket: read: {e}");
            return;
        }
        Err(_) => PodAnswer::refused(code::IO_FAILURE, "no message within 5 s"),
    };
    let mut text = serde_json::to_vec(&answer).unwrap_or_default();
    text.push(b'\n');
    if let Err(e) = write.write_all(&text).await {
        log::debug!("pod socket: answer: {e}");
    }
}

async fn ask(message: PodMessage, requests: &mpsc::Sender<Request>) -> PodAnswer {
    let (reply, answer) = oneshot::channel();
    let stopping = || PodAnswer::refused(code::TRY_AGAIN_LATER, "rcni-node is stopping");
    if requests.send(Request { message, reply }).await.is_err() {
        return stopping();
    }
    answer.await.unwrap_or_else(|_| stopping())
}
