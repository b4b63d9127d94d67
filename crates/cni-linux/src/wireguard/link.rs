//! The kernel's WireGuard link (`ip link add NAME type wireguard`): created empty, configured
//! afterwards over generic netlink ([`super::genl`]).

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo};
use netlink_packet_route::RouteNetlinkMessage;

use crate::rtnl::link::{check_name, link_message, spec_attributes, LinkSpec};
use crate::rtnl::{Error, Handle};

impl Handle {
    /// Creates a WireGuard link. Fails with EEXIST if the name is taken and with EOPNOTSUPP
    /// when the kernel has no WireGuard.
    pub fn create_wireguard(&mut self, spec: &LinkSpec) -> Result<(), Error> {
        check_name(&spec.name)?;
        let mut attrs = spec_attributes(spec);
        attrs.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Wireguard,
        )]));
        self.execute(
            RouteNetlinkMessage::NewLink(link_message(0, attrs)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NetlinkPayload;

    use super::*;
    use crate::rtnl::fake::FakeTransport;

    #[test]
    fn a_wireguard_link_is_a_new_link_of_kind_wireguard_with_its_mtu() {
        let fake = FakeTransport::new();
        fake.push_ack();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        let spec = LinkSpec {
            mtu: Some(1440),
            ..LinkSpec::named("rcni-wg")
        };
        h.create_wireguard(&spec).unwrap();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) = &fake.sent()[0].payload
        else {
            panic!("not RTM_NEWLINK")
        };
        assert!(m
            .attributes
            .contains(&LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Wireguard
            )])));
        assert!(m.attributes.contains(&LinkAttribute::Mtu(1440)));
        assert!(m
            .attributes
            .contains(&LinkAttribute::IfName("rcni-wg".into())));
        assert!(h
            .create_wireguard(&LinkSpec::named("a-name-far-too-long"))
            .is_err());
    }
}
