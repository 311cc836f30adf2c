//! The librbd and librados layer: connections, pools, images and asynchronous operations.
//! Plain Rust, tested with `cargo test`; it does not use `transfer`, which is built over it.

pub mod cluster;
pub(crate) mod completion;
mod exit;
pub(crate) mod ffi;
pub(crate) mod image;
pub mod keyring;
mod manager;
pub(crate) mod omap;
pub mod pool;
pub(crate) mod signals;
pub mod versions;
