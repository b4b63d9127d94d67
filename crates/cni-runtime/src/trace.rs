//! OpenTelemetry context handed to plugins (libcni main after v1.3, `injectTraceContext` in
//! `pkg/invoke/raw_exec.go`): `TRACEPARENT`, `TRACESTATE` and `BAGGAGE` in the plugin's
//! environment.
//!
//! The runtime takes the context from its own environment when it is built (a runtime started
//! by a traced caller passes the caller's span on), and a library user may replace it per
//! runtime. The variables are set explicitly on every plugin run, so they also reach plugins
//! run with a cleared environment; empty values are not sent, as in libcni.

/// The three W3C trace-context variables; `None` or empty means not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    pub baggage: Option<String>,
}

/// The variable names, as libcni spells them.
pub const TRACE_ENV: [&str; 3] = ["TRACEPARENT", "TRACESTATE", "BAGGAGE"];

impl TraceContext {
    /// The context in this process's environment.
    pub fn from_env() -> Self {
        TraceContext::from_lookup(|k| std::env::var(k).ok())
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let [p, s, b] = TRACE_ENV.map(|k| get(k).filter(|v| !v.is_empty()));
        TraceContext {
            traceparent: p,
            tracestate: s,
            baggage: b,
        }
    }

    /// The variables to set on a plugin run: only the non-empty ones.
    pub fn env(&self) -> Vec<(String, String)> {
        TRACE_ENV
            .iter()
            .zip([&self.traceparent, &self.tracestate, &self.baggage])
            .filter_map(|(k, v)| {
                v.as_ref()
                    .filter(|v| !v.is_empty())
                    .map(|v| (k.to_string(), v.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_values_are_not_sent() {
        let t = TraceContext::from_lookup(|k| match k {
            "TRACEPARENT" => Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            "TRACESTATE" => Some(String::new()),
            _ => None,
        });
        assert_eq!(
            t.env(),
            [(
                "TRACEPARENT".to_string(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string()
            )]
        );
        assert!(TraceContext::default().env().is_empty());
    }
}
