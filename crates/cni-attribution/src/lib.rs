//! Attribution: who owns a kernel object or a file a CNI plugin made.
//!
//! - [`AttachmentId`]: the one identity of an attachment (network, container ID, interface
//!   name; SPEC.md, Section 2: "the tuple (network name, CNI_CONTAINERID, CNI_IFNAME)"), and
//!   every tag, hash and per-attachment name derived from it.
//! - [`names`]: the tables, chains, directories and file names the plugins use, shared with
//!   the Go reference plugins where a layout is common.
//! - [`recognise`]: the readers that parse a name, comment or file back into what owns it.
//!
//! This crate sits at the bottom of the stack (no other workspace crate below it), so the
//! plugins, host-local, the runtime, `rcni doctor` and `rcni-node` all name things from one
//! place, and a change to a name shows up in every reader at once.

mod comment;
mod hash;
mod id;
pub mod names;
pub mod recognise;

pub use comment::{fit_comment, MAX_COMMENT_LEN};
pub use id::AttachmentId;
