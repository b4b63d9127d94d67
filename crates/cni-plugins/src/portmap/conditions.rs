//! `conditionsV4` / `conditionsV6`: extra matches for the port-mapping rules. The Go plugin
//! passes them verbatim to iptables (first token starts with `-` or `!`) or to nft. rcni
//! translates the common forms into rule-builder matches and refuses anything else with a
//! code-7 error naming the condition:
//!
//! * iptables form: `[!] -s|--source|--src <addr[/len]>`, `[!] -d|--destination|--dst ...`,
//!   `[!] -i|--in-interface <name>`;
//! * nft form: `ip|ip6 saddr|daddr [==|!=] <addr[/len]>`, `iifname [==|!=] <name>`.
//!
//! Unlike Go's nftables backend (one global rule, last writer wins) they apply to the
//! attachment's own rules, like Go's iptables backend.

use std::net::IpAddr;

use ipnet::IpNet;

use cni_nft::RuleBuilder;
use cni_types::CniError;

/// Which syntax the list was written in (decides the backend in the Go plugin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Iptables,
    Nftables,
}

/// One translated match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    Source { net: IpNet, negated: bool },
    Destination { net: IpNet, negated: bool },
    InInterface { name: String, negated: bool },
}

impl Condition {
    /// Adds the match to a rule.
    pub fn apply(&self, b: RuleBuilder) -> RuleBuilder {
        match self {
            Condition::Source {
                net,
                negated: false,
            } => b.saddr(*net),
            Condition::Source { net, negated: true } => b.saddr_not(*net),
            Condition::Destination {
                net,
                negated: false,
            } => b.daddr(*net),
            Condition::Destination { net, negated: true } => b.daddr_not(*net),
            Condition::InInterface {
                name,
                negated: false,
            } => b.iifname(name),
            Condition::InInterface {
                name,
                negated: true,
            } => b.iifname_not(name),
        }
    }
}

/// A parsed list with its syntax (`None` when empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    pub syntax: Option<Syntax>,
    pub matches: Vec<Condition>,
}

impl Conditions {
    pub fn apply(&self, mut b: RuleBuilder) -> RuleBuilder {
        for c in &self.matches {
            b = c.apply(b);
        }
        b
    }
}

fn refuse(key: &str, list: &[String], why: &str) -> CniError {
    CniError::invalid_config(format!(
        "portmap: {key} condition {:?} is not supported by rcni: {why} (supported: \
         [!] -s/-d <addr>, [!] -i <ifname>, or ip/ip6 saddr/daddr [!=] <addr>, \
         iifname [!=] <ifname>)",
        list.join(" ")
    ))
}

fn parse_net(text: &str, ipv6: bool) -> Option<IpNet> {
    let net = text
        .parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))?;
    (net.addr().is_ipv6() == ipv6).then_some(net)
}

fn iface_name(text: &str) -> Option<String> {
    let name = text.trim_matches('"');
    (!name.is_empty() && name.len() < 16 && !name.contains(['/', ' '])).then(|| name.to_string())
}

/// Parses `list` (the value of `key`, `conditionsV4` when `ipv6` is false).
pub fn parse(key: &str, list: &[String], ipv6: bool) -> Result<Conditions, CniError> {
    let tokens: Vec<&str> = list.iter().flat_map(|s| s.split_whitespace()).collect();
    let Some(first) = tokens.first() else {
        return Ok(Conditions::default());
    };
    let syntax = if first.starts_with('-') || first.starts_with('!') {
        Syntax::Iptables
    } else {
        Syntax::Nftables
    };
    let matches = match syntax {
        Syntax::Iptables => parse_iptables(&tokens, ipv6),
        Syntax::Nftables => parse_nft(&tokens, ipv6),
    }
    .map_err(|why| refuse(key, list, &why))?;
    Ok(Conditions {
        syntax: Some(syntax),
        matches,
    })
}

fn parse_iptables(tokens: &[&str], ipv6: bool) -> Result<Vec<Condition>, String> {
    let mut out = Vec::new();
    let mut it = tokens.iter();
    let mut negated = false;
    while let Some(tok) = it.next() {
        if *tok == "!" {
            negated = !negated;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("option {tok} has no value"))?;
        let cond = match *tok {
            "-s" | "--source" | "--src" => Condition::Source {
                net: parse_net(value, ipv6).ok_or_else(|| bad_addr(value, ipv6))?,
                negated,
            },
            "-d" | "--destination" | "--dst" => Condition::Destination {
                net: parse_net(value, ipv6).ok_or_else(|| bad_addr(value, ipv6))?,
                negated,
            },
            "-i" | "--in-interface" => Condition::InInterface {
                name: iface_name(value).ok_or_else(|| format!("bad interface {value:?}"))?,
                negated,
            },
            other => return Err(format!("unsupported option {other}")),
        };
        out.push(cond);
        negated = false;
    }
    if negated {
        return Err("dangling \"!\"".into());
    }
    Ok(out)
}

fn bad_addr(value: &str, ipv6: bool) -> String {
    let fam = if ipv6 { "IPv6" } else { "IPv4" };
    format!("{value:?} is not an {fam} address or prefix")
}

fn parse_nft(tokens: &[&str], ipv6: bool) -> Result<Vec<Condition>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    let ip_kw = if ipv6 { "ip6" } else { "ip" };
    while i < tokens.len() {
        let (field, next) = match tokens[i] {
            "iifname" => ("iifname", i + 1),
            kw if kw == ip_kw => match tokens.get(i + 1) {
                Some(f @ (&"saddr" | &"daddr")) => (*f, i + 2),
                other => return Err(format!("unsupported match {kw} {}", other.unwrap_or(&""))),
            },
            other => return Err(format!("unsupported match {other}")),
        };
        let (negated, value_at) = match tokens.get(next) {
            Some(&"!=") => (true, next + 1),
            Some(&"==") => (false, next + 1),
            _ => (false, next),
        };
        let value = tokens
            .get(value_at)
            .ok_or_else(|| format!("{field} has no value"))?;
        out.push(match field {
            "iifname" => Condition::InInterface {
                name: iface_name(value).ok_or_else(|| format!("bad interface {value:?}"))?,
                negated,
            },
            "saddr" => Condition::Source {
                net: parse_net(value, ipv6).ok_or_else(|| bad_addr(value, ipv6))?,
                negated,
            },
            _ => Condition::Destination {
                net: parse_net(value, ipv6).ok_or_else(|| bad_addr(value, ipv6))?,
                negated,
            },
        });
        i = value_at + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn iptables_forms() {
        let c = parse(
            "conditionsV4",
            &v(&["-s", "1.2.3.4", "!", "-d", "198.18.0.0/15"]),
            false,
        )
        .unwrap();
        assert_eq!(c.syntax, Some(Syntax::Iptables));
        assert_eq!(
            c.matches,
            vec![
                Condition::Source {
                    net: "1.2.3.4/32".parse().unwrap(),
                    negated: false
                },
                Condition::Destination {
                    net: "198.18.0.0/15".parse().unwrap(),
                    negated: true
                }
            ]
        );
        let c = parse("conditionsV4", &v(&["! -i eth0"]), false).unwrap();
        assert_eq!(
            c.matches,
            vec![Condition::InInterface {
                name: "eth0".into(),
                negated: true
            }]
        );
    }

    #[test]
    fn nft_forms() {
        let c = parse(
            "conditionsV6",
            &v(&["ip6 saddr != fd00::/64", "iifname eth0"]),
            true,
        )
        .unwrap();
        assert_eq!(c.syntax, Some(Syntax::Nftables));
        assert_eq!(c.matches.len(), 2);
        assert_eq!(
            c.matches[0],
            Condition::Source {
                net: "fd00::/64".parse().unwrap(),
                negated: true
            }
        );
    }

    #[test]
    fn unsupported_or_wrong_family_is_code_7_naming_it() {
        for (list, v6) in [
            (v(&["-m", "comment"]), false),
            (v(&["-s", "fd00::1"]), false),
            (v(&["ip", "saddr", "1.2.3.4"]), true),
            (v(&["meta", "mark", "1"]), false),
            (v(&["-s"]), false),
            (v(&["!"]), false),
        ] {
            let e = parse("conditionsV4", &list, v6).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains("conditionsV4"), "{}", e.msg);
        }
        assert_eq!(parse("c", &[], false).unwrap(), Conditions::default());
    }
}
