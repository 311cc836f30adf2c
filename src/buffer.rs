//! Turning the Python objects `write` accepts into bytes librbd can read after the call returns.
//!
//! `bytes` is immutable, so it is kept alive and read in place. Mutable buffers (bytearray,
//! memoryview, numpy arrays) are copied once while attached, so a caller that reuses its buffer
//! cannot change data that is still in flight.
//!
//! Built against the limited API of CPython 3.9 (abi3), which has no buffer protocol in C
//! (`PyObject_GetBuffer` came to it in 3.11): other exporters are read through `memoryview`.

use std::sync::Arc;

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};

use glance_rbd_core::transfer::in_flight::Buffer;

/// A `bytes` object held alive and read without a copy.
struct HeldBytes {
    _owner: Py<PyBytes>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes object is immutable and kept alive by `_owner`, so its storage may be read
// from any thread; dropping `Py` without the interpreter attached defers the decref safely.
unsafe impl Send for HeldBytes {}
// SAFETY: as above, shared reads of immutable memory.
unsafe impl Sync for HeldBytes {}

impl AsRef<[u8]> for HeldBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: ptr and len describe the storage of the bytes object that `_owner` keeps alive.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

pub(crate) fn extract(data: &Bound<'_, PyAny>) -> PyResult<Buffer> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(hold(bytes.clone()));
    }
    if let Ok(array) = data.cast::<PyUntypedArray>() {
        return copy_array(array);
    }
    if let Ok(bytearray) = data.cast::<PyByteArray>() {
        return Ok(Arc::new(bytearray.to_vec()));
    }
    if data.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "write() needs bytes-like data, not str",
        ));
    }
    copy_view(data)
}

fn hold(bytes: Bound<'_, PyBytes>) -> Buffer {
    let slice = bytes.as_bytes();
    Arc::new(HeldBytes {
        ptr: slice.as_ptr(),
        len: slice.len(),
        _owner: bytes.unbind(),
    })
}

/// Any other buffer exporter, as a memoryview of bytes: copied once into a `bytes` (`tobytes`),
/// which is then held like any other, and the view released at once so that the exporter may
/// resize again.
fn copy_view(data: &Bound<'_, PyAny>) -> PyResult<Buffer> {
    let view = PyMemoryView::from(data).map_err(|_| {
        PyTypeError::new_err(format!(
            "write() needs bytes, bytearray, memoryview or a numpy uint8 array, not {}",
            data.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    let copied = check_view(&view).and_then(|()| view.call_method0("tobytes"));
    view.call_method0("release")?;
    Ok(hold(copied?.cast_into::<PyBytes>()?))
}

fn check_view(view: &Bound<'_, PyMemoryView>) -> PyResult<()> {
    if !view.getattr("c_contiguous")?.is_truthy()? {
        return Err(PyValueError::new_err("write() needs a contiguous buffer"));
    }
    let format: String = view.getattr("format")?.extract()?;
    if !matches!(format.as_str(), "B" | "b" | "c") {
        return Err(PyTypeError::new_err(format!(
            "write() needs a buffer of bytes, not of items of format {format:?}"
        )));
    }
    Ok(())
}

fn copy_array(array: &Bound<'_, PyUntypedArray>) -> PyResult<Buffer> {
    let array = array.cast::<PyArrayDyn<u8>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "write() needs a numpy array of dtype uint8, not {}",
            array.dtype()
        ))
    })?;
    let readonly = array
        .try_readonly()
        .map_err(|err| PyValueError::new_err(err.to_string()))?;
    let slice = readonly
        .as_slice()
        .map_err(|_| PyValueError::new_err("write() needs a contiguous numpy array"))?;
    Ok(Arc::new(slice.to_vec()))
}
