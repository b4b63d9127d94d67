//! The lab's checks, one function per layer. Kernel state is read back through netlink
//! (cni-linux), not through the `ip` tool.

use std::net::IpAddr;
use std::path::Path;

use cni_linux::rtnl::route::RT_TABLE_MAIN;
use cni_linux::{Handle, NetNs};
use cni_runtime::{CniResult, Network, Runtime, SandboxResult};
use cni_types::IpConfig;

use super::http;
use super::report::{Layer, Report, Verdict};
use super::Prepared;

/// The result of the proven network (not the loopback one) within a sandbox result.
pub fn network_result<'a>(r: &'a SandboxResult, net: &Network) -> Option<&'a CniResult> {
    r.results
        .iter()
        .find(|nr| nr.network == net.name())
        .map(|nr| &nr.result)
}

/// Interfaces the result places in the pod (`sandbox` set) and on the host.
fn split_interfaces(r: &CniResult) -> (Vec<usize>, Vec<usize>) {
    (0..r.interfaces.len()).partition(|&i| !r.interfaces[i].sandbox.is_empty())
}

/// The interface an IP belongs to: its index, or the pod's first interface when unset.
fn owner<'a>(r: &'a CniResult, ip: &IpConfig, pod_ifaces: &[usize]) -> Option<&'a str> {
    match ip.interface.and_then(|i| usize::try_from(i).ok()) {
        Some(i) => r.interfaces.get(i).map(|i| i.name.as_str()),
        None => pod_ifaces.first().map(|&i| r.interfaces[i].name.as_str()),
    }
}

pub fn plugin_result(report: &mut Report, pod: &str, r: Option<&CniResult>, ns: &NetNs) {
    let Some(r) = r else {
        report.fail(
            Layer::PluginResult,
            format!("{pod}: a result for the network"),
            "none returned",
        );
        return;
    };
    let (in_pod, on_host) = split_interfaces(r);
    let sandbox_ok = in_pod
        .iter()
        .all(|&i| r.interfaces[i].sandbox == ns.path().display().to_string());
    report.check(
        Layer::PluginResult,
        format!("{pod}: interfaces in the pod carry its netns as sandbox"),
        !in_pod.is_empty() && sandbox_ok,
        in_pod
            .iter()
            .map(|&i| r.interfaces[i].name.clone())
            .collect::<Vec<_>>()
            .join(", "),
    );
    if !on_host.is_empty() {
        host_interfaces_reported(report, pod, r, &on_host);
    }
    report.check(
        Layer::PluginResult,
        format!("{pod}: addresses assigned"),
        !r.ips.is_empty(),
        r.ips
            .iter()
            .map(|ip| ip.address.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
}

/// Host-side interfaces in a result must be usable by a runtime: a kernel-valid name, unique in
/// the result, and a well-formed MAC when one is given (the spec makes `mac` optional).
fn host_interfaces_reported(report: &mut Report, pod: &str, r: &CniResult, on_host: &[usize]) {
    let mut problems = Vec::new();
    for &i in on_host {
        let iface = &r.interfaces[i];
        if iface.name.is_empty() || iface.name.len() > 15 || iface.name.contains(['/', ' ']) {
            problems.push(format!(
                "name {:?} is not a valid interface name",
                iface.name
            ));
        }
        if on_host
            .iter()
            .filter(|&&j| r.interfaces[j].name == iface.name)
            .count()
            > 1
        {
            problems.push(format!("{} is listed twice", iface.name));
        }
        if !iface.mac.is_empty() && iface.mac.parse::<cni_linux::mac::MacAddr>().is_err() {
            problems.push(format!("{}: MAC {:?} is malformed", iface.name, iface.mac));
        }
    }
    problems.dedup();
    let names = on_host
        .iter()
        .map(|&i| r.interfaces[i].name.clone())
        .collect::<Vec<_>>()
        .join(", ");
    report.check(
        Layer::PluginResult,
        format!("{pod}: host-side interfaces reported with valid names and MACs"),
        problems.is_empty(),
        if problems.is_empty() {
            names
        } else {
            problems.join("; ")
        },
    );
}

pub fn kernel(report: &mut Report, pod: &str, r: Option<&CniResult>, ns: &NetNs, host: &NetNs) {
    let Some(r) = r else { return };
    let (in_pod, on_host) = split_interfaces(r);
    let mut h = match Handle::in_netns(ns) {
        Ok(h) => h,
        Err(e) => {
            return report.fail(
                Layer::Kernel,
                format!("{pod}: netlink socket in the pod"),
                e,
            )
        }
    };
    match h.link_by_name("lo") {
        Ok(lo) => {
            report.check(Layer::Kernel, format!("{pod}: lo is up"), lo.up, "");
        }
        Err(e) => report.fail(Layer::Kernel, format!("{pod}: lo"), e),
    }
    for &i in &in_pod {
        let name = &r.interfaces[i].name;
        let link = match h.link_by_name(name) {
            Ok(l) => l,
            Err(e) => {
                report.fail(Layer::Kernel, format!("{pod}: {name} exists in the pod"), e);
                continue;
            }
        };
        report.check(
            Layer::Kernel,
            format!("{pod}: {name} exists and is up"),
            link.up,
            format!(
                "index {}, kind {}",
                link.index,
                link.kind.clone().unwrap_or_default()
            ),
        );
        let have = h.addresses(Some(link.index)).unwrap_or_default();
        for ip in r
            .ips
            .iter()
            .filter(|ip| owner(r, ip, &in_pod) == Some(name.as_str()))
        {
            let present = have.iter().any(|a| a.addr == ip.address);
            report.check(
                Layer::Kernel,
                format!("{pod}: {name} has {}", ip.address),
                present,
                "",
            );
        }
    }
    for route in &r.routes {
        let v6 = matches!(route.dst, ipnet::IpNet::V6(_));
        let found = h
            .routes(v6, Some(RT_TABLE_MAIN))
            .unwrap_or_default()
            .into_iter()
            .any(|k| k.dst == route.dst && route.gw.is_none_or(|gw| k.gateway == Some(gw)));
        report.check(
            Layer::Kernel,
            format!("{pod}: route to {}", route.dst),
            found,
            "",
        );
    }
    host_interfaces(report, pod, r, &on_host, host);
}

/// The result's host-side interfaces: up, and host veths on the bridge when there is one.
fn host_interfaces(report: &mut Report, pod: &str, r: &CniResult, on_host: &[usize], host: &NetNs) {
    let mut hh = match Handle::in_netns(host) {
        Ok(h) => h,
        Err(e) => return report.fail(Layer::Kernel, "netlink socket in the host namespace", e),
    };
    let bridge = on_host
        .iter()
        .filter_map(|&i| hh.link_by_name(&r.interfaces[i].name).ok())
        .find(|l| l.kind.as_deref() == Some("bridge"));
    for &i in on_host {
        let name = &r.interfaces[i].name;
        match hh.link_by_name(name) {
            Ok(l) if l.kind.as_deref() == Some("veth") => {
                let enslaved = bridge.as_ref().is_none_or(|b| l.master == Some(b.index));
                report.check(
                    Layer::Kernel,
                    format!(
                        "{pod}: host veth {name} is up{}",
                        if bridge.is_some() {
                            " and on the bridge"
                        } else {
                            ""
                        }
                    ),
                    l.up && enslaved,
                    "",
                );
            }
            Ok(l) => {
                report.check(
                    Layer::Kernel,
                    format!(
                        "{pod}: host {} {name} is up",
                        l.kind.clone().unwrap_or_default()
                    ),
                    l.up,
                    "",
                );
            }
            Err(e) => report.fail(Layer::Kernel, format!("{pod}: host interface {name}"), e),
        }
    }
}

/// host-local's `<dataDir>/<network>/<ip>` holds `<containerID>\r\n<ifname>`.
pub fn leases(
    report: &mut Report,
    pod: &str,
    r: Option<&CniResult>,
    prepared: &Prepared,
    cid: &str,
) {
    let Some(r) = r else { return };
    let Some(dir) = &prepared.lease_dir else {
        report.record(
            Layer::Ipam,
            format!("{pod}: lease files"),
            Verdict::Skip,
            "the network's IPAM is not host-local",
        );
        return;
    };
    let (in_pod, _) = split_interfaces(r);
    for ip in &r.ips {
        let file = dir.join(ip.address.addr().to_string());
        let ifname = owner(r, ip, &in_pod).unwrap_or("eth0");
        let expected = format!("{cid}\r\n{ifname}");
        match std::fs::read_to_string(&file) {
            Ok(content) => report.check(
                Layer::Ipam,
                format!("{pod}: lease {} names the pod", file.display()),
                content == expected,
                if content == expected {
                    String::new()
                } else {
                    format!("content {content:?}")
                },
            ),
            Err(e) => report.check(
                Layer::Ipam,
                format!("{pod}: lease {}", file.display()),
                false,
                e.to_string(),
            ),
        };
    }
}

fn first_pod_ip(r: Option<&CniResult>) -> Option<IpAddr> {
    let r = r?;
    let (in_pod, _) = split_interfaces(r);
    r.ips
        .iter()
        .filter(|ip| owner(r, ip, &in_pod).is_some())
        .map(|ip| ip.address.addr())
        .min_by_key(|a| a.is_ipv6())
}

pub fn traffic(
    report: &mut Report,
    a: &NetNs,
    ra: Option<&CniResult>,
    b: &NetNs,
    rb: Option<&CniResult>,
) {
    let (Some(_), Some(b_ip)) = (first_pod_ip(ra), first_pod_ip(rb)) else {
        report.record(
            Layer::Traffic,
            "HTTP from pod-a to pod-b",
            Verdict::Skip,
            "no pod address",
        );
        return;
    };
    let body = format!("hello from pod-b, rcni lab {}", std::process::id());
    let server = match http::OneShotServer::start(b, b_ip, 8080, body.clone()) {
        Ok(s) => s,
        Err(e) => {
            return report.fail(
                Layer::Traffic,
                format!("HTTP server on pod-b {b_ip}:8080"),
                e,
            )
        }
    };
    let got = http::get(a, server.addr);
    let served = server.finish();
    match got {
        Ok((status, got_body)) => {
            report.check(
                Layer::Traffic,
                format!(
                    "HTTP GET http://{} from pod-a reaches pod-b",
                    server_addr_text(b_ip)
                ),
                status.contains(" 200 ") && got_body == body && served.is_ok(),
                format!("{status}; body {got_body:?}"),
            );
        }
        Err(e) => report.fail(
            Layer::Traffic,
            format!("HTTP GET http://{} from pod-a", server_addr_text(b_ip)),
            e,
        ),
    }
}

fn server_addr_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:8080/"),
        IpAddr::V6(v6) => format!("[{v6}]:8080/"),
    }
}

/// No lease file of the attachment's addresses is left; with no addresses there is nothing to
/// prove, and the step says so instead of passing.
fn leases_released(report: &mut Report, pod: &str, ips: &[IpAddr], dir: &Path) {
    if ips.is_empty() {
        report.record(
            Layer::Teardown,
            format!("{pod}: leases released"),
            Verdict::Skip,
            "the result had no addresses",
        );
        return;
    }
    let left: Vec<String> = ips
        .iter()
        .map(|ip| dir.join(ip.to_string()))
        .filter(|f| f.exists())
        .map(|f| f.display().to_string())
        .collect();
    report.check(
        Layer::Teardown,
        format!("{pod}: leases released"),
        left.is_empty(),
        if left.is_empty() {
            format!("{} addresses", ips.len())
        } else {
            left.join(", ")
        },
    );
}

/// The lab's own namespaces are gone. When setup failed before any was made there is nothing
/// to prove, so the step is a skip, not a pass.
pub fn namespaces_removed(
    report: &mut Report,
    names: &[String],
    removed: Result<(), String>,
    left: &[String],
) {
    if names.is_empty() && removed.is_ok() {
        report.record(
            Layer::Teardown,
            "lab namespaces removed",
            Verdict::Skip,
            "no namespace was created",
        );
        return;
    }
    let ok = removed.is_ok() && left.is_empty();
    report.check(
        Layer::Teardown,
        "lab namespaces removed",
        ok,
        match removed {
            Err(e) => e,
            Ok(()) if left.is_empty() => format!("{} namespaces", names.len()),
            Ok(()) => format!("still present: {left:?}"),
        },
    );
}

/// What an attachment made, recorded before DEL so its absence can be proven afterwards.
pub struct Snapshot {
    pod_ifaces: Vec<String>,
    host_ifaces: Vec<(String, bool)>,
    ips: Vec<IpAddr>,
}

impl Snapshot {
    pub fn of(r: Option<&CniResult>, host: &NetNs) -> Snapshot {
        let mut s = Snapshot {
            pod_ifaces: Vec::new(),
            host_ifaces: Vec::new(),
            ips: Vec::new(),
        };
        let Some(r) = r else { return s };
        let (in_pod, on_host) = split_interfaces(r);
        let mut hh = Handle::in_netns(host).ok();
        s.pod_ifaces = in_pod
            .iter()
            .map(|&i| r.interfaces[i].name.clone())
            .collect();
        s.host_ifaces = on_host
            .iter()
            .map(|&i| {
                let name = r.interfaces[i].name.clone();
                let shared = hh
                    .as_mut()
                    .and_then(|h| h.link_by_name(&name).ok())
                    .is_some_and(|l| l.kind.as_deref() == Some("bridge"));
                (name, shared)
            })
            .collect();
        s.ips = r.ips.iter().map(|ip| ip.address.addr()).collect();
        s
    }
}

#[allow(clippy::too_many_arguments)]
pub fn nothing_left(
    report: &mut Report,
    pod: &str,
    before: &Snapshot,
    ns: &NetNs,
    host: &NetNs,
    prepared: &Prepared,
    cid: &str,
    rt: &Runtime,
) {
    if let Ok(mut h) = Handle::in_netns(ns) {
        for name in &before.pod_ifaces {
            let gone = matches!(h.link_by_name(name), Err(e) if e.is_not_found());
            report.check(
                Layer::Teardown,
                format!("{pod}: {name} gone from the pod"),
                gone,
                "",
            );
        }
    }
    if let Ok(mut h) = Handle::in_netns(host) {
        for (name, shared) in &before.host_ifaces {
            if *shared {
                let kept = h
                    .link_by_name(name)
                    .is_ok_and(|l| l.kind.as_deref() == Some("bridge"));
                report.check(
                    Layer::Teardown,
                    format!("{pod}: bridge {name} kept"),
                    kept,
                    if kept {
                        "shared by the network, as the Go plugin does; removed with the host namespace"
                    } else {
                        "DEL removed the network's shared bridge"
                    },
                );
                continue;
            }
            let gone = matches!(h.link_by_name(name), Err(e) if e.is_not_found());
            report.check(
                Layer::Teardown,
                format!("{pod}: host interface {name} gone"),
                gone,
                "",
            );
        }
    }
    if let Some(dir) = &prepared.lease_dir {
        leases_released(report, pod, &before.ips, dir);
    }
    let cached = rt.cached_attachments(Some(cid));
    report.check(
        Layer::Teardown,
        format!("{pod}: result cache entries removed"),
        cached.is_empty(),
        format!("{} left", cached.len()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{Interface, SpecVersion};

    fn verdicts(r: &Report) -> Vec<(String, Verdict)> {
        r.steps
            .iter()
            .map(|s| (s.check.clone(), s.verdict))
            .collect()
    }

    #[test]
    fn no_addresses_means_no_lease_proof() {
        let mut r = Report::new(true);
        leases_released(&mut r, "pod-a", &[], Path::new("/nonexistent"));
        assert_eq!(r.count(Verdict::Pass), 0, "{:?}", verdicts(&r));
        assert_eq!(r.count(Verdict::Skip), 1);
    }

    #[test]
    fn a_left_lease_file_fails_the_step() {
        let dir = std::env::temp_dir().join(format!("rcni-lab-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ip: IpAddr = "198.18.0.7".parse().unwrap();
        std::fs::write(dir.join(ip.to_string()), "x").unwrap();
        let mut r = Report::new(true);
        leases_released(&mut r, "pod-a", &[ip], &dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.count(Verdict::Fail), 1, "{:?}", verdicts(&r));
    }

    #[test]
    fn namespaces_removed_is_a_skip_when_none_were_made() {
        let mut r = Report::new(true);
        namespaces_removed(&mut r, &[], Ok(()), &[]);
        assert_eq!(r.count(Verdict::Pass), 0, "{:?}", verdicts(&r));
        let mut r = Report::new(true);
        namespaces_removed(&mut r, &["x".into()], Ok(()), &["x".into()]);
        assert_eq!(r.count(Verdict::Fail), 1, "{:?}", verdicts(&r));
    }

    fn result_with_host(name: &str, mac: &str) -> CniResult {
        let mut res = CniResult::new(SpecVersion::V1_1_0);
        res.interfaces.push(Interface {
            name: name.into(),
            mac: mac.into(),
            ..Default::default()
        });
        res
    }

    #[test]
    fn host_interfaces_are_checked_not_assumed() {
        let mut r = Report::new(true);
        host_interfaces_reported(&mut r, "p", &result_with_host("veth1", "not-a-mac"), &[0]);
        assert_eq!(r.count(Verdict::Fail), 1, "{:?}", verdicts(&r));
        let mut r = Report::new(true);
        host_interfaces_reported(&mut r, "p", &result_with_host("", ""), &[0]);
        assert_eq!(r.count(Verdict::Fail), 1, "{:?}", verdicts(&r));
        let mut r = Report::new(true);
        host_interfaces_reported(
            &mut r,
            "p",
            &result_with_host("veth1", "0a:58:c6:12:00:02"),
            &[0],
        );
        assert_eq!(r.count(Verdict::Pass), 1, "{:?}", verdicts(&r));
    }
}
