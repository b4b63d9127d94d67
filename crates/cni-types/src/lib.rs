//! cni-types
