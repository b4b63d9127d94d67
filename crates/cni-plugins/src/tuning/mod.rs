//! tuning (Go: containernetworking/plugins `plugins/meta/tuning/tuning.go`): a chained plugin that
//! writes network sysctls in the container namespace and changes the MAC, promiscuous mode, MTU,
//! all-multicast mode and transmit queue length of `CNI_IFNAME`, saving the old link attributes
//! first so DEL can put them back.
//!
//! - [`conf`]: keys, `args.cni` overrides, MAC precedence; [`sysctl`]: key to file, the
//!   `/proc/sys/net/` restriction, the allowlist; [`backup`]: the Go-compatible backup file.
//! - ADD needs `prevResult` and returns it, with the new MAC on the interfaces named
//!   `CNI_IFNAME`. DEL restores the backup and fails, as Go's does, when the link is there but
//!   the backup cannot be read or applied (the file stays for a retry). CHECK is as strict as
//!   Go's (`promisc: false` requires promiscuous mode off). STATUS is a no-op, as in Go.
//! - GC removes this network's backups (and a killed ADD's temp files) of attachments not in
//!   the valid list (Go: a no-op); backups Go wrote carry no owner and stay.
//!
//! Deliberate differences from the Go plugin:
//! - invalid input is code 7 (Go: 999): a key outside `/proc/sys/net/`, a duplicated or
//!   disallowed key, a value of the wrong type, a missing `prevResult`; every key is checked
//!   before anything is written;
//! - a failed ADD undoes what it did (sysctls, link attributes, the backup file);
//! - a null `sysctl` with `args.cni.sysctl` set works (Go panics);
//! - DEL fails on a config every command refuses (a known key of the wrong type, as in Go),
//!   never on CNI_ARGS, and drops the backup file when there is nothing left to restore it to
//!   (netns gone or not a network namespace, interface gone), even when it does not decode
//!   (Go leaves it behind or fails);
//! - backups are written through an attributable temp file (`O_EXCL|O_NOFOLLOW`) in a
//!   directory checked for owner and mode, and carry an extra `rcniOwner` key (see [`backup`]);
//! - MACs are compared as addresses and reported in the kernel's lower-case form (Go compares
//!   strings, so an upper-case MAC fails its CHECK); only 6-byte MACs are accepted;
//! - CHECK compares multi-value sysctls field by field (`tcp_rmem` reads back tab-separated);
//! - the backup directory is created 0700 (Go: 0600).

pub mod backup;
pub mod conf;
pub mod sysctl;

use std::path::Path;

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{Handle, NetlinkError, NsError};
use cni_plugin::{CmdArgs, Plugin, ResultExt, Undo};
use cni_types::{CniError, CniResult};

use crate::netns::{self, Opened};
use backup::{Backup, Saved};
use cni_attribution::AttachmentId;
use conf::TuningConf;
use sysctl::SysctlTarget;

/// The tuning plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tuning;

fn internal(msg: impl Into<String>) -> CniError {
    CniError::internal(msg)
}

fn ns_error(e: NsError) -> CniError {
    CniError::invalid_netns(format!("tuning: cannot enter the container namespace: {e}"))
}

fn link_error(what: &str, ifname: &str, e: NetlinkError) -> CniError {
    internal(format!("tuning: failed to {what} of {ifname:?}: {e}"))
}

/// Parsed config and resolved sysctl files: everything ADD and CHECK check before acting.
struct Request {
    conf: TuningConf,
    sysctls: Vec<(SysctlTarget, String)>,
    prev: CniResult,
}

impl Request {
    fn parse(args: &CmdArgs) -> Result<Request, CniError> {
        let conf = TuningConf::parse(&args.conf, &args.stdin, &args.cni_args()?)?;
        if args.ifname.contains('/') {
            return Err(CniError::invalid_environment(format!(
                "Interface name ({}) contains an invalid character /",
                args.ifname
            )));
        }
        let sysctls = conf
            .sysctl
            .iter()
            .map(|(k, v)| Ok((sysctl::resolve(k, &args.ifname)?, v.clone())))
            .collect::<Result<_, CniError>>()?;
        let prev = args
            .prev_result
            .clone()
            .ok_or_else(|| CniError::invalid_config("tuning: Required prevResult missing"))?;
        Ok(Request {
            conf,
            sysctls,
            prev,
        })
    }
}

/// ADD inside the container namespace: sysctls, then the backup, then the link attributes.
/// Every step registers its undo, so a failure leaves things as they were.
fn apply(
    req: &Request,
    ifname: &str,
    owner: &AttachmentId,
    backup_file: &Path,
) -> Result<(), CniError> {
    // A backup of this attachment means it is tuned already (or a killed ADD left it): a
    // second ADD would overwrite the original values with the tuned ones and its undo would
    // remove the first ADD's backup. Refused before anything changes; DEL comes first.
    if req.conf.changes_link() && backup_file.exists() {
        return Err(CniError::invalid_environment(format!(
            "tuning: {} already exists: this container interface is tuned already; DEL it before adding it again",
            backup_file.display()
        )));
    }
    let mut undo = Undo::new();
    for (target, value) in &req.sysctls {
        // Write-only keys (e.g. route/flush) cannot be read back, so they have no undo.
        let old = cni_linux::sysctl::read(&target.name).ok();
        cni_linux::sysctl::write(&target.name, value)
            .map_err(|e| internal(format!("tuning: {e}")))?;
        if let Some(old) = old {
            let name = target.name.clone();
            undo.push(format!("sysctl {}", target.path.display()), move || {
                cni_linux::sysctl::write(&name, &old).map_err(|e| e.to_string())
            });
        }
    }
    let conf = &req.conf;
    if conf.changes_link() {
        let mut h = Handle::new().or_internal("tuning: netlink in the container")?;
        let link = h
            .link_by_name(ifname)
            .map_err(|e| link_error("get the link", ifname, e))?;
        let saved = Backup::of(&link, conf, owner);
        backup::write(backup_file, &saved).map_err(|e| {
            CniError::io(format!(
                "tuning: failed to save {}: {e}",
                backup_file.display()
            ))
        })?;
        let index = link.index;
        let file = backup_file.to_path_buf();
        undo.push("link attributes and backup file", move || {
            let mut h = Handle::new().map_err(|e| e.to_string())?;
            let errors = saved.restore(&mut h, index);
            let removed = backup::remove(&file).map_err(|e| e.to_string());
            match errors.is_empty() {
                true => removed,
                false => Err(errors.join("; ")),
            }
        });
        if let Some(mac) = conf.mac {
            h.change_link(&LinkChange::of(index).mac(mac))
                .map_err(|e| link_error("set the MAC address", ifname, e))?;
        }
        if conf.promisc {
            h.change_link(&LinkChange::of(index).promisc(true))
                .map_err(|e| link_error("set promiscuous mode", ifname, e))?;
        }
        if let Some(mtu) = conf.mtu {
            h.change_link(&LinkChange::of(index).mtu(mtu))
                .map_err(|e| link_error("set the MTU", ifname, e))?;
        }
        if let Some(on) = conf.allmulti {
            h.change_link(&LinkChange::of(index).allmulti(on))
                .map_err(|e| link_error("set all-multicast mode", ifname, e))?;
        }
        if let Some(len) = conf.tx_qlen {
            h.change_link(&LinkChange::of(index).txqlen(len))
                .map_err(|e| link_error("set the transmit queue length", ifname, e))?;
        }
    }
    undo.commit();
    Ok(())
}

/// CHECK inside the container namespace: every sysctl and link attribute as configured.
fn verify(req: &Request, ifname: &str) -> Result<(), CniError> {
    for (target, want) in &req.sysctls {
        let have =
            cni_linux::sysctl::read(&target.name).map_err(|e| internal(format!("tuning: {e}")))?;
        if !sysctl::same_value(want, &have) {
            return Err(internal(format!(
                "Error: Tuning configured value of {} is {want}, current value is {have}",
                target.path.display()
            )));
        }
    }
    let conf = &req.conf;
    let mut h = Handle::new().or_internal("tuning: netlink in the container")?;
    let link = h
        .link_by_name(ifname)
        .map_err(|_| internal(format!("Cannot find container link {ifname}")))?;
    let mismatch = |what: &str, want: String, have: String| {
        Err(internal(format!(
            "Error: Tuning configured {what} of {ifname} is {want}, current value is {have}"
        )))
    };
    if let Some(mac) = conf.mac {
        if link.mac != Some(mac) {
            let have = crate::common::link_info::mac_string(&link);
            return mismatch("Ethernet", mac.to_string(), have);
        }
    }
    if link.promisc != conf.promisc {
        return mismatch(
            "promisc",
            conf.promisc.to_string(),
            link.promisc.to_string(),
        );
    }
    if let Some(mtu) = conf.mtu.filter(|m| *m != link.mtu) {
        return mismatch("MTU", mtu.to_string(), link.mtu.to_string());
    }
    if let Some(on) = conf.allmulti.filter(|on| *on != link.allmulti) {
        return mismatch(
            "all-multicast mode",
            on.to_string(),
            link.allmulti.to_string(),
        );
    }
    if let Some(len) = conf.tx_qlen.filter(|l| *l != link.txqlen) {
        return mismatch(
            "transmit queue length",
            len.to_string(),
            link.txqlen.to_string(),
        );
    }
    Ok(())
}

/// What DEL found in the container namespace.
enum Restore {
    Done,
    LinkGone,
    Failed(String),
}

fn restore_in_netns(saved: &Saved, ifname: &str) -> Restore {
    let mut h = match Handle::new() {
        Ok(h) => h,
        Err(e) => return Restore::Failed(e.to_string()),
    };
    match h.link_by_name(ifname) {
        Ok(link) => {
            let saved = match saved {
                Saved::Backup(b) => b,
                Saved::Unreadable(e) => return Restore::Failed(format!("unreadable backup: {e}")),
                Saved::None => return Restore::Done,
            };
            let errors = saved.restore(&mut h, link.index);
            match errors.is_empty() {
                true => Restore::Done,
                false => Restore::Failed(errors.join("; ")),
            }
        }
        Err(e) if e.is_not_found() => Restore::LinkGone,
        Err(e) => Restore::Failed(e.to_string()),
    }
}

/// DEL: removes a killed ADD's temp files, puts the saved attributes back and removes the
/// backup. With the link gone (or the netns gone, or not a network namespace) there is
/// nothing to restore and the backup goes, readable or not; with the link there, a backup
/// that cannot be read or applied is an error and the file stays, so a retried DEL can try
/// again.
fn del(args: &CmdArgs) -> Result<(), CniError> {
    if args.ifname.contains('/') {
        return Ok(());
    }
    let dir = conf::data_dir(&args.conf);
    if dir.exists() {
        backup::check_dir(&dir).map_err(|e| CniError::io(format!("tuning: {e}")))?;
    }
    let owner = args.id();
    backup::remove_temps(&dir, &owner).map_err(|e| {
        CniError::io(format!(
            "tuning: cannot remove temp files in {}: {e}",
            dir.display()
        ))
    })?;
    let file = backup::path(&dir, &args.container_id, &args.ifname);
    let saved = match backup::read(&file) {
        Saved::None => return Ok(()),
        other => other,
    };
    let ns = match args.netns.as_os_str().is_empty() {
        true => None,
        false => match netns::open(&args.netns)? {
            Opened::Ns(ns) => Some(ns),
            Opened::Gone(e) => {
                log::info!("tuning: {e}; nothing to restore");
                None
            }
        },
    };
    let outcome = match ns {
        None => Restore::LinkGone,
        Some(ns) => ns
            .run(|| restore_in_netns(&saved, &args.ifname))
            .unwrap_or_else(|e| Restore::Failed(e.to_string())),
    };
    match outcome {
        Restore::Done => remove_backup(&file),
        Restore::LinkGone => {
            log::info!("tuning: {} is gone; nothing to restore", args.ifname);
            remove_backup(&file)
        }
        Restore::Failed(e) => Err(CniError::io(format!(
            "tuning: cannot restore {} from {}: {e}",
            args.ifname,
            file.display()
        ))),
    }
}

fn remove_backup(file: &Path) -> Result<(), CniError> {
    backup::remove(file)
        .map_err(|e| CniError::io(format!("tuning: cannot remove {}: {e}", file.display())))
}

impl Plugin for Tuning {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let req = Request::parse(args)?;
        sysctl::check_allowed(req.conf.sysctl.iter().map(|(k, _)| k.as_str()))?;
        let ns = netns::open_required(&args.netns)?;
        let file = backup::path(&req.conf.data_dir, &args.container_id, &args.ifname);
        let owner = args.id();
        ns.run(|| apply(&req, &args.ifname, &owner, &file))
            .map_err(ns_error)??;
        let mut result = req.prev;
        if let Some(mac) = req.conf.mac {
            for iface in result
                .interfaces
                .iter_mut()
                .filter(|i| i.name == args.ifname)
            {
                iface.mac = mac.to_string();
            }
        }
        Ok(result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // The config is decoded like ADD's, so every command refuses the same configs; CNI_ARGS
        // are not read, so a cleanup never fails over an argument only ADD uses (host-local).
        TuningConf::parse(&args.conf, &args.stdin, &cni_types::CniArgs::default())?;
        del(args)
    }

    /// Removes this network's backups and temp files of attachments not in the valid list.
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let Some(valid) = args.conf.valid_attachments.as_deref() else {
            log::info!("tuning: GC without cni.dev/valid-attachments: nothing removed");
            return Ok(());
        };
        let dir = conf::data_dir(&args.conf);
        let removed = backup::gc(&dir, &args.conf.name, valid)
            .map_err(|e| CniError::io(format!("tuning: GC in {}: {e}", dir.display())))?;
        for name in removed {
            log::info!("tuning: GC removed {name}");
        }
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let req = Request::parse(args)?;
        let ns = netns::open_required(&args.netns)?;
        ns.run(|| verify(&req, &args.ifname)).map_err(ns_error)?
    }
}
