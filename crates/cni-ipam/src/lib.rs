//! cni-ipam
