//! The native layer's words for cephx failures, for `glance-rbd-native`, which talks to Ceph
//! through the `rados` module: its messages then read as those of uploads and downloads.

use pyo3::prelude::*;

use glance_rbd_core::error;
use glance_rbd_core::rbd::cluster::{Cluster, ConnectOptions};

/// The message of a connect with these settings that failed with `errno` at `rados_connect`:
/// the conf file read again, and what the keyring holds for the user. Nothing connects.
#[pyfunction(name = "_connect_failure")]
#[pyo3(signature = (errno, *, conffile = None, user = None))]
pub(crate) fn connect_failure(
    py: Python<'_>,
    errno: i32,
    conffile: Option<String>,
    user: Option<String>,
) -> String {
    let options = ConnectOptions::new(conffile, user, None);
    py.detach(|| Cluster::connect_failure(&options, errno).to_string())
}

/// What to tell the operator when the cluster refuses `entity` an operation on `pool` (EPERM,
/// EACCES) or leaves it unanswered (ETIMEDOUT), as the native errors say it; None for any other
/// errno.
#[pyfunction(name = "_caps_advice")]
#[pyo3(signature = (errno, pool, entity = None))]
pub(crate) fn caps_advice(errno: i32, pool: &str, entity: Option<&str>) -> Option<String> {
    error::caps_advice(errno, pool, entity)
}

/// The caps of glance's documented cephx user on `pool`, as `ceph auth caps` takes them.
#[pyfunction(name = "_glance_caps")]
pub(crate) fn glance_caps(pool: &str) -> String {
    glance_rbd_core::rbd::keyring::glance_caps(pool)
}
