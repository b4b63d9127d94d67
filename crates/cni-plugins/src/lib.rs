//! cni-plugins
