//! The vrf config.

use cni_types::{CniError, NetConf};

use crate::common::conf::field;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VrfConf {
    pub vrfname: String,
    /// The VRF's table; `None` picks the lowest one no other VRF uses.
    pub table: Option<u32>,
}

impl VrfConf {
    pub fn parse(conf: &NetConf) -> Result<VrfConf, CniError> {
        let vrfname = field::<String>(&conf.raw, "vrfname")?
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                CniError::invalid_config("configuration is expected to have a valid vrf name")
            })?;
        let table = field::<u32>(&conf.raw, "table")?.filter(|t| *t != 0);
        Ok(VrfConf { vrfname, table })
    }
}

/// The lowest table from 1 that none of `used` is.
pub fn lowest_free(used: &[u32]) -> u32 {
    (1..).find(|t| !used.contains(t)).expect("a free table")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<VrfConf, CniError> {
        VrfConf::parse(&NetConf::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn keys() {
        let c = parse(r#"{"name":"n","vrfname":"red","table":1001}"#).unwrap();
        assert_eq!((c.vrfname.as_str(), c.table), ("red", Some(1001)));
        assert_eq!(
            parse(r#"{"name":"n","vrfname":"red"}"#).unwrap().table,
            None
        );
        for json in [
            r#"{"name":"n"}"#,
            r#"{"name":"n","vrfname":""}"#,
            r#"{"name":"n","vrfname":"red","table":-1}"#,
        ] {
            assert_eq!(parse(json).unwrap_err().code, 7, "{json}");
        }
        assert_eq!(lowest_free(&[]), 1);
        assert_eq!(lowest_free(&[1, 2, 4]), 3);
    }
}
