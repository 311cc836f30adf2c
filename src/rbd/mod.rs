//! The librbd and librados layer: connections, pools, images and asynchronous operations.
//! Plain Rust, tested with `cargo test`; it may not depend on PyO3 or on the other layers.

pub(crate) mod cluster;
pub(crate) mod completion;
mod exit;
pub(crate) mod ffi;
pub(crate) mod image;
pub(crate) mod keyring;
pub(crate) mod omap;
pub(crate) mod signals;
