//! Namespace ids (`RTM_GETNSID`): the id the handle's namespace knows another one by.

use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::{Error, Handle};

impl Handle {
    /// The id this handle's namespace knows the namespace open at `ns` by (`ip netns
    /// list-id`), `None` when it has none. Only reads an id, never assigns one. The kernel
    /// refuses a descriptor that is not a network namespace with EINVAL, which makes this
    /// also a check of the namespace's type.
    pub fn netns_id(&mut self, ns: BorrowedFd<'_>) -> Result<Option<i32>, Error> {
        let fd = u32::try_from(ns.as_raw_fd())
            .map_err(|_| Error::InvalidArgument("negative file descriptor".to_string()))?;
        let mut request = NsidMessage::default();
        request.attributes.push(NsidAttribute::Fd(fd));
        let replies = self.get(RouteNetlinkMessage::GetNsId(request))?;
        Ok(replies.iter().find_map(|reply| match reply {
            RouteNetlinkMessage::NewNsId(m) => m.attributes.iter().find_map(|a| match a {
                NsidAttribute::Id(id) if *id >= 0 => Some(*id),
                _ => None,
            }),
            _ => None,
        }))
    }
}
