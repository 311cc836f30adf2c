//! Drives every path of the FFI layer and the upload lifecycle against a real cluster, for
//! valgrind memcheck (`make memcheck`): create, aio writes, digests, grow, trim, snapshot,
//! abort, drop unfinished, errors.
//!
//!     lifecycle CEPH_CONF POOL

use std::sync::Arc;

use glance_rbd_native::aio::Buffer;
use glance_rbd_native::cluster::{Cluster, ConnectOptions};
use glance_rbd_native::error::Error;
use glance_rbd_native::image;
use glance_rbd_native::upload::{Upload, UploadOptions};

fn options(pool: &str, image: &str, size: u64) -> UploadOptions {
    UploadOptions {
        pool: pool.into(),
        image: image.into(),
        size,
        order: 20,
        thin: true,
        max_in_flight: 3 << 20,
        snapshot: Some("snap".into()),
        digests: vec!["md5".into(), "sha512".into()],
    }
}

fn chunk(len: usize, seed: u8) -> Buffer {
    // Half data, half zeros, so thin writes split chunks into several ranges.
    Arc::new(
        (0..len)
            .map(|i| if i % 8192 < 4096 { seed ^ i as u8 } else { 0 })
            .collect::<Vec<u8>>(),
    )
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let conf = args.next().expect("usage: lifecycle CEPH_CONF POOL");
    let pool = args.next().expect("usage: lifecycle CEPH_CONF POOL");
    let cluster = Cluster::shared(&ConnectOptions {
        conf_file: Some(conf),
        user: Some("admin".into()),
        timeout: Some(30),
    })?;
    let no_signals = &mut || Ok(());
    let pid = std::process::id();

    // Finished upload of unknown size: grows, trims, snapshots; then removed.
    let name = format!("memcheck-{pid}-finished");
    let mut upload = Upload::start(&cluster, options(&pool, &name, 0))?;
    for seed in 0..6 {
        upload.write(chunk(1 << 20, seed), no_signals)?;
    }
    upload.write(chunk(5 << 20, 9), no_signals)?; // larger than the bound
    upload.write(Arc::new(Vec::new()), no_signals)?;
    let summary = upload.finish(no_signals)?;
    assert_eq!(summary.bytes_written, 11 << 20);
    assert_eq!(summary.digests.len(), 2);
    drop(upload);
    let ioctx = Arc::new(cluster.pool(&pool)?);
    image::remove_with_snapshot(&ioctx, &name, Some("snap"))?;

    // Aborted with writes in flight.
    let name = format!("memcheck-{pid}-aborted");
    let mut upload = Upload::start(&cluster, options(&pool, &name, 8 << 20))?;
    upload.write(chunk(3 << 20, 1), no_signals)?;
    upload.abort(no_signals)?;
    upload.abort(no_signals)?;
    assert!(upload.write(chunk(1, 1), no_signals).is_err());

    // Dropped unfinished: Drop drains and removes.
    let name = format!("memcheck-{pid}-dropped");
    let mut upload = Upload::start(&cluster, options(&pool, &name, 0))?;
    upload.write(chunk(2 << 20, 2), no_signals)?;
    drop(upload);

    // Known size overrun: the upload aborts itself.
    let name = format!("memcheck-{pid}-overrun");
    let mut upload = Upload::start(&cluster, options(&pool, &name, 1000))?;
    assert!(upload.write(chunk(1001, 3), no_signals).is_err());
    assert!(!upload.is_open());

    // Errors that never create anything.
    let name = format!("memcheck-{pid}-exists");
    let mut first = Upload::start(&cluster, options(&pool, &name, 4096))?;
    assert!(matches!(
        Upload::start(&cluster, options(&pool, &name, 4096)),
        Err(Error::Ceph {
            errno: libc::EEXIST,
            ..
        })
    ));
    first.abort(no_signals)?;
    assert!(Upload::start(&cluster, options("no-such-pool", "x", 0)).is_err());
    let mut bad = options(&pool, "bad-digest", 0);
    bad.digests = vec!["shake_128".into()];
    assert!(Upload::start(&cluster, bad).is_err());

    println!("lifecycle: every path ran");
    Ok(())
}
