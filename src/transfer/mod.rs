//! The transfer core: one upload or download of a whole image over the `rbd` layer, with the
//! bytes in flight bounded. Plain Rust, tested with `cargo test`; it may not depend on PyO3 or
//! on `bindings`.

pub(crate) mod background;
pub(crate) mod budget;
pub(crate) mod digest;
pub(crate) mod download;
pub(crate) mod fence;
pub(crate) mod in_flight;
pub(crate) mod janitor;
pub(crate) mod mark;
pub(crate) mod progress;
pub(crate) mod shares;
pub(crate) mod upload;
pub(crate) mod zeros;
