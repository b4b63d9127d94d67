//! Typed errors. Every error knows the CNI error code a plugin should answer with.

use std::net::IpAddr;
use std::path::PathBuf;

use cni_types::FieldError;
use ipnet::IpNet;

/// CNI error codes used by this crate (CNI spec, "Error" section).
pub mod code {
    /// Failure to decode content (malformed JSON).
    pub const DECODING_FAILURE: u32 = 6;
    /// Invalid network config.
    pub const INVALID_CONFIG: u32 = 7;
    /// Unknown container (CHECK found nothing for the attachment).
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid environment variables (container id, interface name).
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Try again later: a transient condition.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot service ADD requests.
    pub const NOT_AVAILABLE: u32 = 50;
    /// Generic error, what the Go plugin answers for everything it does not classify.
    pub const GENERIC: u32 = 999;
}

/// A problem with the `ipam` configuration or with the request-level inputs host-local reads
/// (runtimeConfig, args, CNI_ARGS `IP`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to decode network config: {0}")]
    Json(#[source] serde_json::Error),
    #[error("field {field}: expected {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    #[error("field {field}: invalid IP address {value:?}")]
    InvalidIp { field: String, value: String },
    #[error("field {field}: invalid CIDR address {value:?}")]
    InvalidCidr { field: String, value: String },
    #[error("field {field}: {value} is not an integer that fits")]
    InvalidInteger { field: String, value: String },
    #[error("no IP ranges specified")]
    NoRanges,
    #[error("invalid range set {set}: empty range set")]
    EmptyRangeSet { set: usize },
    #[error("invalid range set {set}: range {range} has no subnet")]
    MissingSubnet { set: usize, range: usize },
    #[error("invalid range set {set}: mixed address families")]
    MixedFamilies { set: usize },
    #[error("invalid range set {set}: Network {subnet} too small to allocate from")]
    SubnetTooSmall { set: usize, subnet: IpNet },
    #[error("invalid range set {set}: IPNet IP and Mask version mismatch in {subnet}")]
    SubnetFamilyMismatch { set: usize, subnet: IpNet },
    #[error(
        "invalid range set {set}: Network has host bits set. For a subnet mask of length {} the network address is {}",
        subnet.prefix_len(),
        subnet.network()
    )]
    HostBitsSet { set: usize, subnet: IpNet },
    #[error("invalid range set {set}: RangeStart {start} not in network {subnet}")]
    RangeStartOutside {
        set: usize,
        start: IpAddr,
        subnet: IpNet,
    },
    #[error("invalid range set {set}: RangeEnd {end} not in network {subnet}")]
    RangeEndOutside {
        set: usize,
        end: IpAddr,
        subnet: IpNet,
    },
    #[error("invalid range set {set}: RangeStart {start} is after RangeEnd {end}")]
    RangeStartAfterEnd {
        set: usize,
        start: IpAddr,
        end: IpAddr,
    },
    #[error("invalid range set {set}: gateway {gateway} is not of the family of network {subnet}")]
    GatewayFamilyMismatch {
        set: usize,
        gateway: IpAddr,
        subnet: IpNet,
    },
    #[error("invalid range set {set}: subnets {first} and {second} overlap")]
    RangesOverlap {
        set: usize,
        first: String,
        second: String,
    },
    #[error("range set {first} overlaps with {second}")]
    RangeSetsOverlap { first: usize, second: usize },
    #[error("CNI version {version} does not support more than 1 address per family")]
    TooManyPerFamily { version: String },
    #[error("routes[{index}]: missing dst")]
    MissingRouteDst { index: usize },
    #[error("cannot understand ip: {value:?}")]
    InvalidRequestedIp { value: String },
    #[error("requested IP {ip} is in no configured range")]
    RequestedIpNotInRange { ip: IpAddr },
    #[error("requested IPs {first} and {second} both fall in range set {set}")]
    RequestedIpsShareRangeSet {
        set: usize,
        first: IpAddr,
        second: IpAddr,
    },
    #[error("requested ip {ip} is subnet's gateway")]
    RequestedIpIsGateway { ip: IpAddr },
    #[error("requested ip {ip} is the network or broadcast address of {subnet}")]
    RequestedIpReserved { ip: IpAddr, subnet: IpNet },
    #[error("{field}: expected an address in CIDR notation, got {value:?}")]
    InvalidStaticAddress { field: String, value: String },
    #[error("invalid gateway address: {value}")]
    InvalidGatewayArg { value: String },
    #[error("invalid network name {name:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")]
    InvalidNetworkName { name: String },
}

/// A field the Go-style reader (`cni_types::GoObject`) cannot read is the same error here.
impl From<FieldError> for ConfigError {
    fn from(e: FieldError) -> ConfigError {
        match e {
            FieldError::Json(e) => ConfigError::Json(e),
            FieldError::WrongType { field, expected } => ConfigError::WrongType { field, expected },
            FieldError::InvalidIp { field, value } => ConfigError::InvalidIp { field, value },
            FieldError::InvalidCidr { field, value } => ConfigError::InvalidCidr { field, value },
            FieldError::InvalidInteger { field, value } => {
                ConfigError::InvalidInteger { field, value }
            }
        }
    }
}

impl ConfigError {
    /// The CNI error code for this error.
    pub fn cni_code(&self) -> u32 {
        match self {
            ConfigError::Json(_) => code::DECODING_FAILURE,
            _ => code::INVALID_CONFIG,
        }
    }
}

/// Any failure of a host-local operation.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("invalid container id {id:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")]
    InvalidContainerId { id: String },
    #[error(
        "invalid interface name {name:?}: must be 1-15 bytes, not . or .., without / : or whitespace"
    )]
    InvalidIfName { name: String },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing the host-local directory {}: {reason}", path.display())]
    UnsafeDirectory { path: PathBuf, reason: String },
    #[error("timed out waiting for the lock {}", path.display())]
    LockTimeout { path: PathBuf },
    #[error("no IP addresses available in range set: {ranges}")]
    RangeSetExhausted { ranges: String },
    #[error("requested IP address {ip} is not available in range set {ranges}")]
    RequestedIpUnavailable { ip: IpAddr, ranges: String },
    #[error("{ip} has been allocated to {id}, duplicate allocation is not allowed")]
    DuplicateAllocation { ip: IpAddr, id: String },
    #[error("failed to allocate for range {index}: {source}")]
    RangeSetFailed {
        index: usize,
        #[source]
        source: Box<IpamError>,
    },
    #[error("host-local: Failed to find address added by container {id}")]
    NotFound { id: String },
    #[error("host-local: address {ip} is not reserved for container {id} interface {ifname}")]
    AddressNotReserved {
        ip: IpAddr,
        id: String,
        ifname: String,
    },
    #[error("host-local: range set {index} ({ranges}) is exhausted")]
    StatusExhausted { index: usize, ranges: String },
    #[error("host-local: data directory {} is not writable: {source}", path.display())]
    StatusNotWritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("static: Failed to match addr {ip}")]
    StaticMismatch { ip: IpAddr },
    #[error("{}", join(.0))]
    Multiple(Vec<IpamError>),
}

fn join(errors: &[IpamError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(";")
}

impl IpamError {
    /// The CNI error code for this error.
    pub fn cni_code(&self) -> u32 {
        match self {
            IpamError::Config(e) => e.cni_code(),
            IpamError::InvalidContainerId { .. } | IpamError::InvalidIfName { .. } => {
                code::INVALID_ENV
            }
            IpamError::Io { .. } | IpamError::UnsafeDirectory { .. } => code::IO_FAILURE,
            IpamError::LockTimeout { .. } => code::TRY_AGAIN_LATER,
            IpamError::RangeSetExhausted { .. }
            | IpamError::RequestedIpUnavailable { .. }
            | IpamError::DuplicateAllocation { .. }
            | IpamError::StaticMismatch { .. } => code::GENERIC,
            IpamError::RangeSetFailed { source, .. } => source.cni_code(),
            IpamError::NotFound { .. } | IpamError::AddressNotReserved { .. } => {
                code::UNKNOWN_CONTAINER
            }
            IpamError::StatusExhausted { .. } | IpamError::StatusNotWritable { .. } => {
                code::NOT_AVAILABLE
            }
            IpamError::Multiple(errors) => errors.first().map_or(code::GENERIC, Self::cni_code),
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        IpamError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
