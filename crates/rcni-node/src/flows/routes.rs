//! The flow endpoints, served on the health address and on the flow socket alike:
//!
//! - `/flows`: the flows as JSON lines, picked by the query string of
//!   `rcni_flows::Filter` (`denied`, `pod`, `from`, `to`, `port`, `protocol`, `since`); with
//!   `follow=1` the answer stays open and gets a line for each flow that changes;
//! - `/ui`: the page (one HTML file with its script, no build step and nothing fetched from
//!   elsewhere), and `/ui/pods`: the node's pods, their labels and isolation, as JSON.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame};
use hyper::{header, Response, StatusCode};
use rcni_flows::{Filter, Flow};
use tokio::sync::mpsc;

use super::SharedFlows;

/// The body of every answer of the agent's HTTP servers.
pub type AnyBody = BoxBody<Bytes, Infallible>;

const PAGE: &str = include_str!("ui.html");

/// How often a follower with nothing new is checked for having gone.
const FOLLOW_CHECK: Duration = Duration::from_secs(5);

/// Whether `path` is one of these endpoints.
pub fn handles(path: &str) -> bool {
    matches!(path, "/flows" | "/ui" | "/ui/pods")
}

/// The answer to `GET path?query`.
pub fn answer(path: &str, query: Option<&str>, flows: &SharedFlows) -> Response<AnyBody> {
    match path {
        "/flows" => match Filter::from_query(query.unwrap_or_default()) {
            Ok((filter, false)) => {
                let lines: String = flows.flows(&filter).iter().map(line).collect();
                full(StatusCode::OK, "application/x-ndjson", lines)
            }
            Ok((filter, true)) => follow(flows.clone(), filter),
            Err(e) => full(StatusCode::BAD_REQUEST, "text/plain", format!("{e}\n")),
        },
        "/ui" => full(StatusCode::OK, "text/html; charset=utf-8", PAGE.to_string()),
        "/ui/pods" => {
            let body = serde_json::json!({
                "node": flows.node(),
                "flowLog": flows.mode().to_string(),
                "pods": flows.names().local_pods(),
            });
            full(StatusCode::OK, "application/json", body.to_string())
        }
        _ => full(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

fn line(f: &Flow) -> String {
    let mut l = f.to_json_line();
    l.push('\n');
    l
}

/// A whole answer.
pub fn full(status: StatusCode, content_type: &str, body: String) -> Response<AnyBody> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// An answer that stays open: the flows `filter` picks now, then each flow that changes and
/// matches it (its time window applies to the first lines only), until the reader goes.
fn follow(flows: SharedFlows, filter: Filter) -> Response<AnyBody> {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let (mut seen, mut changed) = flows.subscribe();
        let first: String = flows.flows(&filter).iter().map(line).collect();
        if tx.send(Bytes::from(first)).await.is_err() {
            return;
        }
        let ongoing = Filter {
            since: None,
            ..filter
        };
        loop {
            tokio::select! {
                c = changed.changed() => if c.is_err() { return },
                _ = tokio::time::sleep(FOLLOW_CHECK) => {
                    if tx.is_closed() { return }
                    continue;
                }
            }
            let now = jiff::Timestamp::now();
            let updates = flows.updated_since(seen);
            let Some((last, _)) = updates.last() else {
                continue;
            };
            seen = *last;
            let lines: String = updates
                .iter()
                .filter(|(_, f)| ongoing.matches(f, now))
                .map(|(_, f)| line(f))
                .collect();
            if !lines.is_empty() && tx.send(Bytes::from(lines)).await.is_err() {
                return;
            }
        }
    });
    let mut resp = Response::new(ChannelBody(rx).boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

/// A body fed by a channel: each message is a frame, the end of the channel the end.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}
