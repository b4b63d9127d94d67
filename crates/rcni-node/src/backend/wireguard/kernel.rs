//! The kernel implementation: a `wireguard` link per device (`ip link add … type wireguard`),
//! configured over generic netlink. The kernel keeps the device, its peers and sessions while
//! the agent restarts; nothing needs supervising.

use cni_linux::rtnl::link_add::LinkAdd;
use cni_linux::wireguard::genl::{Genl, KernelDevice};
use cni_linux::Handle;

use super::super::{nl_err, BackendError};

/// The kernel's `IFLA_INFO_KIND` of a WireGuard link.
const KIND: &str = "wireguard";

/// Whether this kernel has WireGuard (its generic netlink family resolves, which also loads the
/// module where it is one); the reason when it has not.
pub fn available() -> Result<(), String> {
    Genl::open().map(|_| ()).map_err(|e| e.to_string())
}

/// Makes sure the WireGuard link `name` exists (kept when it does, made with `mtu` when not, a
/// link of that name of another kind replaced); returns its index and whether it was made now
/// (it has no configuration yet).
pub fn ensure_link(nl: &mut Handle, name: &str, mtu: u32) -> Result<(u32, bool), BackendError> {
    match nl.link_by_name(name) {
        Ok(link) if link.kind.as_deref() == Some(KIND) => return Ok((link.index, false)),
        Ok(link) => {
            log::info!(
                "{name} is a {} link, not a WireGuard one: replacing it",
                link.kind.as_deref().unwrap_or("plain")
            );
            nl.delete_link(link.index)
                .map_err(nl_err(format!("delete {name}")))?;
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(nl_err(format!("look up {name}"))(e)),
    }
    nl.add_link(&LinkAdd::wireguard(name).mtu(mtu))
        .map_err(|e| {
            if e.errno() == Some(libc::EOPNOTSUPP) {
                BackendError::Setup(format!(
                    "cannot create {name}: this kernel has no WireGuard (the wireguard module)"
                ))
            } else {
                nl_err(format!("create {name}"))(e)
            }
        })?;
    let link = nl
        .link_by_name(name)
        .map_err(nl_err(format!("look up {name}")))?;
    Ok((link.index, true))
}

/// The configuration interface of the link with `index`.
pub fn control(index: u32) -> Result<KernelDevice, BackendError> {
    let genl = Genl::open().map_err(|e| BackendError::Setup(format!("wireguard: {e}")))?;
    Ok(KernelDevice::new(genl, index))
}
