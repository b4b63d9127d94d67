//! `rcni doctor explain`: places an error message, as kubelet events and containerd or CRI-O
//! logs show it, in its CNI lifecycle stage and says what it means and where to look next.
//!
//! The classifier is a table of rules, tried in order; the first whose every fragment occurs
//! in the message (case-insensitively) wins, so specific rules stand before general ones. The
//! stage comes from the rule when the cause fixes it, and otherwise from the wrapper the
//! runtime put around the plugin's message (`failed to setup network for sandbox`, libcni's
//! `plugin type="bridge" failed (add)`, ...).

use serde::Serialize;

/// Where in a network's life a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Finding and loading the network config (runtime start, config reload).
    ConfigLoad,
    /// Asking plugins which spec versions they support.
    Version,
    /// Attaching a pod sandbox (RunPodSandbox).
    Add,
    /// Verifying an attachment against its cached result.
    Check,
    /// Detaching a pod sandbox (StopPodSandbox, RemovePodSandbox).
    Del,
    /// The runtime's network readiness (STATUS, or no usable config at all).
    Status,
    /// Garbage collection of stale attachments.
    Gc,
}

impl Stage {
    pub fn describe(self) -> &'static str {
        match self {
            Stage::ConfigLoad => "config load (the runtime reading /etc/cni/net.d)",
            Stage::Version => "VERSION (plugin and config version negotiation)",
            Stage::Add => "ADD (setting up the pod sandbox's network)",
            Stage::Check => "CHECK (verifying an existing attachment)",
            Stage::Del => "DEL (tearing down the pod sandbox's network)",
            Stage::Status => "STATUS / network readiness (kubelet's NetworkReady condition)",
            Stage::Gc => "GC (removing attachments of sandboxes that no longer exist)",
        }
    }
}

/// One known cause.
struct Rule {
    id: &'static str,
    /// Shapes of the message (lowercase): the rule matches when every fragment of one shape
    /// occurs in it.
    when: &'static [&'static [&'static str]],
    stage: StageFrom,
    meaning: &'static str,
    next: &'static [&'static str],
}

impl Rule {
    fn matches(&self, lower: &str) -> bool {
        self.when
            .iter()
            .any(|shape| shape.iter().all(|f| lower.contains(f)))
    }
}

/// Where a rule's stage comes from.
#[derive(Clone, Copy)]
enum StageFrom {
    /// The cause alone decides it.
    Cause(Stage),
    /// Only the runtime's wrapper (or the error code) tells it.
    Wrapper,
    /// The wrapper when there is one, else the stage where the cause usually shows.
    WrapperElse(Stage),
}
use StageFrom::{Cause, Wrapper, WrapperElse};

/// The runtime's CNI library could not read the plugin's result: the ADD that caused this
/// succeeded in the plugins and was rolled back by the runtime.
const RUNTIME_RESULT_VERSION: &str = "The plugins answered, but the runtime's CNI library cannot read a result of the version the config asked for (plugins answer in the config's cniVersion). libcni 1.0 and 1.1, inside containerd 1.6 and 1.7, podman 4's CNI backend and older CRI-O, read results up to 1.0.0; libcni 1.2 and 1.3 (containerd 2.x) up to 1.1.0. The runtime rolls the attachment back, so no pod on this network can start.";

const RUNTIME_RESULT_VERSION_NEXT: &[&str] = &[
    "Write \"cniVersion\": \"1.0.0\" with a \"cniVersions\" list of the higher versions the plugins support: libcni 1.2 and later pick the highest they implement, older ones ignore the list. rcni-node writes exactly this by default.",
    "Or pin one version the runtime reads: `rcni-node --cni-version 1.0.0` (or edit the conflist's cniVersion when another tool wrote it).",
    "Or upgrade the runtime to one with libcni 1.2 or later (containerd 2.x), which reads 1.1.0 results.",
];

/// Most specific first.
const RULES: &[Rule] = &[
    Rule {
        id: "rcni-already-attached",
        when: &[&["is already attached", "del that attachment"]],
        stage: Cause(Stage::Add),
        meaning: "ADD was called again for an attachment (network, container ID, interface) that already has a cached result; rcni refuses it so the live attachment is not destroyed.",
        next: &[
            "If the attachment is stale, run DEL for it first (rcni del NET NETNS), then ADD.",
            "If a runtime does this, it is retrying RunPodSandbox without tearing down: check its logs for the first failure.",
        ],
    },
    Rule {
        id: "ipam-exhausted",
        when: &[&["no ip addresses available"]],
        stage: Cause(Stage::Add),
        meaning: "The IPAM plugin (host-local) has no free address left in the range: every address has a lease file.",
        next: &[
            "List /var/lib/cni/networks/<network>/: each file is an address, its content the container ID holding it.",
            "Leases of pods that no longer exist are leaks (often a DEL that never ran): `rcni gc NET --valid CID:IFNAME ...` releases all but the listed ones.",
            "Otherwise the range is too small for the node: widen the subnet or the node's pod CIDR.",
        ],
    },
    Rule {
        id: "ipam-requested-ip-taken",
        when: &[&["requested ip address", "not available"]],
        stage: Cause(Stage::Add),
        meaning: "A specific address was requested (CNI_ARGS IP=, the ips capability or a static config) and another attachment already holds it.",
        next: &[
            "Find the holder: cat /var/lib/cni/networks/<network>/<ip>.",
            "If the holder is gone, DEL it or run GC so the lease is released.",
        ],
    },
    Rule {
        id: "ipam-duplicate",
        when: &[&["duplicate allocation"]],
        stage: Cause(Stage::Add),
        meaning: "The IPAM plugin was asked for an address it has already given to the same attachment or another one.",
        next: &["Check for two networks sharing one host-local dataDir and range, or a repeated ADD without DEL."],
    },
    Rule {
        id: "cni-not-initialized",
        when: &[&["cni plugin not initialized"]],
        stage: Cause(Stage::Status),
        meaning: "The runtime found no usable network config: containerd and CRI-O report NetworkReady=false until a valid .conf/.conflist is in the config directory and its plugins exist.",
        next: &[
            "ls /etc/cni/net.d (or the runtime's conf_dir): it needs at least one valid file; `rcni list` shows what loads and why the rest does not.",
            "On a cluster this is normal until the network DaemonSet has written its config; check that pod's logs.",
        ],
    },
    Rule {
        id: "no-networks-found",
        when: &[&["no networks found"]],
        stage: Cause(Stage::ConfigLoad),
        meaning: "The config directory has no file with a known extension (.conf, .conflist, .json) that parses.",
        next: &["`rcni list` names each file and the line and column where it fails."],
    },
    Rule {
        id: "network-plugin-not-ready",
        when: &[&["networkpluginnotready"]],
        stage: Cause(Stage::Status),
        meaning: "kubelet reports the node's network as not ready because the runtime's network status check failed (no config yet, or STATUS answered an error).",
        next: &[
            "Read the message after 'message:': it carries the runtime's reason.",
            "`rcni status NET` asks every plugin of the network directly.",
        ],
    },
    Rule {
        id: "plugin-not-found",
        when: &[&["failed to find plugin"]],
        stage: Wrapper,
        meaning: "A plugin type named in the config has no executable in any CNI_PATH directory.",
        next: &[
            "Install it in /opt/cni/bin (or the runtime's bin_dir); the name must equal the config's \"type\".",
            "`rcni validate NET` lists every plugin of the network and where it was looked for.",
        ],
    },
    // The runtime-side version errors of libcni 1.0-1.3 (the CNI library inside containerd,
    // CRI-O and podman's CNI backend): the plugins may have run fine, the runtime itself
    // refused their answer or the config. Before "cached result" and "error parsing
    // configuration", which match the same messages more loosely.
    Rule {
        id: "runtime-cached-result-version",
        when: &[&["failed to convert cached result to config version"]],
        stage: WrapperElse(Stage::Del),
        meaning: "The result cached when the attachment was added is in a version the runtime's CNI library cannot convert to the config's current cniVersion: the config's version changed while pods were attached.",
        next: &[
            "Put the config's cniVersion back until the pods added under the old one are gone, or let those pods be recreated.",
            "For one stuck attachment: remove its cache entry (/var/lib/cni/results/<network>-<container ID>-<ifname>) so DEL runs without prevResult.",
        ],
    },
    Rule {
        id: "runtime-result-version",
        when: &[
            &["unsupported cni result version"],
            &["result type supports", "but unmarshalled cniversion is"],
            &["no converter for cni result version"],
        ],
        stage: WrapperElse(Stage::Add),
        meaning: RUNTIME_RESULT_VERSION,
        next: RUNTIME_RESULT_VERSION_NEXT,
    },
    Rule {
        id: "runtime-plugin-lacks-config-version",
        when: &[&["does not support config version"]],
        stage: Cause(Stage::Version),
        meaning: "The runtime validated the network: it asked the plugin for VERSION, and the config's cniVersion is not in the plugin's list. The plugin binary is older than the config expects (or another binary sits under its name).",
        next: &[
            "`rcni version NET` lists what every plugin of the network supports; write a cniVersion all of them list.",
            "rcni-node writes only versions every installed plugin reports and refuses a --cni-version one of them lacks; with rcni's image, rerun its init container so the bin dir holds the plugins that came with the agent.",
        ],
    },
    Rule {
        id: "runtime-check-needs-0.4",
        when: &[&["does not support the check command"]],
        stage: Cause(Stage::Check),
        meaning: "CHECK exists from spec version 0.4.0; the runtime's CNI library refuses it for a config whose cniVersion is older.",
        next: &[
            "Raise the config's cniVersion to 0.4.0 or later if every plugin supports it (`rcni version NET`), or set \"disableCheck\": true in the conflist.",
        ],
    },
    Rule {
        id: "config-cniversions-invalid",
        when: &[&["error parsing configuration list", "cniversions"]],
        stage: Cause(Stage::ConfigLoad),
        meaning: "The conflist's \"cniVersions\" is not a list of version strings (X.Y.Z). libcni 1.2 and later reject the whole file, so the runtime sees no usable network; libcni 1.0 and 1.1 ignore the key.",
        next: &[
            "Fix the list (e.g. [\"0.4.0\", \"1.0.0\", \"1.1.0\"]); `rcni list` shows where the file fails to load.",
            "A conflist written by rcni-node always has a valid list: check that nothing else writes the file.",
        ],
    },
    Rule {
        id: "config-cniversion-invalid",
        when: &[
            &["error parsing configuration list", "invalid cniversion"],
            &["invalid version", "too many parts"],
            &["invalid version", "the version is empty"],
            &["failed to convert", "version part"],
        ],
        stage: WrapperElse(Stage::ConfigLoad),
        meaning: "The config's cniVersion is not a version string of the form X.Y.Z (a number, an empty string, \"1.0.0.1\", \"v1\"): the runtime's CNI library cannot compare it, and fails loading it or any operation that depends on the version.",
        next: &["Write a plain version the plugins list (`rcni version NET`), e.g. \"cniVersion\": \"1.0.0\"."],
    },
    Rule {
        id: "runtime-version-info-undecodable",
        when: &[&["decoding version info"]],
        stage: Cause(Stage::Version),
        meaning: "The runtime ran the plugin with CNI_COMMAND=VERSION and its answer is not a CNI version object (missing cniVersion or supportedVersions, or not JSON): the file under that name is not a CNI plugin, or it failed before answering.",
        next: &["Run it by hand: `echo '{}' | CNI_COMMAND=VERSION /opt/cni/bin/<type>`; it must print {\"cniVersion\":...,\"supportedVersions\":[...]}."],
    },
    Rule {
        id: "incompatible-versions",
        when: &[&["incompatible cni versions"]],
        stage: Cause(Stage::Version),
        meaning: "The config's cniVersion is not among the versions the plugin says it supports (its VERSION answer).",
        next: &[
            "Lower the config's cniVersion to one the plugin lists, or upgrade the plugin.",
            "`rcni version NET` shows every plugin's supported versions.",
        ],
    },
    Rule {
        id: "unknown-version",
        when: &[&["unsupported cni version"]],
        stage: Cause(Stage::Version),
        meaning: "A plugin refused the config's cniVersion (CNI error code 1).",
        next: &["`rcni version NET` shows which versions each plugin accepts."],
    },
    Rule {
        id: "config-no-plugins-key",
        when: &[&["no 'plugins' key"]],
        stage: Cause(Stage::ConfigLoad),
        meaning: "A .conflist file lacks its \"plugins\" array.",
        next: &["Fix the file; a single-plugin file should be named .conf instead."],
    },
    Rule {
        id: "config-json-syntax",
        when: &[&["error parsing configuration"]],
        stage: Cause(Stage::ConfigLoad),
        meaning: "A network config file is not valid JSON or not a valid CNI config.",
        next: &["`rcni list` prints file:line:column for each broken file."],
    },
    Rule {
        id: "cache-corrupt",
        when: &[&["cached result"]],
        stage: Wrapper,
        meaning: "libcni's result cache (/var/lib/cni/results) holds an entry that cannot be decoded, or none where one is needed.",
        next: &[
            "Look at /var/lib/cni/results/<network>-<container ID>-<ifname>; a truncated file is usually a runtime killed while writing it.",
            "DEL still works without it (rcni deletes an unreadable entry and runs DEL without prevResult).",
        ],
    },
    Rule {
        id: "netns-statfs",
        when: &[&["failed to statfs"]],
        stage: Wrapper,
        meaning: "The network namespace path the runtime passed (CNI_NETNS) does not exist any more, or is not a namespace file.",
        next: &[
            "On DEL this is normal after the sandbox died: the plugin must still clean up the host side and succeed.",
            "On ADD the sandbox's namespace vanished before networking was set up: check why the sandbox exited.",
        ],
    },
    Rule {
        id: "netns-missing",
        when: &[&["netns", "does not exist"]],
        stage: Wrapper,
        meaning: "The network namespace path (CNI_NETNS) does not exist.",
        next: &[
            "On DEL this is normal after the sandbox died; the host side must still be cleaned up.",
            "On ADD check why the sandbox's namespace disappeared (pause container exited, netns unmounted).",
        ],
    },
    Rule {
        id: "netns-not-a-namespace",
        when: &[&["not a network namespace"]],
        stage: Wrapper,
        meaning: "CNI_NETNS names a file that is not a network namespace (a regular file, a FIFO, another kind of namespace).",
        next: &["Check the path the runtime passed; namespace files live on nsfs (/proc/<pid>/ns/net, /run/netns/<name>)."],
    },
    Rule {
        id: "veth-name-exists",
        when: &[&["already exists"]],
        stage: Wrapper,
        meaning: "An interface of that name already exists: usually the container's interface (eth0) from an earlier ADD that was never deleted, or a clash with a host interface.",
        next: &[
            "ip -n <netns> link show: is eth0 already there? Then DEL the old attachment first.",
            "A repeated ADD without DEL is a runtime bug; with rcni the runtime refuses it before any plugin runs.",
        ],
    },
    Rule {
        id: "bridge-addr-mismatch",
        when: &[&["already has an ip address different from"]],
        stage: Cause(Stage::Add),
        meaning: "The bridge (e.g. cni0) carries a gateway address from an older config or pod CIDR; bridge refuses to add a second one.",
        next: &[
            "Compare `ip addr show cni0` with the config's subnet/gateway; after a pod CIDR change delete the bridge (no pods attached) so it is recreated.",
        ],
    },
    Rule {
        id: "xtables-lock",
        when: &[&["xtables lock"]],
        stage: Wrapper,
        meaning: "iptables could not take the xtables lock: another process (kube-proxy, a firewall daemon, another plugin) holds it.",
        next: &["Usually transient: the runtime retries. If persistent, find the holder of /run/xtables.lock."],
    },
    Rule {
        id: "iptables-failed",
        when: &[&["iptables"]],
        stage: Wrapper,
        meaning: "A plugin ran iptables (Go's portmap, firewall, bridge ipMasq) and it failed.",
        next: &[
            "Check which iptables the host uses (iptables -V: nf_tables or legacy) and that the nat/filter tables are usable.",
            "rcni's plugins use nf_tables over netlink instead and run no iptables program.",
        ],
    },
    Rule {
        id: "calico-nodename",
        when: &[&["/var/lib/calico/nodename"]],
        stage: Cause(Stage::Add),
        meaning: "Calico's plugin cannot find the node name calico-node writes on start: calico-node is not running (yet) on this node.",
        next: &["Check the calico-node pod on this node and its logs."],
    },
    Rule {
        id: "datastore-unauthorized",
        when: &[&["unauthorized"]],
        stage: Wrapper,
        meaning: "The plugin's datastore (the Kubernetes API for Calico, etcd for others) rejected its credentials.",
        next: &["Check the kubeconfig or token the plugin uses (e.g. /etc/cni/net.d/calico-kubeconfig) and that it has not expired."],
    },
    Rule {
        id: "flannel-subnet-env",
        when: &[&["subnet.env"]],
        stage: Cause(Stage::Add),
        meaning: "flannel's plugin reads /run/flannel/subnet.env, which the flannel daemon writes once it has leased the node's subnet; the daemon is not running or not ready.",
        next: &["Check the flannel pod on this node and its logs (etcd or API access, subnet lease)."],
    },
    Rule {
        id: "dhcp-daemon",
        when: &[&["dhcp", ".sock"]],
        stage: Wrapper,
        meaning: "The dhcp IPAM plugin could not reach its daemon's socket: the daemon is not running.",
        next: &["Start the dhcp daemon (Go: `dhcp daemon`; rcni: `rcni-plugins dhcp daemon`) and check its socket path."],
    },
    Rule {
        id: "plugin-timeout",
        when: &[&["did not finish within"]],
        stage: Wrapper,
        meaning: "rcni's runtime killed a plugin (and its whole process group) that ran past the operation's timeout.",
        next: &["Find what the plugin waits for (a datastore, a lock, a DHCP server); raise --timeout only once that is understood."],
    },
    Rule {
        id: "deadline",
        when: &[&["deadline exceeded"]],
        stage: Wrapper,
        meaning: "The runtime's own timeout for the network call ran out (containerd and CRI-O bound each CNI call).",
        next: &["Look at the plugin's logs for what it was waiting on; a slow IPAM or datastore is the usual cause."],
    },
    Rule {
        id: "plugin-killed",
        when: &[&["signal: killed"]],
        stage: Wrapper,
        meaning: "The plugin process was killed (a timeout, or the out-of-memory killer).",
        next: &["Check dmesg for the OOM killer; otherwise the runtime's timeout."],
    },
    Rule {
        id: "plugin-no-message",
        when: &[&["netplugin failed with no error message"]],
        stage: Wrapper,
        meaning: "The plugin exited non-zero without printing a CNI error object: it crashed or was killed.",
        next: &["Run the same operation by hand (`rcni add`/`rcni del` with the same network) to see its stderr."],
    },
    Rule {
        id: "missing-env",
        when: &[&["env variable missing"]],
        stage: Wrapper,
        meaning: "The plugin was run without a required CNI_* variable: a runtime or wrapper bug, not a network problem.",
        next: &["Check the invoking runtime's version and any wrapper scripts around the plugin."],
    },
    Rule {
        id: "ifname-invalid",
        when: &[&["interface name"]],
        stage: Cause(Stage::Add),
        meaning: "CNI_IFNAME is not a valid Linux interface name (empty, over 15 bytes, or with '/', ':' or spaces).",
        next: &["Check the interface name the runtime or a multi-network annotation asks for."],
    },
    Rule {
        id: "permission-denied",
        when: &[&["permission denied"]],
        stage: Wrapper,
        meaning: "The plugin lacked a privilege or file access it needs (not root, a read-only /var/lib/cni, an LSM denial).",
        next: &["Check that the runtime runs plugins as root, that /var/lib/cni and /run are writable, and the audit log for SELinux/AppArmor denials."],
    },
];

/// Fragments of the runtime's wrappers that tell the stage when the cause does not, innermost
/// (libcni's own `failed (<op>)`) first: the first one present decides.
const STAGE_MARKERS: &[(&str, Stage)] = &[
    ("failed (add)", Stage::Add),
    ("failed (delete)", Stage::Del),
    ("failed (check)", Stage::Check),
    ("failed (status)", Stage::Status),
    ("failed (gc)", Stage::Gc),
    ("failed (version)", Stage::Version),
    ("failed to setup network", Stage::Add),
    ("failed to set up sandbox container", Stage::Add),
    ("failed to set up pod", Stage::Add),
    ("error adding pod", Stage::Add),
    ("rcni: add failed", Stage::Add),
    ("failed to destroy network", Stage::Del),
    ("failed to teardown pod", Stage::Del),
    ("error removing pod", Stage::Del),
    ("killpodsandbox", Stage::Del),
    ("stoppodsandbox", Stage::Del),
    ("rcni: del failed", Stage::Del),
    ("rcni: check failed", Stage::Check),
    ("networkready=false", Stage::Status),
    ("garbage collect", Stage::Gc),
    // kubelet's outermost wrapper, also around a cleanup's DEL failure: the last resort.
    ("failed to create pod sandbox", Stage::Add),
];

/// What the explanation found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The matched rule, or `None` when no rule knows the message.
    pub cause: Option<&'static str>,
    pub stage: Option<Stage>,
    pub meaning: String,
    pub next: Vec<String>,
    /// The plugin type named by libcni's `plugin type="..."`.
    pub plugin: Option<String>,
    /// The CNI error code, when the message carries one.
    pub code: Option<u32>,
}

/// Classifies `message`.
pub fn explain(message: &str) -> Explanation {
    let lower = message.to_lowercase();
    let rule = RULES.iter().find(|r| r.matches(&lower));
    let marked = STAGE_MARKERS
        .iter()
        .find(|(m, _)| lower.contains(m))
        .map(|(_, s)| *s);
    let code = error_code(&lower);
    let stage = match rule.map(|r| r.stage) {
        Some(Cause(stage)) => Some(stage),
        Some(WrapperElse(usual)) => marked.or(Some(usual)),
        Some(Wrapper) | None => marked.or_else(|| code.and_then(stage_of_code)),
    };
    match rule {
        Some(r) => Explanation {
            cause: Some(r.id),
            stage,
            meaning: r.meaning.to_string(),
            next: r.next.iter().map(|s| s.to_string()).collect(),
            plugin: plugin_type(message),
            code,
        },
        None => Explanation {
            cause: None,
            stage,
            meaning: code.map(code_meaning).unwrap_or("no known cause matches this message").to_string(),
            next: vec![
                "Run the same operation with rcni (`rcni add|del|check NET NETNS`) to see the plugin's own error and stderr.".into(),
            ],
            plugin: plugin_type(message),
            code,
        },
    }
}

/// `plugin type="bridge"` as libcni writes it.
fn plugin_type(message: &str) -> Option<String> {
    let start = message.find("plugin type=\"")? + "plugin type=\"".len();
    let len = message[start..].find('"')?;
    Some(message[start..start + len].to_string())
}

/// A CNI error code: `"code":N` in a JSON error, or rcni's `CNI error code N`.
fn error_code(lower: &str) -> Option<u32> {
    for marker in ["\"code\":", "\"code\": ", "cni error code "] {
        if let Some(at) = lower.find(marker) {
            let digits: String = lower[at + marker.len()..]
                .chars()
                .skip_while(|c| *c == ' ')
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(code) = digits.parse() {
                return Some(code);
            }
        }
    }
    None
}

fn stage_of_code(code: u32) -> Option<Stage> {
    match code {
        1 => Some(Stage::Version),
        50 | 51 => Some(Stage::Status),
        _ => None,
    }
}

/// The spec's meaning of the well-known codes.
fn code_meaning(code: u32) -> &'static str {
    match code {
        1 => "CNI error 1: incompatible CNI version",
        2 => "CNI error 2: unsupported field in the network configuration",
        3 => "CNI error 3: container unknown or does not exist",
        4 => "CNI error 4: invalid necessary environment variables (CNI_COMMAND, CNI_CONTAINERID, ...)",
        5 => "CNI error 5: I/O failure",
        6 => "CNI error 6: failed to decode content",
        7 => "CNI error 7: invalid network config",
        11 => "CNI error 11: try again later (a transient condition such as a held lock)",
        50 => "CNI error 50: the plugin is not available (STATUS)",
        51 => "CNI error 51: the plugin is not available, existing containers may be damaged (STATUS)",
        100.. => "a plugin-specific CNI error (codes from 100 are the plugin's own)",
        _ => "a CNI error with a reserved code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (message as seen in kubelet events or runtime logs, expected cause, expected stage)
    const CASES: &[(&str, &str, Stage)] = &[
        (r#"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "7f1e": plugin type="bridge" name="cbr0" failed (add): failed to allocate for range 0: no IP addresses available in range set: 198.18.0.1-198.18.0.254"#, "ipam-exhausted", Stage::Add),
        (r#"failed to destroy network for sandbox "7f1e": plugin type="portmap" failed (delete): could not teardown ipv4 dnat: running [/usr/sbin/iptables -t nat -X CNI-DN-1234 --wait]: exit status 1: iptables: No chain/target/match by that name."#, "iptables-failed", Stage::Del),
        ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized", "cni-not-initialized", Stage::Status),
        ("Container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin is not ready: cni config uninitialized", "network-plugin-not-ready", Stage::Status),
        (r#"failed to setup network for sandbox "abc": failed to find plugin "flannel" in path [/opt/cni/bin]"#, "plugin-not-found", Stage::Add),
        (r#"plugin type="bridge" failed (check): failed to find plugin "host-local" in path [/opt/cni/bin]"#, "plugin-not-found", Stage::Check),
        (r#"incompatible CNI versions; config is "1.1.0", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" "0.4.0"]"#, "incompatible-versions", Stage::Version),
        (r#"failed to setup network for sandbox "x": plugin type="calico" failed (add): stat /var/lib/calico/nodename: no such file or directory: check that the calico/node container is running and has mounted /var/lib/calico/"#, "calico-nodename", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="calico" failed (add): error getting ClusterInformation: connection is unauthorized: Unauthorized"#, "datastore-unauthorized", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="flannel" failed (add): loadFlannelSubnetEnv failed: open /run/flannel/subnet.env: no such file or directory"#, "flannel-subnet-env", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="bridge" failed (add): failed to set bridge addr: "cni0" already has an IP address different from 198.18.1.1/24"#, "bridge-addr-mismatch", Stage::Add),
        (r#"failed to destroy network for sandbox "x": plugin type="bridge" failed (delete): failed to Statfs "/var/run/netns/cni-1234": no such file or directory"#, "netns-statfs", Stage::Del),
        (r#"networkPlugin cni failed to set up pod "web_default" network: failed to Statfs "/proc/4242/ns/net": no such file or directory"#, "netns-statfs", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="ptp" failed (add): netns "/run/netns/gone" does not exist"#, "netns-missing", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="bridge" failed (add): container veth name provided (eth0) already exists"#, "veth-name-exists", Stage::Add),
        (r#"failed to destroy network for sandbox "x": failed to get network "cbr0" cached result: decoding version from network config: unexpected end of JSON input"#, "cache-corrupt", Stage::Del),
        (r#"plugin type="macvlan" failed (add): interface name "eth0/1" is not valid: it contains '/'"#, "ifname-invalid", Stage::Add),
        (r#"plugin type="portmap" failed (add): failed to open iptables: Another app is currently holding the xtables lock. Perhaps you want to use the -w option?"#, "xtables-lock", Stage::Add),
        (r#"failed to destroy network for sandbox "x": netplugin failed with no error message: signal: killed"#, "plugin-killed", Stage::Del),
        (r#"failed to setup network for sandbox "x": netplugin failed with no error message"#, "plugin-no-message", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="bridge" failed (add): failed to allocate for range 0: requested IP address 198.18.0.5 is not available in range set 198.18.0.1-198.18.0.254"#, "ipam-requested-ip-taken", Stage::Add),
        (r#"plugin type="bridge" failed (add): failed to set up IPAM plugin type "dhcp": error dialing DHCP daemon: dial unix /run/cni/dhcp.sock: connect: no such file or directory"#, "dhcp-daemon", Stage::Add),
        (r#"plugin type="bridge" failed (add): failed to allocate for range 0: 198.18.0.5 has been allocated to c1, duplicate allocation is not allowed"#, "ipam-duplicate", Stage::Add),
        ("error parsing configuration list: no 'plugins' key", "config-no-plugins-key", Stage::ConfigLoad),
        ("/etc/cni/net.d/10-x.conflist:3:5: error parsing configuration: expected value", "config-json-syntax", Stage::ConfigLoad),
        ("no networks found in /etc/cni/net.d", "no-networks-found", Stage::ConfigLoad),
        (r#"rcni: add failed: network "rep": container "c1" interface "eth0" is already attached (its result is cached in /var/lib/cni/results/rep-c1-eth0); DEL that attachment before adding it again"#, "rcni-already-attached", Stage::Add),
        (r#"rcni: del failed: plugin type="bridge" failed (delete, exec): plugin bridge did not finish within 60s and was killed"#, "plugin-timeout", Stage::Del),
        (r#"failed to destroy network for sandbox "x": plugin type="bridge" failed (delete): context deadline exceeded"#, "deadline", Stage::Del),
        (r#"plugin type="loopback" failed (add): CNI_COMMAND env variable missing"#, "missing-env", Stage::Add),
        (r#"plugin type="bridge" failed (add): /run/netns/x is not a network namespace"#, "netns-not-a-namespace", Stage::Add),
        (r#"failed to setup network for sandbox "x": plugin type="host-local" failed (add): open /var/lib/cni/networks/cbr0/last_reserved_ip.0: permission denied"#, "permission-denied", Stage::Add),
        (r#"plugin type="tuning" failed (add): unsupported CNI version "9.9.9""#, "unknown-version", Stage::Version),
        // The runtime-side version errors of libcni 1.0-1.3, bare, as go-cni wraps them and as
        // containerd and kubelet wrap those.
        (r#"unsupported CNI result version "1.1.0""#, "runtime-result-version", Stage::Add),
        (r#"plugin type="bridge" failed (add): unsupported CNI result version "1.1.0""#, "runtime-result-version", Stage::Add),
        (r#"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "5d0c9e": plugin type="bridge" name="rcni" failed (add): unsupported CNI result version "1.1.0""#, "runtime-result-version", Stage::Add),
        (r#"failed to destroy network for sandbox "5d0c9e": failed to get network "rcni" cached result: unsupported CNI result version "1.2.0""#, "runtime-result-version", Stage::Del),
        (r#"result type supports [1.0.0] but unmarshalled CNIVersion is "1.1.0""#, "runtime-result-version", Stage::Add),
        (r#"plugin type="bridge" failed (add): no converter for CNI result version 1.1.0 to 0.2.0"#, "runtime-result-version", Stage::Add),
        (r#"failed to get network "rcni" cached result: failed to convert cached result to config version "0.2.0": no converter for CNI result version 1.1.0 to 0.2.0"#, "runtime-cached-result-version", Stage::Del),
        (r#"rpc error: code = Unknown desc = failed to setup network for sandbox "x": failed to get network "rcni" cached result: failed to convert cached result to config version "0.2.0": no converter for CNI result version 1.1.0 to 0.2.0"#, "runtime-cached-result-version", Stage::Add),
        (r#"plugin bridge does not support config version "1.1.0""#, "runtime-plugin-lacks-config-version", Stage::Version),
        (r#"failed to setup network for sandbox "x": plugin portmap does not support config version "1.1.0""#, "runtime-plugin-lacks-config-version", Stage::Version),
        (r#"configuration version "0.3.1" does not support the CHECK command"#, "runtime-check-needs-0.4", Stage::Check),
        (r#"cni config load failed: failed to load CNI config list file /etc/cni/net.d/10-rcni.conflist: error parsing configuration list: invalid cniVersions entry 1.x at index 2: failed to convert minor version part "x": strconv.Atoi: parsing "x": invalid syntax"#, "config-cniversions-invalid", Stage::ConfigLoad),
        (r#"error parsing configuration list: invalid type for cniVersions index 0: float64"#, "config-cniversions-invalid", Stage::ConfigLoad),
        (r#"error parsing configuration list: invalid type for cniVersions: []interface {}"#, "config-cniversions-invalid", Stage::ConfigLoad),
        (r#"error parsing configuration list: invalid cniVersion type float64"#, "config-cniversion-invalid", Stage::ConfigLoad),
        (r#"error parsing configuration list: invalid cniVersion 1.0.0.1: invalid version "1.0.0.1": too many parts"#, "config-cniversion-invalid", Stage::ConfigLoad),
        (r#"failed to destroy network for sandbox "x": invalid version "1.0.0.1": too many parts"#, "config-cniversion-invalid", Stage::Del),
        (r#"invalid version "": the version is empty"#, "config-cniversion-invalid", Stage::ConfigLoad),
        (r#"failed to convert major version part "v1": strconv.Atoi: parsing "v1": invalid syntax"#, "config-cniversion-invalid", Stage::ConfigLoad),
        (r#"decoding version info: missing field supportedVersions"#, "runtime-version-info-undecodable", Stage::Version),
    ];

    #[test]
    fn real_message_shapes_land_in_their_stage() {
        assert!(CASES.len() >= 25);
        for (msg, cause, stage) in CASES {
            let e = explain(msg);
            assert_eq!(e.cause, Some(*cause), "{msg}");
            assert_eq!(e.stage, Some(*stage), "{msg}");
            assert!(!e.next.is_empty(), "{msg}");
        }
    }

    #[test]
    fn every_rule_is_reachable_by_some_case() {
        for r in RULES {
            assert!(
                CASES.iter().any(|(_, c, _)| c == &r.id),
                "rule {} has no test case",
                r.id
            );
        }
    }

    /// The failure a new cluster hits first: containerd 1.6's libcni reading a 1.1.0 result. The answer
    /// says it is the runtime's side and names every way out.
    #[test]
    fn a_result_too_new_for_the_runtime_says_what_to_change() {
        let e = explain(
            r#"failed to setup network for sandbox "5d0c9e": plugin type="bridge" failed (add): unsupported CNI result version "1.1.0""#,
        );
        assert_eq!(e.plugin.as_deref(), Some("bridge"));
        assert!(e.meaning.contains("runtime's CNI library"), "{}", e.meaning);
        let next = e.next.join("\n");
        for fix in ["cniVersions", "--cni-version 1.0.0", "containerd 2.x"] {
            assert!(next.contains(fix), "{fix} missing from {next}");
        }
    }

    /// A plugin refusing the config's version is the plugin's side, not the runtime's.
    #[test]
    fn a_plugin_refusing_the_version_is_not_taken_for_the_runtime() {
        for msg in [
            r#"plugin type="tuning" failed (add): unsupported CNI version "9.9.9""#,
            r#"incompatible CNI versions; config is "1.1.0", plugin supports ["0.4.0" "1.0.0"]"#,
        ] {
            let cause = explain(msg).cause.unwrap();
            assert!(!cause.starts_with("runtime-"), "{msg}: {cause}");
        }
    }

    #[test]
    fn plugin_and_code_are_extracted() {
        let e = explain(
            r#"plugin type="bridge" name="x" failed (add): {"cniVersion":"1.0.0","code":11,"msg":"busy"}"#,
        );
        assert_eq!(e.plugin.as_deref(), Some("bridge"));
        assert_eq!(e.code, Some(11));
        assert_eq!(e.stage, Some(Stage::Add));
        assert_eq!(e.cause, None);
        assert!(e.meaning.contains("try again later"), "{}", e.meaning);
    }

    #[test]
    fn status_codes_place_an_unknown_message_in_status() {
        let e = explain("rcni: status failed: the datastore is down\n  CNI error code 50 (plugin not available)");
        assert_eq!(e.stage, Some(Stage::Status));
        assert_eq!(e.code, Some(50));
    }

    #[test]
    fn an_unknown_message_says_so() {
        let e = explain("something entirely different");
        assert_eq!(e.cause, None);
        assert_eq!(e.stage, None);
        assert!(e.meaning.contains("no known cause"));
    }
}
