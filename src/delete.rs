//! `_delete_image`, the Python face of a delete (`glance_rbd_core::delete`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{detach, logbridge};
use glance_rbd_core::delete::{self, Deleted, Rules};
use glance_rbd_core::error::Result;
use glance_rbd_core::rbd::cluster::{Cluster, ConnectOptions};

/// Deletes image `image` of `pool`, and first its `snapshot`, as glance_store's stock driver
/// does, without waiting for its data to go: the image moves to the pool's trash, and its data
/// is removed in the background. Returns (its trash id, whether its data is being removed): an
/// image with other snapshots stays in the trash, as stock leaves it.
///
/// `connect` names the cluster in one dict: the keywords `RbdReader` and `RbdWriter` take for
/// it, as `compat.connection(store)` reads them off a store for all three.
#[pyfunction(name = "_delete_image")]
#[pyo3(signature = (
    pool, image, snapshot = None, *, connect = None,
    refuse_clones_first = false, trash_with_snapshots = true,
))]
pub(crate) fn delete_image(
    py: Python<'_>,
    pool: String,
    image: String,
    snapshot: Option<String>,
    connect: Option<&Bound<'_, PyDict>>,
    refuse_clones_first: bool,
    trash_with_snapshots: bool,
) -> PyResult<(String, bool)> {
    logbridge::operation_starts();
    let connect = connect_options(connect)?;
    let rules = Rules {
        refuse_clones_first,
        trash_with_snapshots,
    };
    let deleted = detach::run(py, |poll| -> Result<Deleted> {
        Cluster::shared(&connect)?.start_transfer(|cluster| {
            delete::delete(cluster, &pool, &image, snapshot.as_deref(), rules, poll)
        })
    });
    logbridge::flush();
    Ok(match deleted? {
        Deleted::Purging { id } => (id, true),
        Deleted::KeptInTrash { id } => (id, false),
    })
}

/// `connect`'s keys: glance's conf file, its cephx user and its rados_connect_timeout, each
/// optional; another key is a TypeError, not a setting quietly dropped.
fn connect_options(connect: Option<&Bound<'_, PyDict>>) -> PyResult<ConnectOptions> {
    let (mut conffile, mut user, mut connect_timeout) = (None, None, None);
    for (key, value) in connect.iter().flat_map(|dict| dict.iter()) {
        match key.extract::<String>()?.as_str() {
            "conffile" => conffile = value.extract()?,
            "user" => user = value.extract()?,
            "connect_timeout" => connect_timeout = value.extract()?,
            other => {
                return Err(PyTypeError::new_err(format!(
                    "connect has no key '{other}'"
                )));
            }
        }
    }
    Ok(ConnectOptions::new(conffile, user, connect_timeout))
}
