//! cni-linux
