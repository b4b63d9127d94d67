//! cni-invoke
