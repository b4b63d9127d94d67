//! The multi-network sandbox layer (go-cni's setup/teardown) with Debian's Go plugins: the
//! built-in loopback network on `lo`, then two bridge networks on `eth0` and `net1`.
//!
//! The runtime runs in-process here, on a thread that has entered the sandbox's throwaway host
//! namespace (`NetNs::run`); plugin processes and the setup threads it starts inherit that
//! namespace, so nothing reaches the machine's own namespace.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use cni_linux::NetNs;
use cni_runtime::{Network, Runtime, SandboxNetworks, SandboxRequest, SetupMode};
use cni_testkit::{link, links, Sandbox};

fn go_plugins() -> Option<PathBuf> {
    let dir = PathBuf::from("/usr/lib/cni");
    let root = fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !dir.join("bridge").is_file() || !root {
        eprintln!("skipped: needs root and the Go reference plugins in /usr/lib/cni");
        return None;
    }
    Some(dir)
}

fn bridge_net(
    name: &str,
    version: &str,
    bridge: &str,
    subnet: &str,
    ipam: &str,
    extra: &str,
) -> Network {
    Network::from_list_bytes(
        format!(
            r#"{{"cniVersion":"{version}","name":"{name}","plugins":[{{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":true,
               "ipam":{{"type":"host-local","ranges":[[{{"subnet":"{subnet}"}}]],"routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{ipam}"}}}}{extra}]}}"#
        )
        .as_bytes(),
    )
    .unwrap()
}

fn scenario(mode: SetupMode) {
    let Some(go) = go_plugins() else { return };
    let sb = Sandbox::new().unwrap();
    let ipam = sb.dir().join("ipam").display().to_string();
    let fail_bin = sb.dir().join("bin");
    fs::create_dir_all(&fail_bin).unwrap();
    let fail = fail_bin.join("always-fails");
    fs::write(
        &fail,
        "#!/bin/sh\ncat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] && { echo '{\"code\":100,\"msg\":\"nope\"}'; exit 1; }\nexit 0\n",
    )
    .unwrap();
    fs::set_permissions(&fail, fs::Permissions::from_mode(0o755)).unwrap();
    let rt = Runtime::new(vec![go, fail_bin], sb.dir().join("cache"));
    let pod = sb.add_container().unwrap();
    let req = SandboxRequest {
        container_id: "pod-1".into(),
        netns: pod.path.clone(),
        ..Default::default()
    };
    // containerd's default network and a second one.
    let two = || {
        vec![
            bridge_net(
                "containerd-net",
                "0.4.0",
                "cni0",
                "198.18.0.0/16",
                &ipam,
                "",
            ),
            bridge_net("second", "1.0.0", "cni1", "198.19.66.0/24", &ipam, ""),
        ]
    };
    let good = SandboxNetworks::new(two(), true);
    let host = NetNs::open(&sb.host().path).unwrap();

    let result = host.run(|| good.setup(&rt, &req, mode)).unwrap().unwrap();
    assert!(link(&sb.host().name, "cni0").unwrap().is_some());
    assert!(link(&sb.host().name, "cni1").unwrap().is_some());
    let lo = link(&pod.name, "lo").unwrap().unwrap();
    assert!(lo["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    assert!(link(&pod.name, "eth0").unwrap().is_some());
    assert!(link(&pod.name, "net1").unwrap().is_some());
    assert!(result.ips_of("eth0")[0]
        .address
        .to_string()
        .starts_with("198.18."));
    assert!(result.ips_of("net1")[0]
        .address
        .to_string()
        .starts_with("198.19.66."));
    assert!(!result.ips_of("lo").is_empty());
    host.run(|| good.check(&rt, &req)).unwrap().unwrap();

    host.run(|| good.teardown(&rt, &req)).unwrap().unwrap();
    assert!(link(&pod.name, "eth0").unwrap().is_none());
    assert!(link(&pod.name, "net1").unwrap().is_none());
    let veths = links(&sb.host().name)
        .unwrap()
        .into_iter()
        .filter(|l| l["linkinfo"]["info_kind"] == "veth")
        .count();
    assert_eq!(veths, 0);
    // Idempotent.
    host.run(|| good.teardown(&rt, &req)).unwrap().unwrap();

    // Partial failure: the third network fails, the two attached before are torn down.
    let mut three = two();
    three.push(bridge_net(
        "third",
        "1.0.0",
        "cni2",
        "198.19.55.0/24",
        &ipam,
        r#",{"type":"always-fails"}"#,
    ));
    let bad = SandboxNetworks::new(three, false);
    let err = host
        .run(|| bad.setup(&rt, &req, mode))
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), 100, "{err}");
    for ifname in ["eth0", "net1", "net2"] {
        assert!(link(&pod.name, ifname).unwrap().is_none(), "{ifname} left");
    }
    let leases: Vec<_> = ["containerd-net", "second", "third"]
        .iter()
        .flat_map(|n| {
            fs::read_dir(sb.dir().join("ipam").join(n))
                .into_iter()
                .flatten()
        })
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    assert!(leases.is_empty(), "{leases:?}");
    assert!(rt.cached_attachments(None).is_empty());
}

#[test]
fn sandbox_serial_with_go_plugins() {
    scenario(SetupMode::Serial);
}

#[test]
fn sandbox_parallel_with_go_plugins() {
    scenario(SetupMode::Parallel);
}
