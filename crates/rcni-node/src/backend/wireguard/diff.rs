//! What must change on a running device to make it what the node wants: the private key and
//! port only when they differ (setting them again would make the implementation drop its
//! sessions or rebind its socket), every peer the device has and should not removed, every
//! peer missing or different set. Unchanged peers are not touched, so a restarted agent's
//! resync costs no handshake.

use std::collections::HashMap;

use cni_linux::wireguard::{Device, DeviceUpdate, PeerChange, PeerConfig, SecretKey};

/// The update from `actual` to the device with `private_key` and `listen_port` and, when
/// `peers` is given, exactly those peers (`None` leaves the peers alone: before the first
/// complete list of leases the node does not know them).
pub fn diff(
    actual: &Device,
    private_key: SecretKey,
    listen_port: u16,
    peers: Option<&[PeerConfig]>,
) -> DeviceUpdate {
    let mut update = DeviceUpdate {
        private_key: (actual.private_key != Some(private_key)).then_some(private_key),
        listen_port: (actual.listen_port != listen_port).then_some(listen_port),
        ..DeviceUpdate::default()
    };
    let Some(peers) = peers else {
        return update;
    };
    let wanted: HashMap<_, &PeerConfig> = peers.iter().map(|p| (p.public_key, p)).collect();
    let have: HashMap<_, &PeerConfig> = actual
        .peers
        .iter()
        .map(|p| (p.config.public_key, &p.config))
        .collect();
    // Removals first: a peer's subnets may be moving to another key.
    for key in actual.peers.iter().map(|p| p.config.public_key) {
        if !wanted.contains_key(&key) {
            update.peers.push(PeerChange::Remove(key));
        }
    }
    for peer in peers {
        let same = have
            .get(&peer.public_key)
            .is_some_and(|h| **h == peer.clone().normalized());
        if !same {
            update.peers.push(PeerChange::Set(peer.clone()));
        }
    }
    update
}

#[cfg(test)]
mod tests {
    use cni_linux::wireguard::{Peer, PublicKey};

    use super::*;

    fn config(b: u8, net: &str) -> PeerConfig {
        PeerConfig {
            public_key: PublicKey([b; 32]),
            preshared_key: None,
            endpoint: Some("198.18.0.12:51820".parse().unwrap()),
            persistent_keepalive: 0,
            allowed_ips: vec![net.parse().unwrap()],
        }
    }

    fn running(peers: Vec<PeerConfig>) -> Device {
        Device {
            private_key: Some(SecretKey::from_bytes([1; 32])),
            listen_port: 51820,
            peers: peers
                .into_iter()
                .map(|config| Peer {
                    config,
                    last_handshake: None,
                    rx_bytes: 7,
                    tx_bytes: 9,
                })
                .collect(),
        }
    }

    #[test]
    fn an_identical_device_needs_nothing() {
        let peers = vec![config(2, "198.19.2.0/24"), config(3, "198.19.3.0/24")];
        let d = running(peers.clone());
        let key = SecretKey::from_bytes([1; 32]);
        assert!(diff(&d, key, 51820, Some(&peers)).is_empty());
        assert!(diff(&d, key, 51820, None).is_empty());
    }

    #[test]
    fn only_what_differs_changes_and_removals_come_first() {
        let d = running(vec![config(2, "198.19.2.0/24"), config(3, "198.19.3.0/24")]);
        let mut moved = config(3, "198.19.3.0/24");
        moved.endpoint = Some("198.18.0.99:51820".parse().unwrap());
        let wanted = vec![config(4, "198.19.2.0/24"), moved.clone()];
        let update = diff(&d, SecretKey::from_bytes([5; 32]), 51821, Some(&wanted));
        assert_eq!(update.private_key, Some(SecretKey::from_bytes([5; 32])));
        assert_eq!(update.listen_port, Some(51821));
        assert!(!update.replace_peers);
        assert_eq!(
            update.peers,
            vec![
                PeerChange::Remove(PublicKey([2; 32])),
                PeerChange::Set(config(4, "198.19.2.0/24")),
                PeerChange::Set(moved),
            ]
        );
        // Peers left alone without a list.
        let update = diff(&d, SecretKey::from_bytes([1; 32]), 51820, None);
        assert!(update.is_empty());
    }
}
