//! Image digests (md5 and the multihash) computed on worker threads, in parallel with each other
//! and with the writes, through OpenSSL: the same library, and the same speed, as Python's hashlib.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use openssl::hash::{Hasher, MessageDigest};

use super::background;
use super::in_flight::Buffer;
use crate::error::{Error, Result};

/// (hashlib name, OpenSSL name) of every digest that may be computed natively, where both give
/// the same output. Algorithms that need parameters (shake_*) stay with hashlib.
const CANDIDATES: [(&str, &str); 15] = [
    ("md5", "md5"),
    ("sha1", "sha1"),
    ("sha224", "sha224"),
    ("sha256", "sha256"),
    ("sha384", "sha384"),
    ("sha512", "sha512"),
    ("sha512_224", "sha512-224"),
    ("sha512_256", "sha512-256"),
    ("sha3_224", "sha3-224"),
    ("sha3_256", "sha3-256"),
    ("sha3_384", "sha3-384"),
    ("sha3_512", "sha3-512"),
    ("blake2b", "blake2b512"),
    ("blake2s", "blake2s256"),
    ("sm3", "sm3"),
];

/// The OpenSSL digest that gives the same output as `hashlib.new(name)`, where there is one
/// this OpenSSL can run.
fn openssl_digest(name: &str) -> Option<MessageDigest> {
    let (_, openssl_name) = CANDIDATES.iter().find(|(hashlib, _)| *hashlib == name)?;
    let digest = MessageDigest::from_name(openssl_name)?;
    // A digest OpenSSL lists but cannot run (FIPS, say) is left to hashlib too.
    Hasher::new(digest).ok().map(|_| digest)
}

/// The hashlib names of the digests this build can compute natively.
pub fn available() -> Vec<&'static str> {
    CANDIDATES
        .iter()
        .map(|(hashlib, _)| *hashlib)
        .filter(|name| openssl_digest(name).is_some())
        .collect()
}

struct Worker {
    name: String,
    queue: Option<Sender<Buffer>>,
    thread: Option<JoinHandle<std::result::Result<Vec<u8>, String>>>,
}

/// One thread per algorithm, each hashing every chunk in order. The queues are unbounded: the
/// upload's budget bounds the bytes they hold.
pub(crate) struct Digests {
    workers: Vec<Worker>,
}

impl Digests {
    /// Starts a worker for each name.
    pub(crate) fn start(names: &[String]) -> Result<Digests> {
        let mut workers = Vec::new();
        for name in names {
            if workers.iter().any(|w: &Worker| &w.name == name) {
                continue;
            }
            let digest = openssl_digest(name)
                .ok_or_else(|| Error::Usage(format!("no native digest for {name:?}")))?;
            let (queue, chunks) = channel::<Buffer>();
            let thread =
                background::spawn(format!("digest-{name}"), move || hash_all(digest, chunks))
                    .map_err(|err| {
                        Error::Internal(format!("cannot start a digest thread: {err}"))
                    })?;
            workers.push(Worker {
                name: name.clone(),
                queue: Some(queue),
                thread: Some(thread),
            });
        }
        Ok(Digests { workers })
    }

    /// Queues `buffer` for every digest; returns at once.
    pub(crate) fn feed(&mut self, buffer: &Buffer) -> Result<()> {
        if (**buffer).as_ref().is_empty() {
            return Ok(());
        }
        for worker in &self.workers {
            let queue = worker.queue.as_ref().ok_or_else(finished)?;
            queue.send(Arc::clone(buffer)).map_err(|_| {
                Error::Internal(format!("the {} digest thread stopped", worker.name))
            })?;
        }
        Ok(())
    }

    /// Waits for every chunk to be hashed; the hex digest of each algorithm, in start order.
    pub(crate) fn finish(&mut self) -> Result<Vec<(String, String)>> {
        let mut hexdigests = Vec::new();
        for worker in &mut self.workers {
            drop(worker.queue.take());
            let thread = worker.thread.take().ok_or_else(finished)?;
            let digest = thread
                .join()
                .map_err(|_| {
                    Error::Internal(format!("the {} digest thread panicked", worker.name))
                })?
                .map_err(|err| {
                    Error::Internal(format!("the {} digest failed: {err}", worker.name))
                })?;
            hexdigests.push((worker.name.clone(), hex(&digest)));
        }
        Ok(hexdigests)
    }
}

impl Digests {
    /// Ends the workers without a result (the upload was aborted).
    pub(crate) fn stop(&mut self) {
        for worker in &mut self.workers {
            // Closing the queue ends the worker after what it holds; joining frees the buffers.
            drop(worker.queue.take());
            if let Some(thread) = worker.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Digests {
    fn drop(&mut self) {
        self.stop();
    }
}

fn hash_all(
    digest: MessageDigest,
    chunks: Receiver<Buffer>,
) -> std::result::Result<Vec<u8>, String> {
    let mut hasher = Hasher::new(digest).map_err(|e| e.to_string())?;
    let mut failure = None;
    // Keep draining after a failure: each chunk dropped here goes back to the budget.
    for chunk in chunks {
        if failure.is_none() {
            if let Err(err) = hasher.update((*chunk).as_ref()) {
                failure = Some(err.to_string());
            }
        }
    }
    match failure {
        Some(err) => Err(err),
        None => hasher
            .finish()
            .map(|d| d.to_vec())
            .map_err(|e| e.to_string()),
    }
}

fn finished() -> Error {
    Error::Internal("the digests were already finished".into())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(names: &[&str], chunks: &[&[u8]]) -> Vec<(String, String)> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut digests = Digests::start(&names).unwrap();
        for chunk in chunks {
            let buffer: Buffer = Arc::new(chunk.to_vec());
            digests.feed(&buffer).unwrap();
        }
        digests.finish().unwrap()
    }

    #[test]
    fn known_answers() {
        let out = digest_of(&["md5", "sha512"], &[b"ab", b"", b"c"]);
        assert_eq!(
            out[0],
            ("md5".into(), "900150983cd24fb0d6963f7d28e17f72".into())
        );
        assert!(out[1].1.starts_with("ddaf35a193617aba"));
    }

    #[test]
    fn duplicate_names_hash_once() {
        assert_eq!(digest_of(&["md5", "md5"], &[b"x"]).len(), 1);
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(openssl_digest("shake_128").is_none());
        assert!(matches!(
            Digests::start(&["nope".into()]),
            Err(Error::Usage(_))
        ));
    }

    #[test]
    fn the_common_digests_are_available() {
        let names = available();
        for name in ["md5", "sha1", "sha256", "sha512", "sha3_256", "blake2b"] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert!(names.iter().all(|name| openssl_digest(name).is_some()));
    }

    #[test]
    fn finishing_twice_is_an_internal_error() {
        let mut digests = Digests::start(&["md5".into()]).unwrap();
        digests.finish().unwrap();
        assert!(matches!(digests.finish(), Err(Error::Internal(_))));
    }
}
