//! `rcni flows`: the node agent's flows, as a table or JSON lines, once or following.

use std::io::Write;
use std::time::Duration;

use cni_types::code;
use rcni_flows::{ClientError, Filter, Flow};

use crate::cli::flows::FlowsArgs;
use crate::failure::Failure;

/// How long a one-shot request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(args: &FlowsArgs, json: bool) -> Result<(), Failure> {
    let agent = args.agent.agent().map_err(Failure::usage)?;
    let filter = Filter {
        denied: args.denied,
        pod: args
            .pod
            .as_deref()
            .map(|p| {
                rcni_flows::query::pod_key(p)
                    .ok_or_else(|| Failure::usage(format!("--pod {p:?}: give NAMESPACE/NAME")))
            })
            .transpose()?,
        since: args.since.as_deref().map(since).transpose()?,
        ..Filter::default()
    };
    let mut out = std::io::stdout().lock();
    let mut headed = json;
    // Oldest change first, so the newest is at the bottom, where --follow adds lines.
    let mut print = |f: Flow| -> bool {
        let mut text = String::new();
        if !std::mem::replace(&mut headed, true) {
            text = header() + "\n";
        }
        text += &if json { f.to_json_line() } else { row(&f) };
        writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
    };
    if args.follow {
        return agent.follow(&filter, print).map_err(failed);
    }
    let flows = agent.flows(&filter, TIMEOUT).map_err(failed)?;
    if flows.is_empty() && !json {
        eprintln!("no flows{}", if args.denied { " denied" } else { "" });
    }
    flows
        .into_iter()
        .take_while(|f| print(f.clone()))
        .for_each(drop);
    Ok(())
}

fn failed(e: ClientError) -> Failure {
    let code = if e.is_unreachable() {
        code::TRY_AGAIN_LATER
    } else {
        code::INTERNAL
    };
    Failure::other("flows", code, e.to_string())
}

/// `--since`: a duration such as `30s`, `5m`, `1h30m`.
fn since(text: &str) -> Result<Duration, Failure> {
    let bad = || {
        Failure::usage(format!(
            "--since {text:?}: give a duration such as 30s, 5m or 1h"
        ))
    };
    let d: jiff::SignedDuration = text.parse().map_err(|_| bad())?;
    Duration::try_from(d).map_err(|_| bad())
}

pub fn header() -> String {
    format!(
        "{:<12} {:<8} {:<8} {:<6} {:<34} {:<34} {:>6}  POLICIES",
        "TIME", "VERDICT", "DIR", "PROTO", "SOURCE", "DESTINATION", "COUNT"
    )
}

/// One flow as a row of the table: the policies, and for an allowed flow its rule.
pub fn row(f: &Flow) -> String {
    let time = f
        .time
        .to_zoned(jiff::tz::TimeZone::system())
        .strftime("%H:%M:%S%.3f")
        .to_string();
    let mut decided = f.policies.join(", ");
    if let Some(rule) = &f.rule {
        decided = format!("{decided} {rule}");
    }
    if decided.is_empty() && f.verdict == rcni_flows::Verdict::Held {
        decided = "(held: labels not known yet)".into();
    }
    format!(
        "{:<12} {:<8} {:<8} {:<6} {:<34} {:<34} {:>6}  {}",
        time,
        f.verdict.name(),
        f.direction.name(),
        f.protocol.to_string(),
        f.src.describe(),
        f.dst.describe(),
        f.count,
        decided
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_of_since() {
        assert_eq!(since("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(since("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(since("30s").unwrap(), Duration::from_secs(30));
        assert!(since("-5m").is_err());
        assert!(since("soon").is_err());
    }
}
