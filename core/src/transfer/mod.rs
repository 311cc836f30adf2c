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
pub(crate) mod rss;
pub mod shares;
pub mod upload;
pub mod zeros;

#[cfg(test)]
mod scenarios;

pub use mark::identity_object;

use crate::error::{Error, Result};

/// What an upload or a download refuses before it connects: no image name, or a bound of its
/// own that holds no byte.
pub fn check_arguments(image: &str, max_in_flight: Option<usize>) -> Result<()> {
    if image.is_empty() {
        return Err(Error::Usage("image name must not be empty".into()));
    }
    max_in_flight.map_or(Ok(()), shares::check_bound)
}
