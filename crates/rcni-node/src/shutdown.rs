//! The agent's stop: a `watch` value that turns true once (on SIGTERM or SIGINT, see
//! `node::wait_for_signal`), passed down to every task rather than read anywhere.

use tokio::sync::watch;

/// Waits until `shutdown` is true (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}
