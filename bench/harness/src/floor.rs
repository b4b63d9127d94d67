//! Figure 3: the kernel floor. The kernel objects of a bridge attachment made in-process through
//! rcni's netlink layer, with no plugin process and no IPAM: veth pair with the peer created in
//! the pod, host end on the bridge and up, pod address, link up, default route, and the
//! per-interface sysctls a bridge ADD must write (host `accept_ra`, pod `accept_dad` and
//! `arp_notify`), and host-local's lease files (see [`Leases`]). Opening the pod's namespace takes one namespace thread (the type check of a
//! bind-mounted path) and its socket plus sysctls a second, as in the plugin. DEL deletes the
//! pod's interface and releases the lease. This is the least any bridge plugin can cost; the
//! plugin's extra work (config, bridge and gateway look-ups, the port-state check, finding a
//! free address) is not in it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::route::Route;
use cni_linux::rtnl::SocketTransport;
use cni_linux::{sysctl, Handle, NetNs};
use ipnet::IpNet;

use crate::ns::NamedNs;
use crate::report::Report;
use crate::stats::ms;
use crate::stop;

const BRIDGE: &str = "rcnibfl";

fn setup_bridge(host: &mut Handle) -> Result<u32> {
    host.add_link(&LinkAdd::bridge(BRIDGE))?;
    let br = host.link_by_name(BRIDGE)?;
    host.add_address(
        br.index,
        "198.19.240.1/20".parse()?,
        AddAddressOptions::default(),
    )?;
    host.change_link(&LinkChange::of(br.index).up())?;
    Ok(br.index)
}

/// One attachment's kernel work; returns (ADD ms, DEL ms).
fn one(bridge: u32, leases: &Leases, i: usize) -> Result<(f64, f64)> {
    let pod = NamedNs::create("f")?;
    let host_name = format!("vfl{i}");
    let addr: IpNet = IpNet::new(
        IpAddr::V4(Ipv4Addr::new(
            198,
            19,
            240 + (i / 250) as u8,
            (i % 250 + 2) as u8,
        )),
        20,
    )?;

    let started = Instant::now();
    let ns = NetNs::open(&pod.path)?;
    let mut host = Handle::new()?;
    let hv = host.add_link_and_get(&LinkAdd::veth(
        &host_name,
        VethPeer::named("eth0").netns(&ns),
    ))?;
    host.change_link(&LinkChange::of(hv.index).master(bridge))?;
    host.change_link(&LinkChange::of(hv.index).up())?;
    // The sysctls every bridge ADD owes (Go's): accept_ra=0 on the host end, DAD off and
    // arp_notify on in the pod, written from the one thread that also opens the pod's socket.
    sysctl::write(&sysctl::iface_key("ipv6", &host_name, "accept_ra"), "0")?;
    let socket = ns.run(|| -> Result<SocketTransport> {
        sysctl::write(&sysctl::iface_key("ipv6", "eth0", "accept_dad"), "0")?;
        sysctl::write(&sysctl::iface_key("ipv4", "eth0", "arp_notify"), "1")?;
        Ok(SocketTransport::open()?)
    })??;
    let mut inside = Handle::with_transport(Box::new(socket));
    let eth0 = inside.link_by_name("eth0")?;
    inside.add_address(eth0.index, addr, AddAddressOptions::default())?;
    inside.change_link(&LinkChange::of(eth0.index).up())?;
    let mut default = Route::to("0.0.0.0/0".parse()?);
    default.gateway = Some("198.19.240.1".parse()?);
    inside.add_route(&default)?;
    let lease = leases.add(addr.addr(), &format!("floor{i}"))?;
    let add = ms(started.elapsed());

    let started = Instant::now();
    let ns = NetNs::open(&pod.path)?;
    let mut inside = Handle::in_netns(&ns)?;
    inside.delete_link_by_name("eth0")?;
    leases.release(&lease)?;
    let del = ms(started.elapsed());
    Ok((add, del))
}

/// The file work host-local cannot do without (Go's `backend/disk` store layout): under the range's
/// `flock`ed lock file, a lease file named by the address holding `<id>\r\n<ifname>`, and
/// `last_reserved_ip.0`; DEL removes the lease file under the lock. No directory scan, no
/// fsync: the least a byte-compatible store writes.
struct Leases {
    dir: PathBuf,
    lock: File,
}

impl Leases {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("rcni-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let lock = File::create(dir.join("lock"))?;
        Ok(Leases { dir, lock })
    }

    fn add(&self, ip: IpAddr, id: &str) -> Result<PathBuf> {
        self.lock.lock()?;
        let path = self.dir.join(ip.to_string());
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{id}\r\neth0").as_bytes()))
            .and_then(|()| std::fs::write(self.dir.join("last_reserved_ip.0"), ip.to_string()));
        self.lock.unlock()?;
        written?;
        Ok(path)
    }

    fn release(&self, lease: &Path) -> Result<()> {
        self.lock.lock()?;
        let removed = std::fs::remove_file(lease);
        self.lock.unlock()?;
        Ok(removed?)
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn measure(report: &mut Report, runs: usize) -> Result<()> {
    let mut host = Handle::new().context("netlink in the bench host namespace")?;
    let bridge = setup_bridge(&mut host)?;
    let leases = Leases::new()?;
    let (mut add, mut del) = (Vec::new(), Vec::new());
    for i in 0..runs {
        stop::check()?;
        let (a, d) = one(bridge, &leases, i)?;
        add.push(a);
        del.push(d);
    }
    let _ = host.delete_link_by_name(BRIDGE);
    report.add_floor("ADD bridge+host-local", add);
    report.add_floor("DEL bridge+host-local", del);
    Ok(())
}
