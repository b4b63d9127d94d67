//! VLAN options (`vlan`, `vlanTrunk`, `preserveDefaultVlan`): expanding
//! the trunk list and writing the host port's VLAN entries.

use std::collections::BTreeSet;

use cni_linux::rtnl::link::VlanFlags;
use cni_linux::Handle;
use cni_types::go_object::as_list;
use cni_types::{CniError, GoObject};
use serde_json::value::RawValue;

fn bad(msg: &str) -> CniError {
    CniError::invalid_config(msg.to_string())
}

/// An optional integer key of a trunk entry; a non-integer value is an error.
fn trunk_int(item: &GoObject<'_>, key: &str) -> Result<Option<i64>, CniError> {
    item.int(key).map_err(|_| {
        let v = item.get(key).map(RawValue::get).unwrap_or_default();
        bad(&format!(
            "failed to load netconf: vlanTrunk {key}: {v} is not an integer"
        ))
    })
}

fn in_range(id: i64) -> bool {
    (1..=4094).contains(&id)
}

/// Expands `vlanTrunk` (`[{id}|{minID,maxID}]`, as JSON text) into sorted, unique VLAN ids,
/// with Go's checks and messages.
pub fn expand_trunk(trunk: &str) -> Result<Vec<u16>, CniError> {
    if trunk == "null" {
        return Ok(Vec::new());
    }
    let not_a_list = || {
        bad(&format!(
            "failed to load netconf: vlanTrunk must be a list, got {trunk}"
        ))
    };
    let list: &RawValue = serde_json::from_str(trunk).map_err(|_| not_a_list())?;
    let items = as_list(list, "vlanTrunk").map_err(|_| not_a_list())?;
    let mut ids = BTreeSet::new();
    for item in items {
        let item = match item.get() {
            "null" => continue,
            text if text.starts_with('{') => {
                GoObject::new(Some(item), "vlanTrunk").map_err(|e| bad(&e.to_string()))?
            }
            text => {
                return Err(bad(&format!(
                    "failed to load netconf: vlanTrunk entry {text} is not an object"
                )))
            }
        };
        let item = &item;
        match (trunk_int(item, "minID")?, trunk_int(item, "maxID")?) {
            (Some(min), Some(max)) => {
                if !in_range(min) {
                    return Err(bad("incorrect trunk minID parameter"));
                }
                if !in_range(max) {
                    return Err(bad("incorrect trunk maxID parameter"));
                }
                if max < min {
                    return Err(bad("minID is greater than maxID in trunk parameter"));
                }
                ids.extend(min..=max);
            }
            (None, Some(_)) => {
                return Err(bad(
                    "minID and maxID should be configured simultaneously, minID is missing",
                ))
            }
            (Some(_), None) => {
                return Err(bad(
                    "minID and maxID should be configured simultaneously, maxID is missing",
                ))
            }
            (None, None) => {}
        }
        if let Some(id) = trunk_int(item, "id")? {
            if !in_range(id) {
                return Err(bad("incorrect trunk id parameter"));
            }
            ids.insert(id);
        }
    }
    // Every id is within 1..=4094 here.
    Ok(ids
        .into_iter()
        .filter_map(|i| u16::try_from(i).ok())
        .collect())
}

/// The VLAN entries a host port gets, in the order Go writes them: the access VLAN as PVID and
/// untagged, the trunk VLANs tagged, and VLAN 1 as PVID/untagged when only a trunk is given.
pub fn port_entries(vlan: u16, trunk: &[u16]) -> Vec<(u16, VlanFlags)> {
    let access = VlanFlags {
        pvid: true,
        untagged: true,
    };
    let mut entries = Vec::new();
    if vlan != 0 {
        entries.push((vlan, access));
    }
    entries.extend(trunk.iter().map(|&v| (v, VlanFlags::default())));
    if vlan == 0 && !trunk.is_empty() {
        entries.push((1, access));
    }
    entries
}

/// Writes the VLAN entries of host port `index`, first removing the existing ones (the
/// bridge's default PVID) unless `preserve_default`.
pub fn configure_port(
    h: &mut Handle,
    index: u32,
    port_name: &str,
    vlan: u16,
    trunk: &[u16],
    preserve_default: bool,
) -> Result<(), CniError> {
    if vlan == 0 && trunk.is_empty() {
        return Ok(());
    }
    if !preserve_default {
        let existing = h.bridge_vlans(index).map_err(|e| {
            CniError::internal(format!(
                "failed to remove default vlan on interface {port_name:?}: {e}"
            ))
        })?;
        for v in existing {
            h.del_bridge_vlan(index, v.vid, false).map_err(|e| {
                CniError::internal(format!(
                    "failed to remove default vlan on interface {port_name:?}: {e}"
                ))
            })?;
        }
    }
    for (vid, flags) in port_entries(vlan, trunk) {
        h.add_bridge_vlan(index, vid, flags, false).map_err(|e| {
            CniError::internal(format!(
                "failed to setup vlan tag {vid} on interface {port_name:?}: {e}{}",
                unsupported_hint(&e)
            ))
        })?;
    }
    Ok(())
}

/// Names the missing kernel feature when the kernel refuses VLAN entries.
fn unsupported_hint(e: &cni_linux::NetlinkError) -> &'static str {
    const EOPNOTSUPP: i32 = 95;
    if e.errno() == Some(EOPNOTSUPP) {
        " (the kernel lacks bridge VLAN filtering, CONFIG_BRIDGE_VLAN_FILTERING)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn expand(trunk: &Value) -> Result<Vec<u16>, CniError> {
        expand_trunk(&trunk.to_string())
    }

    #[test]
    fn expands_sorts_and_dedups() {
        let t = json!([{"id": 10}, {"minID": 3, "maxID": 5}, {"ID": 4}, {"MinId": 9, "maxid": 10}]);
        assert_eq!(expand(&t).unwrap(), [3, 4, 5, 9, 10]);
        assert!(expand(&json!([])).unwrap().is_empty());
        assert!(expand(&Value::Null).unwrap().is_empty());
        assert_eq!(
            expand(&json!([{"minID": 4094, "maxID": 4094}])).unwrap(),
            [4094]
        );
        // Go's rule for repeated keys: the last spelling wins, not the exact one.
        assert_eq!(expand_trunk(r#"[{"id": 7, "ID": 8}]"#).unwrap(), [8]);
    }

    #[test]
    fn go_errors() {
        for (t, msg) in [
            (
                json!([{"minID": 0, "maxID": 3}]),
                "incorrect trunk minID parameter",
            ),
            (
                json!([{"minID": 1, "maxID": 4095}]),
                "incorrect trunk maxID parameter",
            ),
            (
                json!([{"minID": 5, "maxID": 3}]),
                "minID is greater than maxID",
            ),
            (json!([{"maxID": 3}]), "minID is missing"),
            (json!([{"minID": 3}]), "maxID is missing"),
            (json!([{"id": 4095}]), "incorrect trunk id parameter"),
            (json!([{"id": "5"}]), "not an integer"),
            (json!({"id": 5}), "must be a list"),
        ] {
            let e = expand(&t).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(msg), "{t}: {}", e.msg);
        }
    }

    #[test]
    fn port_entry_order() {
        let access = VlanFlags {
            pvid: true,
            untagged: true,
        };
        let tagged = VlanFlags::default();
        assert!(port_entries(0, &[]).is_empty());
        assert_eq!(port_entries(7, &[]), [(7, access)]);
        assert_eq!(
            port_entries(7, &[2, 3]),
            [(7, access), (2, tagged), (3, tagged)]
        );
        assert_eq!(port_entries(0, &[2]), [(2, tagged), (1, access)]);
    }
}
