//! The agent's WireGuard flags (used only when the network's backend is `wireguard`), and the
//! `rcni-node rotate-wireguard-key` command.

use std::path::{Path, PathBuf};

/// Which implementation runs the devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Implementation {
    /// The kernel's (the `wireguard` module); the agent refuses to start without it.
    Kernel,
    /// wireguard-go, supervised by the agent.
    Userspace,
    /// The kernel's where it exists, else wireguard-go.
    Auto,
}

/// The WireGuard flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WireguardOptions {
    /// WireGuard backend: which implementation runs the devices (logged at start).
    #[arg(long, value_enum, default_value_t = Implementation::Auto)]
    pub wireguard_implementation: Implementation,
    /// WireGuard backend: the node's private key (base64, mode 0600), generated on first
    /// start [default: <state-dir>/wireguard/private.key]. `rcni-node rotate-wireguard-key`
    /// replaces it; the running agent follows it.
    #[arg(long, value_name = "FILE")]
    pub wireguard_key_file: Option<PathBuf>,
    /// WireGuard backend: a preshared key (base64, `wg genpsk`) every peer gets, e.g. from a
    /// Kubernetes Secret; followed while the agent runs. Not together with the config's `PSK`.
    #[arg(long, value_name = "FILE")]
    pub wireguard_psk_file: Option<PathBuf>,
    /// WireGuard backend: the userspace implementation's program.
    #[arg(long, value_name = "PATH", default_value = "wireguard-go")]
    pub wireguard_go: PathBuf,
}

impl Default for WireguardOptions {
    fn default() -> Self {
        WireguardOptions {
            wireguard_implementation: Implementation::Auto,
            wireguard_key_file: None,
            wireguard_psk_file: None,
            wireguard_go: PathBuf::from("wireguard-go"),
        }
    }
}

/// The backend's directory under the agent's state directory (key, status, logs).
pub fn state_dir(agent_state_dir: &Path) -> PathBuf {
    agent_state_dir.join("wireguard")
}

impl WireguardOptions {
    /// The key file: the flag, else `<state-dir>/wireguard/private.key`.
    pub fn key_file(&self, agent_state_dir: &Path) -> PathBuf {
        self.wireguard_key_file
            .clone()
            .unwrap_or_else(|| state_dir(agent_state_dir).join("private.key"))
    }
}

/// `rcni-node rotate-wireguard-key`: a new private key for the node's WireGuard devices.
#[derive(Debug, clap::Parser)]
#[command(
    name = "rotate-wireguard-key",
    bin_name = "rcni-node rotate-wireguard-key"
)]
pub struct RotateKey {
    /// The agent's state directory (the key is <state-dir>/wireguard/private.key).
    #[arg(long, default_value = "/run/rcni")]
    pub state_dir: PathBuf,
    /// The key file, when the agent runs with --wireguard-key-file.
    #[arg(long, value_name = "FILE")]
    pub wireguard_key_file: Option<PathBuf>,
}

impl RotateKey {
    /// Writes a new key where the agent reads it; prints the new public key. The running
    /// agent puts it on its devices and publishes it in its lease within a second.
    pub fn run(&self) -> Result<(), super::keys::KeyError> {
        let path = WireguardOptions {
            wireguard_key_file: self.wireguard_key_file.clone(),
            ..WireguardOptions::default()
        }
        .key_file(&self.state_dir);
        let public = super::keys::rotate(&path)?;
        println!("{public}");
        Ok(())
    }
}
