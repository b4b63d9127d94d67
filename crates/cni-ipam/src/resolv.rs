//! `resolvConf`: the parts of a resolv.conf host-local copies into a result's `dns`.

use std::path::Path;

use crate::error::IpamError;

/// DNS settings, shaped like a CNI result's `dns`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

/// Reads and parses a resolv.conf file. An unreadable file is an error, as in Go.
pub fn parse_resolv_conf(path: &Path) -> Result<Dns, IpamError> {
    let bytes = std::fs::read(path).map_err(|e| IpamError::io("read", path, e))?;
    Ok(parse_resolv_conf_text(&String::from_utf8_lossy(&bytes)))
}

/// Parses resolv.conf text: `#` and `;` start comment lines, `nameserver` appends its first
/// argument, the last `domain` wins, `search` and `options` append all their arguments. Lines
/// with a keyword but no argument, and unknown keywords, are ignored.
pub fn parse_resolv_conf_text(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(keyword), Some(first)) = (fields.next(), fields.next()) else {
            continue;
        };
        let rest = std::iter::once(first).chain(fields).map(str::to_string);
        match keyword {
            "nameserver" => dns.nameservers.push(first.to_string()),
            "domain" => dns.domain = Some(first.to_string()),
            "search" => dns.search.extend(rest),
            "options" => dns.options.extend(rest),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_keyword() {
        let text =
            "# comment\n; also comment\nnameserver 198.18.128.1\nnameserver  fd00::1 extra\r\n\
                    domain a.example\ndomain b.example\nsearch x.example y.example\nsearch z\n\
                    options ndots:5 timeout:1\noptions\nnameserver\nsortlist 198.18.128.0\n\n   \n";
        let dns = parse_resolv_conf_text(text);
        assert_eq!(dns.nameservers, ["198.18.128.1", "fd00::1"]);
        assert_eq!(dns.domain.as_deref(), Some("b.example"));
        assert_eq!(dns.search, ["x.example", "y.example", "z"]);
        assert_eq!(dns.options, ["ndots:5", "timeout:1"]);
    }

    #[test]
    fn empty_file_gives_empty_dns() {
        assert_eq!(parse_resolv_conf_text(""), Dns::default());
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let err = parse_resolv_conf(Path::new("/nonexistent/resolv.conf")).unwrap_err();
        assert_eq!(err.cni_code(), 5);
    }
}
