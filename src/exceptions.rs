//! The Python exceptions of the native module, and the one conversion from `Error` to them.

use pyo3::exceptions::{PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use glance_rbd_core::error::Error;

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
    PermissionDenied,
    RbdError,
    "The cluster refused an operation to the user (EPERM or EACCES): its caps do not allow it. \
     The message names the operation, the pool, the user and the caps glance's user needs."
);
pyo3::create_exception!(
    glance_rbd_native,
    TimedOut,
    RbdError,
    "The cluster gave no answer within rados_connect_timeout (ETIMEDOUT): the OSDs may be down \
     or unreachable, or, on Ceph 20, the user may have no osd cap on the pool."
);
pyo3::create_exception!(
    glance_rbd_native,
    Fenced,
    RbdError,
    "The transfer's Ceph client was fenced (blocklisted: ESHUTDOWN) or its image removed \
     (ENOENT) by another process while it ran: it was abandoned at once. The next transfer \
     connects again."
);
pyo3::create_exception!(
    glance_rbd_native,
    ConnectError,
    RbdError,
    "The cluster could not be reached: configuration file, user, keyring or monitors."
);
pyo3::create_exception!(
    glance_rbd_native,
    InternalError,
    PyRuntimeError,
    "The native layer failed in a way that is neither the caller's nor Ceph's doing (a thread \
     that could not start, a panic): a bug to report."
);

/// The core's errors as Python exceptions: `result.or_raise()?` in a function that returns
/// `PyResult` (the core's `Error` and PyO3's `PyErr` are both foreign here, so no `From`).
pub(crate) trait OrRaise<T> {
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_python)
    }
}

/// The Python exception of `err`: the class says what went wrong, the message says where.
pub(crate) fn to_python(err: Error) -> PyErr {
    {
        let message = err.to_string();
        match err {
            Error::Usage(_) => PyValueError::new_err(message),
            Error::Internal(_) => InternalError::new_err(message),
            Error::Interrupted => PyKeyboardInterrupt::new_err(message),
            Error::Connect { errno, .. } => ConnectError::new_err((errno, message)),
            Error::Fenced { errno, .. } => Fenced::new_err((errno, message)),
            Error::Ceph { errno, target, .. } => {
                let args = (errno, message);
                match errno {
                    libc::ENOSPC | libc::EDQUOT => NoSpace::new_err(args),
                    libc::EEXIST => ImageExists::new_err(args),
                    libc::ENOENT if target.image.is_none() => PoolNotFound::new_err(args),
                    libc::ENOENT => NotFound::new_err(args),
                    libc::EPERM | libc::EACCES => PermissionDenied::new_err(args),
                    libc::ETIMEDOUT => TimedOut::new_err(args),
                    libc::ESHUTDOWN => Fenced::new_err(args),
                    _ => RbdError::new_err(args),
                }
            }
        }
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("RbdError", py.get_type::<RbdError>())?;
    module.add("NoSpace", py.get_type::<NoSpace>())?;
    module.add("ImageExists", py.get_type::<ImageExists>())?;
    module.add("NotFound", py.get_type::<NotFound>())?;
    module.add("PoolNotFound", py.get_type::<PoolNotFound>())?;
    module.add("PermissionDenied", py.get_type::<PermissionDenied>())?;
    module.add("TimedOut", py.get_type::<TimedOut>())?;
    module.add("ConnectError", py.get_type::<ConnectError>())?;
    module.add("Fenced", py.get_type::<Fenced>())?;
    module.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use glance_rbd_core::error::{Op, Target};

    fn converted<T>(err: Error, check: impl FnOnce(Python<'_>, PyErr) -> T) -> T {
        Python::initialize();
        Python::attach(|py| check(py, to_python(err)))
    }

    #[test]
    fn internal_errors_are_runtime_errors_not_value_errors() {
        converted(Error::Internal("a panic".into()), |py, err| {
            assert!(err.is_instance_of::<InternalError>(py));
            assert!(err.is_instance_of::<PyRuntimeError>(py));
            assert!(!err.is_instance_of::<PyValueError>(py));
            assert_eq!(err.value(py).to_string(), "a panic");
        });
    }

    #[test]
    fn usage_errors_are_value_errors() {
        converted(Error::Usage("bad input".into()), |py, err| {
            assert!(err.is_instance_of::<PyValueError>(py));
            assert!(!err.is_instance_of::<PyRuntimeError>(py));
        });
    }

    #[test]
    fn connect_errors_are_rbd_errors_with_errno() {
        let error = Error::Connect {
            step: "connecting to the monitors".into(),
            settings: None,
            errno: libc::ETIMEDOUT,
            identity: None,
        };
        converted(error, |py, err| {
            assert!(err.is_instance_of::<ConnectError>(py));
            assert!(err.is_instance_of::<RbdError>(py));
            let errno: i32 = err.value(py).getattr("errno").unwrap().extract().unwrap();
            assert_eq!(errno, libc::ETIMEDOUT);
        });
    }

    #[test]
    fn ceph_errors_map_on_errno_and_target() {
        let image = Target::image("images", "abc");
        let cases = [
            (Op::Create, &image, libc::EEXIST, "ImageExists"),
            (Op::Write, &image, libc::ENOSPC, "NoSpace"),
            (Op::Write, &image, libc::EDQUOT, "NoSpace"),
            (
                Op::Open,
                &Target::pool("nope"),
                libc::ENOENT,
                "PoolNotFound",
            ),
            (Op::Open, &image, libc::ENOENT, "NotFound"),
            (Op::Create, &image, libc::EPERM, "PermissionDenied"),
            (Op::Open, &image, libc::EACCES, "PermissionDenied"),
            (Op::Write, &image, libc::ETIMEDOUT, "TimedOut"),
            (Op::Flush, &image, libc::EIO, "RbdError"),
        ];
        for (op, target, errno, class) in cases {
            let error = Error::ceph(op, target, -i64::from(errno));
            let message = error.to_string();
            converted(error, |py, err| {
                assert_eq!(err.get_type(py).name().unwrap(), class, "{message}");
                assert!(err.is_instance_of::<RbdError>(py));
                assert!(err.is_instance_of::<PyOSError>(py));
                let value = err.value(py);
                let got: i32 = value.getattr("errno").unwrap().extract().unwrap();
                assert_eq!(got, errno);
                let strerror: String = value.getattr("strerror").unwrap().extract().unwrap();
                assert_eq!(strerror, message);
            });
        }
    }
}
