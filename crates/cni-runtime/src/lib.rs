//! cni-runtime
