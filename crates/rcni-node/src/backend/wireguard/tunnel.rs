//! One WireGuard device of the node, whichever implementation runs it: its link, its
//! configuration interface and, for the userspace implementation, its process. Opening one
//! makes what is missing and keeps what runs; [`Tunnel::upkeep`] puts back a device or a
//! process that went away.

use std::path::PathBuf;

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::wireguard::uapi::{socket_path, UserspaceDevice};
use cni_linux::wireguard::DeviceControl;
use cni_linux::Handle;

use super::layout::DeviceSpec;
use super::userspace::{ensure_tun, GoProcess};
use super::{kernel, userspace};
use crate::backend::{nl_err, BackendError};

/// Which implementation runs the devices.
#[derive(Debug, Clone)]
pub enum Engine {
    /// The kernel's.
    Kernel,
    /// wireguard-go, supervised.
    Userspace {
        /// The program.
        binary: PathBuf,
        /// Where its logs go.
        log_dir: PathBuf,
    },
}

impl Engine {
    /// `kernel` or `userspace`.
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Kernel => "kernel",
            Engine::Userspace { .. } => "userspace",
        }
    }

    /// Opens the device `spec`, making its link (and starting its process) where missing;
    /// `true` when the device is new and so has no configuration.
    pub fn open(&self, nl: &mut Handle, spec: DeviceSpec) -> Result<(Tunnel, bool), BackendError> {
        let (tunnel, fresh) = match self {
            Engine::Kernel => {
                let (index, fresh) = kernel::ensure_link(nl, spec.name, spec.mtu)?;
                let control = Box::new(kernel::control(index)?);
                (Tunnel::new(spec, index, control, None), fresh)
            }
            Engine::Userspace { binary, log_dir } => {
                let index = userspace::ensure_tun(nl, spec.name)?;
                let (process, started) = GoProcess::adopt_or_start(spec.name, binary, log_dir)?;
                let control = Box::new(UserspaceDevice::new(socket_path(spec.name)));
                (Tunnel::new(spec, index, control, Some(process)), started)
            }
        };
        tunnel.set_link(nl)?;
        Ok((tunnel, fresh))
    }
}

/// One open device.
pub struct Tunnel {
    /// What it is.
    pub spec: DeviceSpec,
    /// Its interface index.
    pub index: u32,
    /// Its configuration interface.
    pub control: Box<dyn DeviceControl>,
    /// Its wireguard-go, for the userspace implementation.
    pub process: Option<GoProcess>,
}

impl Tunnel {
    fn new(
        spec: DeviceSpec,
        index: u32,
        control: Box<dyn DeviceControl>,
        process: Option<GoProcess>,
    ) -> Self {
        Tunnel {
            spec,
            index,
            control,
            process,
        }
    }

    /// Gives the link its MTU and sets it up.
    fn set_link(&self, nl: &mut Handle) -> Result<(), BackendError> {
        let name = self.spec.name;
        let link = nl
            .link_by_index(self.index)
            .map_err(nl_err(format!("look up {name}")))?;
        if link.mtu != self.spec.mtu {
            nl.change_link(&LinkChange::of(self.index).mtu(self.spec.mtu))
                .map_err(nl_err(format!("set the MTU of {name}")))?;
        }
        if !link.up {
            nl.change_link(&LinkChange::of(self.index).up())
                .map_err(nl_err(format!("set {name} up")))?;
        }
        Ok(())
    }

    /// Whether the link is still the one this tunnel opened.
    fn link_present(&self, nl: &mut Handle) -> Result<bool, BackendError> {
        match nl.link_by_name(self.spec.name) {
            Ok(link) => Ok(link.index == self.index),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(nl_err(format!("look up {}", self.spec.name))(e)),
        }
    }

    /// Puts back the link or the process when one went away; `true` when it did (the device
    /// has lost its configuration, peers and addresses included).
    pub fn upkeep(&mut self, nl: &mut Handle) -> Result<bool, BackendError> {
        let name = self.spec.name;
        let link_present = self.link_present(nl)?;
        match self.process.as_mut() {
            Some(process) => {
                let why = match (link_present, process.running()) {
                    (true, Ok(())) => return Ok(false),
                    (false, _) => format!("the tun device {name} is gone"),
                    (true, Err(why)) => why,
                };
                log::warn!("{name}: {why}: starting wireguard-go again");
                self.index = ensure_tun(nl, name)?;
                process.restart()?;
            }
            None if link_present => return Ok(false),
            None => {
                log::warn!("{name}: the WireGuard link is gone: making it again");
                let (index, _) = kernel::ensure_link(nl, name, self.spec.mtu)?;
                self.index = index;
                self.control = Box::new(kernel::control(index)?);
            }
        }
        self.set_link(nl)?;
        Ok(true)
    }
}
