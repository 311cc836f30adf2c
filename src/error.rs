//! The one error type of the native layer, carrying the errno that librbd or librados returned.

use std::fmt;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A librbd or librados call failed; `target` names the pool and image.
    #[error("{op} failed for {target}: {} (errno {errno})", strerror(*errno))]
    Ceph {
        op: &'static str,
        target: Target,
        errno: i32,
    },
    /// The cluster could not be reached or refused us.
    #[error("cannot connect to the Ceph cluster ({detail}): {} (errno {errno})", strerror(*errno))]
    Connect { detail: String, errno: i32 },
    /// The caller asked for something impossible: bad argument or wrong state.
    #[error("{0}")]
    Usage(String),
    /// A wait was cut short by the caller (a signal); the upload has been aborted.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    pub fn ceph(op: &'static str, target: &Target, ret: i64) -> Self {
        Error::Ceph {
            op,
            target: target.clone(),
            errno: errno_of(ret),
        }
    }

    /// The errno behind this error, when Ceph reported one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Ceph { errno, .. } | Error::Connect { errno, .. } => Some(*errno),
            Error::Usage(_) | Error::Interrupted => None,
        }
    }
}

/// What an operation acted on, for error messages: a pool, or an image in a pool.
#[derive(Debug, Clone)]
pub struct Target {
    pub pool: String,
    pub image: Option<String>,
}

impl Target {
    pub fn pool(pool: &str) -> Self {
        Target {
            pool: pool.to_owned(),
            image: None,
        }
    }

    pub fn image(pool: &str, image: &str) -> Self {
        Target {
            pool: pool.to_owned(),
            image: Some(image.to_owned()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.image {
            Some(image) => write!(f, "image '{image}' in pool '{}'", self.pool),
            None => write!(f, "pool '{}'", self.pool),
        }
    }
}

/// librbd and librados return `-errno`; some paths return it as ssize_t.
pub fn errno_of(ret: i64) -> i32 {
    i32::try_from(ret.unsigned_abs()).unwrap_or(libc::EIO)
}

/// Turns a negative return into an error, keeps non-negative values.
pub fn check(ret: i64, op: &'static str, target: &Target) -> Result<i64> {
    if ret < 0 {
        Err(Error::ceph(op, target, ret))
    } else {
        Ok(ret)
    }
}

pub fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // Drop std's " (os error N)" suffix: the errno is printed once, by the caller.
    match text.rfind(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_pool_image_and_errno() {
        let err = Error::ceph("create", &Target::image("images", "abc"), -17);
        assert_eq!(
            err.to_string(),
            "create failed for image 'abc' in pool 'images': File exists (errno 17)"
        );
        assert_eq!(err.errno(), Some(libc::EEXIST));
    }

    #[test]
    fn check_keeps_non_negative_values() {
        let target = Target::pool("p");
        assert_eq!(check(5, "op", &target).unwrap(), 5);
        assert_eq!(check(-28, "op", &target).unwrap_err().errno(), Some(28));
    }
}
