//! FIB rule (policy routing) operations: list, add, delete `from <prefix> lookup <table>`
//! rules, as `ip rule` does.

use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Error, Handle};

/// A lookup rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// IPv6 rule (else IPv4); set from `src` when one is given.
    pub ipv6: bool,
    /// Source prefix (`from`); `None` matches every source.
    pub src: Option<IpNet>,
    /// The table to look up.
    pub table: u32,
    /// Preference; the kernel picks one below the last rule when `None`.
    pub priority: Option<u32>,
}

impl Rule {
    /// `from src lookup table`.
    pub fn from_source(src: IpNet, table: u32) -> Rule {
        Rule {
            ipv6: matches!(src, IpNet::V6(_)),
            src: Some(src),
            table,
            priority: None,
        }
    }

    pub(crate) fn to_message(&self) -> RuleMessage {
        let mut msg = RuleMessage::default();
        let ipv6 = self.src.map_or(self.ipv6, |s| matches!(s, IpNet::V6(_)));
        msg.header.family = if ipv6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        msg.header.action = RuleAction::ToTable;
        msg.header.table = u8::try_from(self.table).unwrap_or(0);
        if let Some(src) = self.src {
            msg.header.src_len = src.prefix_len();
            msg.attributes.push(RuleAttribute::Source(src.network()));
        }
        msg.attributes.push(RuleAttribute::Table(self.table));
        if let Some(p) = self.priority {
            msg.attributes.push(RuleAttribute::Priority(p));
        }
        msg
    }

    fn from_message(msg: RuleMessage) -> Option<Rule> {
        let ipv6 = match msg.header.family {
            AddressFamily::Inet => false,
            AddressFamily::Inet6 => true,
            _ => return None,
        };
        let mut rule = Rule {
            ipv6,
            src: None,
            table: u32::from(msg.header.table),
            priority: None,
        };
        let src_len = msg.header.src_len;
        for attr in msg.attributes {
            match attr {
                RuleAttribute::Source(ip) => rule.src = IpNet::new(ip, src_len).ok(),
                RuleAttribute::Table(t) => rule.table = t,
                RuleAttribute::Priority(p) => rule.priority = Some(p),
                _ => {}
            }
        }
        Some(rule)
    }

    /// The rule's source address, when it names exactly one address.
    pub fn single_source(&self) -> Option<IpAddr> {
        self.src
            .filter(|s| s.prefix_len() == s.max_prefix_len())
            .map(|s| s.addr())
    }
}

impl Handle {
    /// Every IPv4 and IPv6 rule.
    pub fn rules(&mut self) -> Result<Vec<Rule>, Error> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut msg = RuleMessage::default();
            msg.header.family = family;
            for reply in self.dump(RouteNetlinkMessage::GetRule(msg))? {
                if let RouteNetlinkMessage::NewRule(m) = reply {
                    out.extend(Rule::from_message(m));
                }
            }
        }
        Ok(out)
    }

    /// Adds a rule; an identical one is EEXIST.
    pub fn add_rule(&mut self, rule: &Rule) -> Result<(), Error> {
        self.execute(
            RouteNetlinkMessage::NewRule(rule.to_message()),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Deletes the first rule matching `rule` (a missing one is ENOENT).
    pub fn delete_rule(&mut self, rule: &Rule) -> Result<(), Error> {
        self.execute(RouteNetlinkMessage::DelRule(rule.to_message()), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtnl::fake::FakeTransport;
    use netlink_packet_core::NetlinkPayload;

    #[test]
    fn from_source_encodes_family_prefix_and_table() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        fake.push_ack();
        let rule = Rule::from_source("198.18.0.5/32".parse().unwrap(), 300);
        h.add_rule(&rule).unwrap();
        let sent = fake.sent().remove(0);
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRule(m)) = sent.payload else {
            panic!("not a NewRule");
        };
        assert_eq!(m.header.family, AddressFamily::Inet);
        assert_eq!(m.header.src_len, 32);
        assert_eq!(m.header.table, 0, "tables above 255 only in RTA_TABLE");
        assert_eq!(m.header.action, RuleAction::ToTable);
        assert!(m
            .attributes
            .contains(&RuleAttribute::Source("198.18.0.5".parse().unwrap())));
        assert!(m.attributes.contains(&RuleAttribute::Table(300)));
        let back = Rule::from_message(m).unwrap();
        assert_eq!(back, rule);
        assert_eq!(back.single_source(), Some("198.18.0.5".parse().unwrap()));
        let v6 = Rule::from_source("2001:2::5/128".parse().unwrap(), 100).to_message();
        assert_eq!(v6.header.family, AddressFamily::Inet6);
        assert_eq!(v6.header.table, 100);
    }
}
