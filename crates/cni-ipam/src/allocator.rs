//! The host-local operations: ADD (allocate), DEL (release), CHECK, GC and STATUS over a
//! [`DiskStore`]. The store's lock is held for the whole of each operation, so an ADD is atomic
//! across range sets (Go locks once per set, which is compatible: it only excludes more).

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;

use crate::config::HostLocalConfig;
use crate::error::{ConfigError, IpamError};
use crate::ident::check_attachment;
use crate::ip::{canonical, with_prefix};
use crate::range::{Range, RangeSet};
use crate::store::{DiskStore, Held, Lease, LockedStore};

/// One address handed out for one range set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The address with the prefix length of its range's subnet (host bits kept).
    pub address: IpNet,
    /// The range's gateway; host-local always has one (it defaults to subnet + 1).
    pub gateway: Option<IpAddr>,
    /// Index of the range set (its rangeID).
    pub range_set: usize,
}

/// host-local over one network's store.
#[derive(Debug, Clone)]
pub struct HostLocal {
    range_sets: Vec<RangeSet>,
    store: DiskStore,
}

impl HostLocal {
    /// host-local for a parsed config: its range sets, network name and data directory.
    pub fn new(config: &HostLocalConfig) -> Result<Self, IpamError> {
        Self::from_parts(config.range_sets.clone(), &config.name, &config.data_dir)
    }

    /// host-local from its parts. No I/O happens until an operation runs.
    pub fn from_parts(
        range_sets: Vec<RangeSet>,
        network: &str,
        data_dir: &Path,
    ) -> Result<Self, IpamError> {
        if range_sets.is_empty() {
            return Err(ConfigError::NoRanges.into());
        }
        Ok(HostLocal {
            range_sets,
            store: DiskStore::new(data_dir, network)?,
        })
    }

    /// See [`DiskStore::with_lock_timeout`].
    pub fn with_lock_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.store = self.store.with_lock_timeout(timeout);
        self
    }

    /// The range sets, in rangeID order.
    pub fn range_sets(&self) -> &[RangeSet] {
        &self.range_sets
    }

    /// The store (for its directory).
    pub fn store(&self) -> &DiskStore {
        &self.store
    }

    /// ADD: one address per range set, in set order. `requested` holds at most one address per
    /// set (see [`assign_requested`]). An attachment that already holds an address in a set gets
    /// it back (a repeated ADD is idempotent, where Go fails with "duplicate allocation"). If any
    /// set fails, every address created by this call is released again.
    pub fn allocate(
        &self,
        container_id: &str,
        ifname: &str,
        requested: &[IpAddr],
    ) -> Result<Vec<Allocation>, IpamError> {
        check_attachment(container_id, ifname)?;
        let wanted = assign_requested(&self.range_sets, requested)?;
        let store = self.store.lock()?;
        let held = store.held_by(container_id, ifname)?;
        let attachment = Attachment {
            container_id,
            ifname,
            held: &held,
        };

        let mut created: Vec<IpAddr> = Vec::new();
        let mut allocations = Vec::with_capacity(self.range_sets.len());
        for (index, set) in self.range_sets.iter().enumerate() {
            let step = allocate_in_set(&store, &attachment, index, set, wanted[index]);
            match step {
                Ok((allocation, is_new)) => {
                    if is_new {
                        created.push(allocation.address.addr());
                    }
                    allocations.push(allocation);
                }
                Err(source) => {
                    roll_back(&store, &created);
                    return Err(IpamError::RangeSetFailed {
                        index,
                        source: Box::new(source),
                    });
                }
            }
        }
        Ok(allocations)
    }

    /// DEL: releases the attachment's addresses in every range set (see [`LockedStore::release`]).
    /// Nothing to release is success.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Vec<IpAddr>, IpamError> {
        check_attachment(container_id, ifname)?;
        self.store.lock()?.release(container_id, ifname)
    }

    /// CHECK as Go does it: succeeds when the attachment (or, legacy, its container) holds at
    /// least one address. Returns those leases.
    pub fn check(&self, container_id: &str, ifname: &str) -> Result<Vec<Lease>, IpamError> {
        check_attachment(container_id, ifname)?;
        let Held {
            mut current,
            legacy,
        } = self.store.lock()?.held_by(container_id, ifname)?;
        current.extend(legacy);
        let held = current;
        if held.is_empty() {
            return Err(IpamError::NotFound {
                id: container_id.to_string(),
            });
        }
        Ok(held)
    }

    /// A stricter CHECK: every address in `expected` (e.g. from prevResult) is still reserved for
    /// this attachment.
    pub fn check_addresses(
        &self,
        container_id: &str,
        ifname: &str,
        expected: &[IpAddr],
    ) -> Result<(), IpamError> {
        let held = self.check(container_id, ifname)?;
        match expected
            .iter()
            .map(|addr| canonical(*addr))
            .find(|addr| !held.iter().any(|lease| lease.ip == *addr))
        {
            Some(ip) => Err(IpamError::AddressNotReserved {
                ip,
                id: container_id.to_string(),
                ifname: ifname.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// GC: releases every lease not owned by one of the `valid` attachments. Returns the
    /// released leases.
    pub fn gc(&self, valid: &[cni_attribution::AttachmentId]) -> Result<Vec<Lease>, IpamError> {
        self.store.lock()?.gc(valid)
    }

    /// STATUS: fails when the store cannot take new leases, or when some range set has no free
    /// address left (an ADD would then fail).
    pub fn status(&self) -> Result<(), IpamError> {
        let not_writable = |source| IpamError::StatusNotWritable {
            path: self.store.dir().to_path_buf(),
            source,
        };
        let store = self.store.lock().map_err(|e| match e {
            IpamError::Io { source, .. } => not_writable(source),
            other => other,
        })?;
        store.probe_writable().map_err(not_writable)?;
        let leases = store.leases()?;
        for (index, set) in self.range_sets.iter().enumerate() {
            let used = leases
                .iter()
                .filter(|lease| {
                    set.range_for(lease.ip)
                        .is_some_and(|r| r.is_allocatable(lease.ip))
                })
                .count();
            if u128::try_from(used).unwrap_or(u128::MAX) >= set.capacity() {
                return Err(IpamError::StatusExhausted {
                    index,
                    ranges: set.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Assigns each requested IP to the range set whose allocation bounds contain it, checking that
/// it may be handed out. Go keeps requested IPs in a map and tries a random one when two fall in
/// one set, then fails on the leftover; that case is an error up front here. Duplicates collapse.
pub fn assign_requested(
    range_sets: &[RangeSet],
    requested: &[IpAddr],
) -> Result<Vec<Option<IpAddr>>, ConfigError> {
    let mut by_set: Vec<Option<IpAddr>> = vec![None; range_sets.len()];
    for requested in requested.iter().map(|addr| canonical(*addr)) {
        let (set, range) = range_sets
            .iter()
            .enumerate()
            .find_map(|(set, rs)| rs.range_for(requested).map(|range| (set, range)))
            .ok_or(ConfigError::RequestedIpNotInRange { ip: requested })?;
        if requested == range.gateway {
            return Err(ConfigError::RequestedIpIsGateway { ip: requested });
        }
        if range.is_network_or_broadcast(requested) {
            return Err(ConfigError::RequestedIpReserved {
                ip: requested,
                subnet: range.subnet,
            });
        }
        match by_set[set] {
            Some(first) if first != requested => {
                return Err(ConfigError::RequestedIpsShareRangeSet {
                    set,
                    first,
                    second: requested,
                })
            }
            _ => by_set[set] = Some(requested),
        }
    }
    Ok(by_set)
}

/// The attachment being served, with the leases it held when the lock was taken.
struct Attachment<'a> {
    container_id: &'a str,
    ifname: &'a str,
    held: &'a Held,
}

/// Allocates in one set; the flag says whether a new lease file was created.
fn allocate_in_set(
    store: &LockedStore<'_>,
    attachment: &Attachment<'_>,
    index: usize,
    set: &RangeSet,
    requested: Option<IpAddr>,
) -> Result<(Allocation, bool), IpamError> {
    let Attachment {
        container_id,
        ifname,
        held,
    } = *attachment;
    let mut mine = held
        .current
        .iter()
        .filter_map(|l| set.range_for(l.ip).map(|range| (l.ip, range)));

    if let Some(addr) = requested {
        if let Some((_, range)) = mine.find(|(ip, _)| *ip == addr) {
            return Ok((allocation(range, addr, index), false));
        }
        let unavailable = || IpamError::RequestedIpUnavailable {
            ip: addr,
            ranges: set.to_string(),
        };
        let range = set.range_for(addr).ok_or_else(unavailable)?;
        if !store.reserve(container_id, ifname, addr, index)? {
            return Err(unavailable());
        }
        return Ok((allocation(range, addr, index), true));
    }

    if let Some((addr, range)) = mine.next() {
        return Ok((allocation(range, addr, index), false));
    }
    if let Some(legacy) = held.legacy.iter().find(|l| set.contains(l.ip)) {
        return Err(IpamError::DuplicateAllocation {
            ip: legacy.ip,
            id: container_id.to_string(),
        });
    }
    // A taken address costs one stat: round-robin usually finds the first candidate free.
    for (addr, range) in set.candidates(store.last_reserved_ip(index)) {
        if store.reserve(container_id, ifname, addr, index)? {
            return Ok((allocation(range, addr, index), true));
        }
    }
    Err(IpamError::RangeSetExhausted {
        ranges: set.to_string(),
    })
}

/// What host-local returns for `addr` taken from `range`.
fn allocation(range: &Range, addr: IpAddr, index: usize) -> Allocation {
    Allocation {
        address: with_prefix(addr, &range.subnet),
        gateway: Some(range.gateway),
        range_set: index,
    }
}

/// Releases the leases a failed ADD created; a failure here is only logged, the ADD's own error
/// is what the caller needs.
fn roll_back(store: &LockedStore<'_>, created: &[IpAddr]) {
    for addr in created {
        if let Err(e) = store.unreserve(*addr) {
            log::warn!("rolling back {addr}: {e}");
        }
    }
}
