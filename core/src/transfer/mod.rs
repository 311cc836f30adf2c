//! The transfer core: one upload or download of a whole image over the `rbd` layer, with the
//! bytes in flight bounded. Plain Rust, tested with `cargo test`.

pub mod background;
pub(crate) mod budget;
pub mod digest;
pub mod download;
pub(crate) mod fence;
pub mod in_flight;
pub(crate) mod janitor;
pub(crate) mod mark;
pub mod progress;
pub mod shares;
pub mod upload;
pub mod zeros;
