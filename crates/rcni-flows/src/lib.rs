//! The policy verdicts of a node as flows, shared by the node agent that records them and
//! the command line that reads them:
//!
//! - [`model`]: a flow (verdict, direction, protocol, source and destination with their
//!   pods, the policies, the rule, how many records and when) and its JSON line;
//! - [`store`]: the agent's bounded memory of recent flows, aggregating repeats;
//! - [`query`]: which flows a reader wants, as flags and as `/flows`'s query string;
//! - [`summary`]: the most frequent denied pairs (`rcni doctor`);
//! - [`client`]: asking an agent over its unix socket or its HTTP address.

pub mod client;
pub mod model;
pub mod query;
pub mod store;
pub mod summary;

pub use client::{Agent, ClientError};
pub use model::{Direction, Endpoint, Flow, Protocol, Verdict};
pub use query::Filter;
pub use store::{Bounds, FlowStore, Usage};
pub use summary::{denied_pairs, DeniedPair};
