//! The host-device config and finding the device on the host.

use std::path::{Path, PathBuf};

use cni_linux::rtnl::link::Link;
use cni_linux::{Handle, MacAddr};
use cni_plugin::ResultExt;
use cni_types::{CniError, NetConf};

use crate::common::conf::{field, nested_string};

/// Where the restore records live unless `dataDir` says otherwise.
pub use cni_attribution::names::HOST_DEVICE_DATA_DIR as DEFAULT_DATA_DIR;

/// How the device is named in the config (exactly one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Device(String),
    HwAddr(MacAddr),
    /// A sysfs device path whose `net/` directory holds the interface.
    KernelPath(PathBuf),
    /// A PCI address (`0000:00:1f.6`), from `pciBusID` or `runtimeConfig.deviceID`.
    PciBusId(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostDeviceConf {
    pub selector: Selector,
    pub data_dir: PathBuf,
    pub layer3: bool,
}

fn nonempty(conf: &NetConf, key: &str) -> Result<Option<String>, CniError> {
    Ok(field::<String>(&conf.raw, key)?.filter(|s| !s.is_empty()))
}

/// A PCI address as sysfs names it: `DDDD:BB:DD.F` in hex.
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.char_indices()
            .filter(|(i, _)| ![4, 7, 10].contains(i))
            .all(|(_, c)| c.is_ascii_hexdigit())
}

impl HostDeviceConf {
    /// `DPDKMode` (Go's untagged field) is refused: rcni moves kernel netdevs only.
    pub fn parse(conf: &NetConf) -> Result<HostDeviceConf, CniError> {
        if field::<bool>(&conf.raw, "DPDKMode")?.unwrap_or(false) {
            return Err(CniError::invalid_config(
                "host-device: DPDK mode is not supported by rcni",
            ));
        }
        let device_id =
            nested_string(&conf.raw, "runtimeConfig", &["deviceID"])?.filter(|s| !s.is_empty());
        // Go's priority: device, hwaddr, kernelpath, then pciBusID (which a PCI
        // runtimeConfig.deviceID replaces).
        let pci = match device_id {
            Some(id) if is_pci_address(&id) => Some(id),
            Some(id) => {
                return Err(CniError::invalid_config(format!(
                    "host-device: runtimeConfig.deviceID {id:?} is not a PCI address \
                     (auxiliary devices are not supported by rcni)"
                )))
            }
            None => nonempty(conf, "pciBusID")?,
        };
        let hwaddr = nonempty(conf, "hwaddr")?
            .map(|h| {
                h.parse::<MacAddr>()
                    .map_err(|_| CniError::invalid_config(format!("invalid hwaddr {h:?}")))
            })
            .transpose()?;
        let kernelpath = nonempty(conf, "kernelpath")?.map(PathBuf::from);
        if let Some(k) = &kernelpath {
            if !k.starts_with("/sys/devices/") {
                return Err(CniError::invalid_config(format!(
                    "kernelpath {} must start with /sys/devices/",
                    k.display()
                )));
            }
        }
        let selector = if let Some(d) = nonempty(conf, "device")? {
            Selector::Device(d)
        } else if let Some(mac) = hwaddr {
            Selector::HwAddr(mac)
        } else if let Some(k) = kernelpath {
            Selector::KernelPath(k)
        } else if let Some(p) = pci {
            Selector::PciBusId(p)
        } else {
            return Err(CniError::invalid_config(
                r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#,
            ));
        };
        let data_dir = nonempty(conf, "dataDir")?.unwrap_or_else(|| DEFAULT_DATA_DIR.into());
        Ok(HostDeviceConf {
            selector,
            data_dir: PathBuf::from(data_dir),
            layer3: !conf.ipam_type.is_empty(),
        })
    }
}

/// The interface names in `<dir>/net/`, sorted.
pub fn netdev_names(dir: &Path) -> Result<Vec<String>, CniError> {
    let net = dir.join("net");
    let entries = std::fs::read_dir(&net).map_err(|e| {
        CniError::internal(format!(
            "failed to find network devices in {}: {e} (a device without a kernel netdev, \
             e.g. bound to vfio-pci for DPDK, is not supported)",
            net.display()
        ))
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// The host link `selector` names, looked up with `h` (the host namespace).
pub fn find_device(h: &mut Handle, selector: &Selector) -> Result<Link, CniError> {
    let by_name = |h: &mut Handle, name: &str| {
        h.link_by_name(name)
            .map_err(|e| CniError::internal(format!("failed to find host device {name:?}: {e}")))
    };
    let from_dir = |h: &mut Handle, dir: &Path| {
        let names = netdev_names(dir)?;
        let first = names.first().ok_or_else(|| {
            CniError::internal(format!("no network device in {}/net", dir.display()))
        })?;
        by_name(h, first)
    };
    match selector {
        Selector::Device(name) => by_name(h, name),
        // The kernel selects links by name or index only, so a MAC means listing them (one
        // dump, and only for this selector).
        Selector::HwAddr(mac) => h
            .links()
            .or_internal("failed to list links")?
            .into_iter()
            .find(|l| l.mac == Some(*mac))
            .ok_or_else(|| CniError::internal(format!("failed to find device with hwaddr {mac}"))),
        Selector::KernelPath(path) => from_dir(h, path),
        Selector::PciBusId(id) => {
            let dev = Path::new("/sys/bus/pci/devices").join(id);
            if dev.join("net").is_dir() {
                return from_dir(h, &dev);
            }
            // virtio functions keep their netdev one level down (`virtio3/net`).
            let virtio = std::fs::read_dir(&dev)
                .ok()
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("virtio"))
                        && p.join("net").is_dir()
                })
                .min();
            from_dir(h, virtio.as_deref().unwrap_or(&dev))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<HostDeviceConf, CniError> {
        HostDeviceConf::parse(&NetConf::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn one_selector_each() {
        let c = parse(r#"{"name":"n","type":"host-device","device":"eth1"}"#).unwrap();
        assert_eq!(c.selector, Selector::Device("eth1".into()));
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert!(!c.layer3);
        let c = parse(r#"{"name":"n","hwaddr":"02:00:00:00:00:01","dataDir":"/tmp/x"}"#).unwrap();
        assert_eq!(
            c.selector,
            Selector::HwAddr("02:00:00:00:00:01".parse().unwrap())
        );
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        let c = parse(r#"{"name":"n","kernelpath":"/sys/devices/x"}"#).unwrap();
        assert_eq!(c.selector, Selector::KernelPath("/sys/devices/x".into()));
        let c =
            parse(r#"{"name":"n","pciBusID":"0000:00:1f.6","ipam":{"type":"static"}}"#).unwrap();
        assert_eq!(c.selector, Selector::PciBusId("0000:00:1f.6".into()));
        assert!(c.layer3);
        let c = parse(r#"{"name":"n","runtimeConfig":{"deviceID":"0000:3b:00.1"}}"#).unwrap();
        assert_eq!(c.selector, Selector::PciBusId("0000:3b:00.1".into()));
        // device wins over everything, as in Go.
        let c = parse(r#"{"name":"n","device":"a","hwaddr":"02:00:00:00:00:01"}"#).unwrap();
        assert_eq!(c.selector, Selector::Device("a".into()));
        let c = parse(r#"{"name":"n","device":"e","runtimeConfig":{"deviceID":"0000:3b:00.1"}}"#)
            .unwrap();
        assert_eq!(c.selector, Selector::Device("e".into()));
    }

    #[test]
    fn refusals_are_code_7() {
        for json in [
            r#"{"name":"n"}"#,
            r#"{"name":"n","device":""}"#,
            r#"{"name":"n","hwaddr":"zz"}"#,
            r#"{"name":"n","device":3}"#,
            r#"{"name":"n","device":"a","DPDKMode":true}"#,
            r#"{"name":"n","kernelpath":"/tmp/x"}"#,
            r#"{"name":"n","runtimeConfig":{"deviceID":"mlx5_core.sf.4"}}"#,
        ] {
            assert_eq!(parse(json).unwrap_err().code, 7, "{json}");
        }
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_address("0000:00:1f.6"));
        assert!(!is_pci_address("0000:00:1f:6"));
        assert!(!is_pci_address("mlx5_core.sf.4"));
    }

    #[test]
    fn netdevs_of_a_sysfs_dir() {
        let dir = std::env::temp_dir().join(format!("rcni-hd-unit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("net/enp1s0")).unwrap();
        std::fs::create_dir_all(dir.join("net/enp1s0d1")).unwrap();
        assert_eq!(netdev_names(&dir).unwrap(), ["enp1s0", "enp1s0d1"]);
        assert!(netdev_names(&dir.join("nope"))
            .unwrap_err()
            .msg
            .contains("DPDK"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
