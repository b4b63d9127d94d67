//! cni-plugin
