//! `_delete_image`, the Python face of a delete (`glance_rbd_core::delete`).

use pyo3::prelude::*;

use crate::exceptions::OrRaise;
use crate::logbridge;
use glance_rbd_core::delete::{self, Deleted, Rules};
use glance_rbd_core::error::Result;
use glance_rbd_core::rbd::cluster::{Cluster, ConnectOptions};

/// Deletes image `image` of `pool`, and first its `snapshot`, as glance_store's stock driver
/// does, without waiting for its data to go: the image moves to the pool's trash, and its data
/// is removed in the background. Returns (its trash id, whether its data is being removed): an
/// image with other snapshots stays in the trash, as stock leaves it.
#[pyfunction(name = "_delete_image")]
#[pyo3(signature = (
    pool, image, snapshot = None, *, conffile = None, user = None, connect_timeout = None,
    refuse_clones_first = false, trash_with_snapshots = true,
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn delete_image(
    py: Python<'_>,
    pool: String,
    image: String,
    snapshot: Option<String>,
    conffile: Option<String>,
    user: Option<String>,
    connect_timeout: Option<u32>,
    refuse_clones_first: bool,
    trash_with_snapshots: bool,
) -> PyResult<(String, bool)> {
    logbridge::operation_starts();
    let connect = ConnectOptions::new(conffile, user, connect_timeout);
    let rules = Rules {
        refuse_clones_first,
        trash_with_snapshots,
    };
    let deleted = py
        .detach(|| -> Result<Deleted> {
            Cluster::shared(&connect)?.start_transfer(|cluster| {
                delete::delete(cluster, &pool, &image, snapshot.as_deref(), rules)
            })
        })
        .or_raise();
    logbridge::flush();
    Ok(match deleted? {
        Deleted::Purging { id } => (id, true),
        Deleted::KeptInTrash { id } => (id, false),
    })
}
