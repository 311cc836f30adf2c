//! The versions of the libraries this process loaded, as the operator's pre-flight check
//! (`glance-rbd-native check`) reports them: what the dynamic loader found on this host, not
//! what the build linked against.

use std::os::raw::c_int;

use crate::rbd::ffi;

/// librbd's minor number is the Ceph release (1.16 is Ceph 16, Pacific); the calls used are
/// Ceph 16's.
pub const OLDEST_CEPH: i32 = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub librbd: (i32, i32, i32),
    pub librados: (i32, i32, i32),
    /// OpenSSL's own words, e.g. "OpenSSL 3.0.17 1 Jul 2025".
    pub openssl: String,
}

impl Versions {
    /// The Ceph release of the loaded librbd.
    pub fn ceph(&self) -> i32 {
        self.librbd.1
    }
}

/// The versions of the librbd, librados and OpenSSL loaded into this process.
pub fn loaded() -> Versions {
    let triple = |call: unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int)| {
        let (mut major, mut minor, mut extra) = (0, 0, 0);
        // SAFETY: the call only writes the three integers it is given.
        unsafe { call(&mut major, &mut minor, &mut extra) };
        (major, minor, extra)
    };
    Versions {
        librbd: triple(ffi::rbd_version),
        librados: triple(ceph::rados::rados_version),
        openssl: openssl::version::version().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaded_libraries_are_the_supported_ones() {
        let versions = loaded();
        assert_eq!(versions.librbd.0, 1);
        assert!(versions.ceph() >= OLDEST_CEPH, "{versions:?}");
        assert!(versions.librados.0 >= 3, "{versions:?}");
        assert!(versions.openssl.starts_with("OpenSSL 3."), "{versions:?}");
    }
}
