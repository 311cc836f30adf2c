//! The transfer core of glance-rbd-native, in plain Rust: no PyO3, no Python.
//!
//! Two layers, the second over the first: `rbd` (librbd and librados: connections, images,
//! asynchronous operations) and `transfer` (one upload or download of a whole image, with the
//! bytes in flight bounded). `error` is the one error type of both. The PyO3 extension (the
//! crate at the repository's root) is built over this one.

pub mod delete;
pub mod error;
pub mod io;
mod json;
#[cfg(test)]
mod memory;
pub mod rbd;
mod schedule;
pub mod sync;
#[cfg(test)]
mod testlog;
pub mod transfer;
pub mod wait;

// What the memcheck program (examples/lifecycle.rs) drives under valgrind, at the crate's root.
pub use error::{Error, Op, Target};
pub use rbd::cluster::{Cluster, ConnectOptions, IoCtx};
pub use rbd::image::{id_of, remove_with_snapshot};
pub use rbd::pool::RbdPool;
pub use transfer::download::{Destination, Download, DownloadOptions};
pub use transfer::in_flight::Buffer;
pub use transfer::upload::{Summary, Upload, UploadOptions};
pub use wait::Poll;
