//! Lifecycle proofs on a live attachment: CHECK against the cached result (configuration
//! state as recorded, not application health), and a repeated ADD of the same attachment,
//! which must fail and leave the first one exactly as it was (ifindex, MAC, addresses,
//! leases and cache entry).

use std::path::Path;

use cni_linux::{Handle, NetNs};
use cni_runtime::sandbox::{SandboxNetworks, SandboxRequest, SetupMode};
use cni_runtime::Runtime;

use super::report::{Layer, Report};

/// What identifies a live attachment in the kernel and on disk.
#[derive(Debug, PartialEq, Eq)]
struct State {
    links: Vec<(String, u32, String, Vec<String>)>,
    leases: Vec<String>,
    cache: Vec<String>,
}

fn state(pod: &NetNs, lease_dir: Option<&Path>, rt: &Runtime, cid: &str) -> Result<State, String> {
    let mut h = Handle::in_netns(pod).map_err(|e| e.to_string())?;
    let mut links = Vec::new();
    for l in h.links().map_err(|e| e.to_string())? {
        let mut addrs: Vec<String> = h
            .addresses(Some(l.index))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|a| a.addr.to_string())
            .collect();
        addrs.sort();
        let mac = l.mac.map(|m| m.to_string()).unwrap_or_default();
        links.push((l.name, l.index, mac, addrs));
    }
    links.sort();
    let mut leases: Vec<String> = lease_dir
        .and_then(|d| std::fs::read_dir(d).ok())
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| std::fs::read_to_string(p).is_ok_and(|c| c.starts_with(cid)))
                .map(|p| p.display().to_string())
                .collect()
        })
        .unwrap_or_default();
    leases.sort();
    let mut cache: Vec<String> = rt
        .cached_attachments(Some(cid))
        .into_iter()
        .map(|e| format!("{}/{}", e.network_name, e.ifname))
        .collect();
    cache.sort();
    Ok(State {
        links,
        leases,
        cache,
    })
}

pub fn check(
    report: &mut Report,
    pod: &str,
    host: &NetNs,
    networks: &SandboxNetworks,
    rt: &Runtime,
    req: &SandboxRequest,
) {
    let name = format!(
        "{pod}: CHECK agrees with the cached result (configuration state, not application health)"
    );
    match host.run(|| networks.check(rt, req)) {
        Ok(Ok(())) => {
            report.check(Layer::Lifecycle, name, true, "");
        }
        Ok(Err(e)) => report.fail(Layer::Lifecycle, name, e),
        Err(e) => report.fail(Layer::Lifecycle, name, e),
    }
}

#[allow(clippy::too_many_arguments)]
pub fn repeated_add(
    report: &mut Report,
    pod: &str,
    pod_ns: &NetNs,
    host: &NetNs,
    networks: &SandboxNetworks,
    rt: &Runtime,
    req: &SandboxRequest,
    lease_dir: Option<&Path>,
) {
    let before = match state(pod_ns, lease_dir, rt, &req.container_id) {
        Ok(s) => s,
        Err(e) => {
            return report.fail(
                Layer::Lifecycle,
                format!("{pod}: state before the repeated ADD"),
                e,
            )
        }
    };
    let outcome = host.run(|| networks.setup(rt, req, SetupMode::Serial));
    let refused = matches!(outcome, Ok(Err(_)));
    report.check(
        Layer::Lifecycle,
        format!("{pod}: a repeated ADD of the live attachment is refused"),
        refused,
        match &outcome {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "the second ADD succeeded".into(),
            Err(e) => e.to_string(),
        },
    );
    match state(pod_ns, lease_dir, rt, &req.container_id) {
        Ok(after) => {
            let same = after == before;
            report.check(
                Layer::Lifecycle,
                format!("{pod}: the first attachment is unchanged (ifindex, MAC, addresses, lease, cache)"),
                same,
                if same {
                    format!("{} links, {} leases, {} cache entries", before.links.len(), before.leases.len(), before.cache.len())
                } else {
                    format!("before {before:?}, after {after:?}")
                },
            );
        }
        Err(e) => report.fail(
            Layer::Lifecycle,
            format!("{pod}: state after the repeated ADD"),
            e,
        ),
    }
}
