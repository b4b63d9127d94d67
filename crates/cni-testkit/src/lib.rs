//! cni-testkit
