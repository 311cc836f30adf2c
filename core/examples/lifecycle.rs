//! Drives every path of the FFI layer and of the upload and download cores against a real
//! cluster, for valgrind memcheck: tests/test_memcheck.py runs it under valgrind (`make test`
//! builds it first, with `cargo build --example lifecycle`).
//!
//! Writes: create, aio writes, digests, grow, trim, snapshot, abort, drop unfinished, errors.
//! Reads: open at a snapshot and at the head, size, aio reads to the end, drop mid-stream with
//! reads in flight, errors.
//!
//!     lifecycle CEPH_CONF POOL

use std::sync::Arc;

use glance_rbd_core::{
    Buffer, Cluster, ConnectOptions, Destination, Download, DownloadOptions, Error, RbdPool,
    Upload, UploadOptions, id_of, remove_with_snapshot,
};

/// An upload on `cluster`, as the extension starts one.
fn start_upload(cluster: &Arc<Cluster>, options: UploadOptions) -> Result<Upload, Error> {
    cluster.start_transfer(|cluster| {
        Upload::start(
            RbdPool::open(cluster, &options.pool)?,
            options.clone(),
            &mut || Ok(()),
        )
    })
}

/// A download on `cluster`, as the extension starts one.
fn open_download<D: Destination>(
    cluster: &Arc<Cluster>,
    options: &DownloadOptions,
) -> Result<Download<D>, Error> {
    cluster.start_transfer(|cluster| {
        Download::open(RbdPool::open(cluster, &options.pool)?, options, &mut || {
            Ok(())
        })
    })
}

fn options(pool: &str, image: &str, size: u64) -> UploadOptions {
    UploadOptions {
        pool: pool.into(),
        image: image.into(),
        size,
        order: 20,
        thin: true,
        max_in_flight: Some(3 << 20),
        snapshot: Some("snap".into()),
        digests: vec!["md5".into(), "sha512".into()],
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    // Half data, half zeros, so thin writes split chunks into several ranges.
    (0..len)
        .map(|i| if i % 8192 < 4096 { seed ^ i as u8 } else { 0 })
        .collect()
}

fn chunk(len: usize, seed: u8) -> Buffer {
    Arc::new(data(len, seed))
}

fn read_options(pool: &str, image: &str, snapshot: Option<&str>) -> DownloadOptions {
    DownloadOptions {
        pool: pool.into(),
        image: image.into(),
        snapshot: snapshot.map(str::to_owned),
        // Not a divisor of the image size: the last chunk is short.
        chunk_size: (1 << 20) + 12345,
        max_in_flight: Some(3 << 20),
    }
}

/// Starts the reads the download wants, then takes the next chunk.
fn next(download: &mut Download<Vec<u8>>) -> Result<Option<Vec<u8>>, Error> {
    for len in download.wanted() {
        download.start(vec![0; len])?;
    }
    download.next_chunk(&mut || Ok(()))
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

    // Finished upload of unknown size: grows, trims, snapshots. Read back below, then removed.
    let finished = format!("memcheck-{pid}-finished");
    let mut upload = start_upload(&cluster, options(&pool, &finished, 0))?;
    let mut expected = Vec::new();
    for seed in 0..6 {
        upload.write(chunk(1 << 20, seed), no_signals)?;
        expected.extend(data(1 << 20, seed));
    }
    upload.write(chunk(5 << 20, 9), no_signals)?; // larger than the bound
    expected.extend(data(5 << 20, 9));
    upload.write(Arc::new(Vec::new()), no_signals)?;
    let summary = upload.finish(no_signals)?;
    assert_eq!(summary.bytes_written, 11 << 20);
    assert_eq!(summary.digests.len(), 2);
    drop(upload);

    // Aborted with writes in flight.
    let name = format!("memcheck-{pid}-aborted");
    let mut upload = start_upload(&cluster, options(&pool, &name, 8 << 20))?;
    upload.write(chunk(3 << 20, 1), no_signals)?;
    upload.abort(no_signals)?;
    upload.abort(no_signals)?;
    assert!(upload.write(chunk(1, 1), no_signals).is_err());

    // Dropped unfinished: Drop drains and removes.
    let name = format!("memcheck-{pid}-dropped");
    let mut upload = start_upload(&cluster, options(&pool, &name, 0))?;
    upload.write(chunk(2 << 20, 2), no_signals)?;
    drop(upload);

    // Known size overrun: the upload aborts itself.
    let name = format!("memcheck-{pid}-overrun");
    let mut upload = start_upload(&cluster, options(&pool, &name, 1000))?;
    assert!(upload.write(chunk(1001, 3), no_signals).is_err());
    assert!(!upload.is_open());

    // Errors that never create anything.
    let name = format!("memcheck-{pid}-exists");
    let mut first = start_upload(&cluster, options(&pool, &name, 4096))?;
    assert!(matches!(
        start_upload(&cluster, options(&pool, &name, 4096)),
        Err(Error::Ceph {
            errno: libc::EEXIST,
            ..
        })
    ));
    first.abort(no_signals)?;
    assert!(start_upload(&cluster, options("no-such-pool", "x", 0)).is_err());
    let mut bad = options(&pool, "bad-digest", 0);
    bad.digests = vec!["shake_128".into()];
    assert!(start_upload(&cluster, bad).is_err());
    println!("lifecycle: write paths ran");

    // Read to the end at the snapshot, several reads in flight: the bytes written come back.
    let mut download = open_download(&cluster, &read_options(&pool, &finished, Some("snap")))?;
    assert_eq!(download.size(), 11 << 20);
    let mut read = Vec::new();
    while let Some(bytes) = next(&mut download)? {
        read.extend(bytes);
    }
    assert_eq!(download.delivered(), 11 << 20);
    assert!(read == expected, "the image reads back differently");
    assert!(next(&mut download)?.is_none());
    drop(download);

    // Dropped mid-stream at the head, with reads still in flight: Drop waits for them.
    let mut download = open_download(&cluster, &read_options(&pool, &finished, None))?;
    assert!(next(&mut download)?.is_some());
    for len in download.wanted() {
        download.start(vec![0; len])?;
    }
    assert!(download.delivered() < download.size());
    drop(download);

    // Errors that never read anything.
    let missing = open_download::<Vec<u8>>(&cluster, &read_options(&pool, "no-such-image", None));
    assert!(matches!(
        missing,
        Err(Error::Ceph {
            errno: libc::ENOENT,
            ..
        })
    ));
    let no_snapshot = read_options(&pool, &finished, Some("no-such-snap"));
    assert!(open_download::<Vec<u8>>(&cluster, &no_snapshot).is_err());
    let mut empty_chunks = read_options(&pool, &finished, None);
    empty_chunks.chunk_size = 0;
    assert!(matches!(
        open_download::<Vec<u8>>(&cluster, &empty_chunks),
        Err(Error::Usage(_))
    ));
    println!("lifecycle: read paths ran");

    let ioctx = Arc::new(cluster.pool(&pool)?);
    let id = id_of(&ioctx, &finished)?;
    remove_with_snapshot(&ioctx, &finished, &id, Some("snap"))?;
    println!("lifecycle: every path ran");
    Ok(())
}
