//! A repeated ADD is refused before any plugin runs, on the real kernel: `rcni add NET NETNS` twice with bridge + host-local. The
//! second ADD is refused before any plugin runs, so the first attachment's eth0, lease and
//! cache entry are exactly as they were, and `rcni del` still removes it all. Runs the rcni
//! plugins and, where installed, Debian's Go plugins.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use cni_testkit::{bin_path, is_root, link, Sandbox};

mod support;
use support::lease_files as leases;

/// `rcni <args>` inside the sandbox's host namespace, so the plugins it runs see only that.
fn rcni(sb: &Sandbox, confdir: &Path, plugins: &Path, cache: &Path, args: &[&str]) -> Output {
    support::rcni_in_host(sb, confdir, plugins, cache, args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn second_add_keeps_the_first_attachment(plugins: PathBuf, label: &str) {
    let sb = Sandbox::new().unwrap();
    let pod = sb.add_container().unwrap();
    let confdir = sb.dir().join("net.d");
    let cache = sb.dir().join("cache");
    let ipam = sb.dir().join("ipam");
    fs::create_dir_all(&confdir).unwrap();
    fs::write(
        confdir.join("10-rep.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"rep","plugins":[{{"type":"bridge","bridge":"rep0","isGateway":true,
              "ipam":{{"type":"host-local","ranges":[[{{"subnet":"198.18.77.0/24"}}]],"dataDir":"{}"}}}}]}}"#,
            ipam.display()
        ),
    )
    .unwrap();
    let netns = pod.path.display().to_string();

    let first = rcni(&sb, &confdir, &plugins, &cache, &["add", "rep", &netns]);
    assert!(first.status.success(), "{label}: {}", text(&first.stderr));
    let eth0 = link(&pod.name, "eth0").unwrap().expect("eth0 after ADD");
    let lease_dir = ipam.join("rep");
    let leased = leases(&lease_dir);
    assert_eq!(leased.len(), 1, "{label}: {leased:?}");
    let cached: Vec<_> = fs::read_dir(cache.join("results"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(cached.len(), 1, "{label}");
    let cache_file = cached[0].path();
    let cache_before = fs::read(&cache_file).unwrap();

    let second = rcni(&sb, &confdir, &plugins, &cache, &["add", "rep", &netns]);
    assert!(
        !second.status.success(),
        "{label}: the second ADD succeeded"
    );
    let err = text(&second.stderr) + &text(&second.stdout);
    assert!(err.contains("already attached"), "{label}: {err}");
    assert!(
        err.contains("DEL"),
        "{label}: the error says DEL comes first: {err}"
    );

    let eth0_after = link(&pod.name, "eth0").unwrap().expect("eth0 kept");
    assert_eq!(eth0_after["ifindex"], eth0["ifindex"], "{label}");
    assert_eq!(eth0_after["address"], eth0["address"], "{label}");
    assert_eq!(leases(&lease_dir), leased, "{label}: lease changed");
    assert_eq!(
        fs::read(&cache_file).unwrap(),
        cache_before,
        "{label}: cache changed"
    );

    let del = rcni(&sb, &confdir, &plugins, &cache, &["del", "rep", &netns]);
    assert!(del.status.success(), "{label}: {}", text(&del.stderr));
    assert!(link(&pod.name, "eth0").unwrap().is_none(), "{label}");
    assert!(leases(&lease_dir).is_empty(), "{label}");
    assert!(!cache_file.exists(), "{label}");
}

#[test]
fn second_add_keeps_the_first_attachment_with_rcni_plugins() {
    if !is_root() {
        eprintln!("SKIPPED: needs root for network namespaces");
        return;
    }
    let sb = Sandbox::new().unwrap();
    let bin = bin_path("rcni-plugins").expect("build rcni-plugins first");
    let plugins = sb.link_plugins(bin, &["bridge", "host-local"]).unwrap();
    second_add_keeps_the_first_attachment(plugins, "rcni plugins");
}

#[test]
fn second_add_keeps_the_first_attachment_with_go_plugins() {
    if !is_root() || !Path::new("/usr/lib/cni/bridge").is_file() {
        eprintln!("SKIPPED: needs root and Debian's Go plugins in /usr/lib/cni");
        return;
    }
    second_add_keeps_the_first_attachment(PathBuf::from("/usr/lib/cni"), "Go plugins");
}
