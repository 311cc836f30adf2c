//! The Python exceptions of the native module, and the one conversion from `Error` to them.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;

pyo3::create_exception!(
    glance_rbd_native,
    RbdError,
    PyOSError,
    "A librbd or librados call failed; `errno` holds the code Ceph returned."
);
pyo3::create_exception!(
    glance_rbd_native,
    NoSpace,
    RbdError,
    "The pool or cluster has no room left (ENOSPC or EDQUOT)."
);
pyo3::create_exception!(
    glance_rbd_native,
    ImageExists,
    RbdError,
    "An image of that name already exists; it was left untouched."
);
pyo3::create_exception!(
    glance_rbd_native,
    NotFound,
    RbdError,
    "The pool or image does not exist."
);
pyo3::create_exception!(
    glance_rbd_native,
    PoolNotFound,
    NotFound,
    "The pool does not exist."
);
pyo3::create_exception!(
    glance_rbd_native,
    ConnectError,
    RbdError,
    "The cluster could not be reached: configuration file, user, keyring or monitors."
);

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let message = err.to_string();
        match err {
            Error::Usage(_) => PyValueError::new_err(message),
            Error::Interrupted => pyo3::exceptions::PyKeyboardInterrupt::new_err(message),
            Error::Connect { errno, .. } => ConnectError::new_err((errno, message)),
            Error::Ceph { errno, target, .. } => {
                let args = (errno, message);
                match errno {
                    libc::ENOSPC | libc::EDQUOT => NoSpace::new_err(args),
                    libc::EEXIST => ImageExists::new_err(args),
                    libc::ENOENT if target.image.is_none() => PoolNotFound::new_err(args),
                    libc::ENOENT => NotFound::new_err(args),
                    _ => RbdError::new_err(args),
                }
            }
        }
    }
}

pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("RbdError", py.get_type::<RbdError>())?;
    module.add("NoSpace", py.get_type::<NoSpace>())?;
    module.add("ImageExists", py.get_type::<ImageExists>())?;
    module.add("NotFound", py.get_type::<NotFound>())?;
    module.add("PoolNotFound", py.get_type::<PoolNotFound>())?;
    module.add("ConnectError", py.get_type::<ConnectError>())?;
    Ok(())
}
