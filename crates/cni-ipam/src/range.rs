//! Ranges and range sets: canonicalisation and validation as host-local does it, membership by
//! allocation bounds, and the round-robin candidate order.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::ConfigError;
use crate::ip::{self, canonical, next_ip, same_family, to_u128};

/// A range as written in the config, before defaults are applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSpec {
    pub subnet: Option<IpNet>,
    pub range_start: Option<IpAddr>,
    pub range_end: Option<IpAddr>,
    pub gateway: Option<IpAddr>,
}

/// A canonical range: every bound filled in and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The network (no host bits set).
    pub subnet: IpNet,
    /// First allocatable address, inclusive.
    pub range_start: IpAddr,
    /// Last allocatable address, inclusive.
    pub range_end: IpAddr,
    /// Returned with every address of this range and never allocated.
    pub gateway: IpAddr,
}

impl Range {
    /// Applies host-local's defaults and checks. `set` is the range set index, for error messages.
    pub fn canonicalize(set: usize, spec: &RangeSpec) -> Result<Range, ConfigError> {
        let subnet = spec
            .subnet
            .ok_or(ConfigError::MissingSubnet { set, range: 0 })?;
        if subnet.prefix_len() > subnet.max_prefix_len().saturating_sub(2) {
            return Err(ConfigError::SubnetTooSmall { set, subnet });
        }
        // `::ffff:a.b.c.d/n`: Go turns the address into IPv4 but keeps a 128-bit mask.
        if canonical(subnet.addr()) != subnet.addr() {
            return Err(ConfigError::SubnetFamilyMismatch { set, subnet });
        }
        if subnet.addr() != subnet.network() {
            return Err(ConfigError::HostBitsSet { set, subnet });
        }

        let gateway = match spec.gateway.map(canonical) {
            None => next_ip(subnet.network()),
            Some(gateway) if same_family(gateway, subnet.addr()) => gateway,
            Some(gateway) => {
                return Err(ConfigError::GatewayFamilyMismatch {
                    set,
                    gateway,
                    subnet,
                })
            }
        };

        let range_start = match spec.range_start.map(canonical) {
            None => next_ip(subnet.network()),
            Some(start) if subnet.contains(&start) => start,
            Some(start) => {
                return Err(ConfigError::RangeStartOutside { set, start, subnet });
            }
        };
        let range_end = match spec.range_end.map(canonical) {
            None => last_allocatable(&subnet),
            Some(end) if subnet.contains(&end) => end,
            Some(end) => return Err(ConfigError::RangeEndOutside { set, end, subnet }),
        };
        if to_u128(range_start) > to_u128(range_end) {
            return Err(ConfigError::RangeStartAfterEnd {
                set,
                start: range_start,
                end: range_end,
            });
        }

        Ok(Range {
            subnet,
            range_start,
            range_end,
            gateway,
        })
    }

    /// True when `addr` lies within this range's allocation bounds (not merely its subnet).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        same_family(addr, self.range_start)
            && self.subnet.contains(&addr)
            && to_u128(self.range_start) <= to_u128(addr)
            && to_u128(addr) <= to_u128(self.range_end)
    }

    /// True when the allocation bounds of the two ranges intersect.
    pub fn overlaps(&self, other: &Range) -> bool {
        same_family(self.range_start, other.range_start)
            && to_u128(self.range_start) <= to_u128(other.range_end)
            && to_u128(other.range_start) <= to_u128(self.range_end)
    }

    /// The IPv4 network and broadcast addresses, which are never handed out even when explicit
    /// bounds include them (Go would; a container with such an address cannot talk).
    pub fn is_network_or_broadcast(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() && (addr == self.subnet.network() || addr == self.subnet.broadcast())
    }

    /// True when the allocator may hand out `addr` from this range.
    pub fn is_allocatable(&self, addr: IpAddr) -> bool {
        self.contains(addr) && addr != self.gateway && !self.is_network_or_broadcast(addr)
    }

    /// How many addresses the allocator may hand out from this range (saturating at `u128::MAX`).
    pub fn capacity(&self) -> u128 {
        let span = (to_u128(self.range_end) - to_u128(self.range_start)).saturating_add(1);
        let mut excluded = 0;
        if self.contains(self.gateway) {
            excluded += 1;
        }
        if self.subnet.addr().is_ipv4() {
            for reserved in [self.subnet.network(), self.subnet.broadcast()] {
                if reserved != self.gateway && self.contains(reserved) {
                    excluded += 1;
                }
            }
        }
        span - excluded
    }
}

/// Go prints a range as `start-end`; exhaustion errors list a set's ranges this way.
impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}",
            ip::go_string(self.range_start),
            ip::go_string(self.range_end)
        )
    }
}

/// The last default-allocatable address: the broadcast address minus one for IPv4, the all-ones
/// address for IPv6.
fn last_allocatable(subnet: &IpNet) -> IpAddr {
    let last = subnet.broadcast();
    match last {
        IpAddr::V4(v4) => IpAddr::V4(u32::from(v4).wrapping_sub(1).into()),
        v6 => v6,
    }
}

/// The ranges of one range set: one address is allocated per set and attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range>,
}

impl RangeSet {
    /// Canonicalises every range and checks the set: not empty, one family, no overlaps.
    pub fn canonicalize(set: usize, specs: &[RangeSpec]) -> Result<RangeSet, ConfigError> {
        if specs.is_empty() {
            return Err(ConfigError::EmptyRangeSet { set });
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(specs.len());
        for (index, spec) in specs.iter().enumerate() {
            let range = Range::canonicalize(set, spec).map_err(|err| match err {
                ConfigError::MissingSubnet { set, .. } => {
                    ConfigError::MissingSubnet { set, range: index }
                }
                other => other,
            })?;
            if let Some(first) = ranges.first() {
                if !same_family(first.range_start, range.range_start) {
                    return Err(ConfigError::MixedFamilies { set });
                }
            }
            ranges.push(range);
        }
        for (i, first) in ranges.iter().enumerate() {
            if let Some(second) = ranges[i + 1..].iter().find(|r| first.overlaps(r)) {
                return Err(ConfigError::RangesOverlap {
                    set,
                    first: first.to_string(),
                    second: second.to_string(),
                });
            }
        }
        Ok(RangeSet { ranges })
    }

    /// The ranges, in config order (never empty).
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// True for an IPv4 set.
    pub fn is_ipv4(&self) -> bool {
        self.ranges[0].range_start.is_ipv4()
    }

    /// The first range whose allocation bounds contain `addr`.
    pub fn range_for(&self, addr: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(addr))
    }

    /// True when some range's allocation bounds contain `addr`.
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.range_for(addr).is_some()
    }

    /// True when any range of one set overlaps any range of the other.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges
            .iter()
            .any(|a| other.ranges.iter().any(|b| a.overlaps(b)))
    }

    /// How many addresses the allocator may hand out from this set (saturating).
    pub fn capacity(&self) -> u128 {
        self.ranges
            .iter()
            .fold(0u128, |sum, r| sum.saturating_add(r.capacity()))
    }

    /// Candidates in host-local's round-robin order, starting after `last_reserved` when that lies
    /// in this set, otherwise at the first range's start.
    pub fn candidates(&self, last_reserved: Option<IpAddr>) -> Candidates<'_> {
        Candidates::new(self, last_reserved)
    }
}

/// Go formats a set as its ranges joined by `,`.
impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

/// Go's `RangeIter`: walk forward through each range, jump to the next range's start past a
/// range's end, wrap from the last range to the first, and stop on returning to the first
/// position visited. Addresses a range may not hand out are skipped.
#[derive(Debug, Clone)]
pub struct Candidates<'a> {
    set: &'a RangeSet,
    range_index: usize,
    cursor: Option<IpAddr>,
    first: Option<IpAddr>,
    done: bool,
}

impl<'a> Candidates<'a> {
    fn new(set: &'a RangeSet, last_reserved: Option<IpAddr>) -> Self {
        let resume = last_reserved.map(canonical).and_then(|last| {
            set.ranges
                .iter()
                .position(|r| r.contains(last))
                .map(|index| (index, last))
        });
        match resume {
            Some((range_index, last)) => Candidates {
                set,
                range_index,
                cursor: Some(last),
                first: None,
                done: false,
            },
            None => Candidates {
                set,
                range_index: 0,
                cursor: None,
                first: None,
                done: false,
            },
        }
    }

    /// Moves the cursor one position; false once the walk is back where it began.
    fn advance(&mut self) -> bool {
        let ranges = &self.set.ranges;
        let next = match self.cursor {
            None => ranges[self.range_index].range_start,
            Some(cursor) if cursor == ranges[self.range_index].range_end => {
                self.range_index = (self.range_index + 1) % ranges.len();
                ranges[self.range_index].range_start
            }
            Some(cursor) => next_ip(cursor),
        };
        self.cursor = Some(next);
        match self.first {
            None => {
                self.first = Some(next);
                true
            }
            Some(first) => next != first,
        }
    }
}

impl<'a> Iterator for Candidates<'a> {
    /// The candidate address and the range it belongs to.
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if !self.advance() {
                self.done = true;
                break;
            }
            let range = &self.set.ranges[self.range_index];
            if let Some(addr) = self.cursor.filter(|addr| range.is_allocatable(*addr)) {
                return Some((addr, range));
            }
        }
        None
    }
}
