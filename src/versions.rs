//! `_library_versions`: the librbd, librados and OpenSSL this process loaded, for the operator's
//! pre-flight check (`glance_rbd_core::rbd::versions`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use glance_rbd_core::rbd::versions;

#[pyfunction(name = "_library_versions")]
pub(crate) fn library_versions(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let loaded = versions::loaded();
    let dict = PyDict::new(py);
    dict.set_item("librbd", loaded.librbd)?;
    dict.set_item("librados", loaded.librados)?;
    dict.set_item("openssl", loaded.openssl.as_str())?;
    dict.set_item("ceph", loaded.ceph())?;
    dict.set_item("oldest_ceph", versions::OLDEST_CEPH)?;
    Ok(dict)
}
