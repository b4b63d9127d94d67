//! Dev-only helpers for rcni's integration tests (use as a `[dev-dependency]`).
//!
//! Tests need root. Each test works inside a [`Sandbox`]: a throwaway "host" network
//! namespace plus container namespaces, removed again on drop, even when the test
//! panics. Nothing here touches the root network namespace.
//!
//! - Run real plugins: [`Sandbox::run_plugin`] with a [`PluginCall`], giving a
//!   [`PluginOutput`]; [`Sandbox::link_plugins`] for a multi-call binary; [`bin_path`]
//!   and [`go_plugins_dir`] to find the binaries.
//! - Run commands: [`Sandbox::exec_in`], [`Sandbox::exec_host`].
//! - Read the kernel with iproute2/nft JSON, independent of rcni's netlink code:
//!   [`links`], [`link`], [`addrs`], [`routes`], [`bridge_vlans`], [`qdiscs`], [`nft_json`].
//! - etcd: [`etcd::Etcd`], a one-member store in a sandbox namespace, and [`etcd::Member`].
//! - Real traffic: [`ping`], [`http_server`] and [`http_get`].
//! - A real browser: [`browser::Browser`], headless Chromium driven over its DevTools pipe.
//!
//! ```no_run
//! use cni_testkit::{bin_path, link, PluginCall, Sandbox};
//!
//! let sb = Sandbox::new()?;
//! let pod = sb.add_container()?;
//! let cni_path = sb.link_plugins(bin_path("cni-plugins")?, &["loopback"])?;
//! let out = sb.run_plugin(
//!     cni_path.join("loopback"),
//!     &PluginCall::new("ADD")
//!         .container_id("c1")
//!         .netns(&pod.path)
//!         .ifname("lo")
//!         .path(&cni_path)
//!         .stdin(r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#),
//! )?;
//! out.assert_success();
//! let lo = link(&pod.name, "lo")?.expect("lo exists");
//! assert!(lo["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
//! # anyhow::Ok(())
//! ```
//!
//! All failures to set things up are `anyhow` errors with the tool's output attached;
//! a plugin or command that merely exits non-zero is not an error (see [`PluginOutput`]).

mod bins;
pub mod browser;
pub mod etcd;
mod http;
mod in_netns;
pub use in_netns::run_in;
mod kernel;
mod names;
mod output;
mod ping;
mod plugin;
mod probe;
mod process;
mod sandbox;

pub use bins::{bin_path, cni_path, go_plugins_dir, GO_PLUGINS_DIR};
pub use http::{http_get, http_server, HttpServer, HTTP_BODY};
pub use kernel::{
    addrs, addrs_of, bridge_vlans, is_up, link, link_names, links, nft_json, qdiscs, routes,
    IpFamily,
};
pub use output::{assert_clean_stdout, assert_cni_error, assert_silent_success, PluginOutput};
pub use ping::{ping, PingCount, PingStream};
pub use plugin::PluginCall;
pub use probe::{
    reach_mark, reach_matrix, serve_tcp_udp, tcp_connects, udp_echoes, Servers, Transport,
};
pub use process::PROCESS_TIMEOUT;

/// Runs `cmd` to completion with `stdin`, its output captured (killed after
/// [`PROCESS_TIMEOUT`]); a non-zero exit is not an error here.
pub fn run_command(cmd: std::process::Command, stdin: &[u8]) -> anyhow::Result<PluginOutput> {
    process::run(cmd, stdin, PROCESS_TIMEOUT)
}
pub use sandbox::{Netns, Sandbox};

/// True when the test runs as root (namespaces need it; tests skip with a message otherwise).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
