//! The one error type of the native layer, carrying the errno that librbd or librados returned.

use std::fmt;

use crate::rbd::keyring::{Identity, explain_connect, glance_caps};

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A librbd or librados call failed; `target` names the pool and image. A refusal (EPERM,
    /// EACCES) also names the user and the caps glance's user needs.
    #[error("{}", ceph_message(*.op, .target, *.errno))]
    Ceph { op: Op, target: Target, errno: i32 },
    /// The cluster could not be reached or refused us; `settings` names the conf file and user.
    /// `identity`, when the monitors were asked, says what the keyring holds: with the errno,
    /// enough to tell an unusable or missing key from a refused one.
    #[error(
        "cannot connect to the Ceph cluster{}: {step} failed: {} (errno {errno}){}",
        settings.as_deref().map_or_else(String::new, |s| format!(" ({s})")),
        strerror(*errno),
        identity.as_deref().and_then(|i| explain_connect(*errno, i))
            .map_or_else(String::new, |why| format!(": {why}"))
    )]
    Connect {
        step: String,
        settings: Option<String>,
        errno: i32,
        identity: Option<Box<Identity>>,
    },
    /// The caller asked for something impossible: bad argument or wrong state.
    #[error("{0}")]
    Usage(String),
    /// The native layer itself failed (a thread that could not start, a panic): not the
    /// caller's doing, and not Ceph's.
    #[error("{0}")]
    Internal(String),
    /// A wait was cut short by the caller (a signal); the upload has been aborted.
    #[error("interrupted")]
    Interrupted,
    /// While a transfer waited on the cluster, its client was found fenced (blocklisted:
    /// ESHUTDOWN, Ceph's EBLOCKLISTED) or its image removed (ENOENT) by another process: what
    /// it waits for will never come.
    #[error("{}", fenced_message(.target, *.errno))]
    Fenced { target: Target, errno: i32 },
}

impl Error {
    pub fn ceph(op: Op, target: &Target, ret: i64) -> Self {
        Error::Ceph {
            op,
            target: target.clone(),
            errno: errno_of(ret),
        }
    }

    /// The errno behind this error, when Ceph reported one.
    pub(crate) fn errno(&self) -> Option<i32> {
        match self {
            Error::Ceph { errno, .. }
            | Error::Connect { errno, .. }
            | Error::Fenced { errno, .. } => Some(*errno),
            Error::Usage(_) | Error::Internal(_) | Error::Interrupted => None,
        }
    }
}

/// A librbd or librados operation, as named in errors: "{op} {target} failed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Open,
    Create,
    Remove,
    ReadSize,
    Resize,
    Flush,
    CreateSnapshot,
    ProtectSnapshot,
    UnprotectSnapshot,
    RemoveSnapshot,
    StartWrite,
    Write,
    StartRead,
    Read,
    /// A read returned fewer bytes than asked for: the image shrank under the reader.
    ShortRead,
    /// Setting or refreshing the mark of an upload in flight (`transfer::mark`).
    Mark,
    /// Clearing it, once the upload is finished or removed.
    Unmark,
    ListSnapshots,
    ListWatchers,
    ListClones,
    MoveToTrash,
    /// Removing the data of an image in the trash.
    Purge,
    /// Marking an image moved to the trash, until its data is removed (`delete`).
    MarkDelete,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Each reads on into the target: "writing to image 'x' in pool 'p' failed".
        f.write_str(match self {
            Op::Open => "opening",
            Op::Create => "creating",
            Op::Remove => "removing",
            Op::ReadSize => "reading the size of",
            Op::Resize => "resizing",
            Op::Flush => "flushing",
            Op::CreateSnapshot => "creating a snapshot of",
            Op::ProtectSnapshot => "protecting the snapshot of",
            Op::UnprotectSnapshot => "unprotecting the snapshot of",
            Op::RemoveSnapshot => "removing the snapshot of",
            Op::StartWrite => "starting a write to",
            Op::Write => "writing to",
            Op::StartRead => "starting a read from",
            Op::Read => "reading from",
            Op::ShortRead => "reading a whole chunk from",
            Op::Mark => "marking the upload in flight of",
            Op::Unmark => "clearing the in-flight mark of",
            Op::ListSnapshots => "listing the snapshots of",
            Op::ListWatchers => "listing the watchers of",
            Op::ListClones => "listing the clones of the snapshot of",
            Op::MoveToTrash => "moving to the trash",
            Op::Purge => "removing the data in the trash of",
            Op::MarkDelete => "marking the deletion of",
        })
    }
}

/// What an operation acted on, for error messages: a pool, or an image in a pool; and, when
/// known, the cephx entity that acted ("client.glance"), named when it is refused.
#[derive(Debug, Clone)]
pub struct Target {
    pub pool: String,
    pub image: Option<String>,
    pub entity: Option<String>,
}

impl Target {
    pub fn pool(pool: &str) -> Self {
        Target {
            pool: pool.to_owned(),
            image: None,
            entity: None,
        }
    }

    pub fn image(pool: &str, image: &str) -> Self {
        Target {
            pool: pool.to_owned(),
            image: Some(image.to_owned()),
            entity: None,
        }
    }

    pub(crate) fn by(mut self, entity: &str) -> Self {
        self.entity = Some(entity.to_owned());
        self
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.image {
            Some(image) => write!(f, "image '{image}' in pool '{}'", self.pool),
            None => write!(f, "pool '{}'", self.pool),
        }
    }
}

fn fenced_message(target: &Target, errno: i32) -> String {
    if errno == libc::ENOENT {
        return format!(
            "{target} was removed by another process while this one wrote or read it \
             (`glance-rbd-native sweep --remove`, or an operator): the transfer is abandoned"
        );
    }
    let by = target
        .entity
        .as_deref()
        .map_or_else(String::new, |entity| format!(" ({entity})"));
    format!(
        "this process's Ceph client{by} was fenced, blocklisted by the cluster (by \
         `glance-rbd-native sweep --remove`, which presumed its writer gone, or by an operator; \
         `ceph osd blocklist ls` lists it), while it transferred {target}: the transfer is \
         abandoned, and the next one connects again"
    )
}

fn ceph_message(op: Op, target: &Target, errno: i32) -> String {
    if errno == libc::ESHUTDOWN {
        return format!("{op} {target} failed: {}", fenced_message(target, errno));
    }
    let entity = target.entity.as_deref();
    let Some(advice) = caps_advice(errno, &target.pool, entity) else {
        return format!("{op} {target} failed: {} (errno {errno})", strerror(errno));
    };
    let by = entity.map_or_else(String::new, |entity| format!(" as {entity}"));
    let outcome = if errno == libc::ETIMEDOUT {
        "got no answer in time"
    } else {
        "was refused"
    };
    format!(
        "{op} {target}{by} {outcome}: {} (errno {errno}): {advice}",
        strerror(errno)
    )
}

/// What to tell the operator when the cluster refuses `entity` (None: not known) an operation
/// on `pool` (EPERM, EACCES) or leaves it unanswered (ETIMEDOUT): the caps glance's user needs,
/// and how to see those it has; None for any other errno. The errors of the native module say
/// it, and so does `glance-rbd-native`, which talks to Ceph through the `rados` module.
pub fn caps_advice(errno: i32, pool: &str, entity: Option<&str>) -> Option<String> {
    let needs = format!("glance's cephx user needs the caps {}", glance_caps(pool));
    let check = entity.map_or_else(String::new, |entity| {
        format!("; `ceph auth get {entity}` shows the caps it has")
    });
    match errno {
        libc::EPERM | libc::EACCES => Some(format!("{needs}{check}")),
        // Measured: a Ceph 20 cluster never answers a user with no osd cap at all (Ceph 16
        // refuses it with EPERM), so a timeout may be the caps as well as the OSDs.
        libc::ETIMEDOUT => Some(format!(
            "the OSDs may be down or unreachable, or {} may have no osd cap on the pool (a Ceph \
             20 cluster leaves the operations of such a user unanswered); {needs}{check}",
            entity.unwrap_or("the user")
        )),
        _ => None,
    }
}

/// librbd and librados return `-errno`; some paths return it as ssize_t.
pub(crate) fn errno_of(ret: i64) -> i32 {
    i32::try_from(ret.unsigned_abs()).unwrap_or(libc::EIO)
}

/// Turns a negative return into an error, keeps non-negative values.
pub(crate) fn check(ret: i64, op: Op, target: &Target) -> Result<i64> {
    if ret < 0 {
        Err(Error::ceph(op, target, ret))
    } else {
        Ok(ret)
    }
}

fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // Drop std's " (os error N)" suffix: the errno is printed once, by the caller.
    match text.rfind(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbd::keyring::{Key, Keyring};

    /// Every op, as the sentence its failure reads as.
    fn sentence(op: Op) -> &'static str {
        match op {
            Op::Open => "opening image 'abc' in pool 'images' failed",
            Op::Create => "creating image 'abc' in pool 'images' failed",
            Op::Remove => "removing image 'abc' in pool 'images' failed",
            Op::ReadSize => "reading the size of image 'abc' in pool 'images' failed",
            Op::Resize => "resizing image 'abc' in pool 'images' failed",
            Op::Flush => "flushing image 'abc' in pool 'images' failed",
            Op::CreateSnapshot => "creating a snapshot of image 'abc' in pool 'images' failed",
            Op::ProtectSnapshot => "protecting the snapshot of image 'abc' in pool 'images' failed",
            Op::UnprotectSnapshot => {
                "unprotecting the snapshot of image 'abc' in pool 'images' failed"
            }
            Op::RemoveSnapshot => "removing the snapshot of image 'abc' in pool 'images' failed",
            Op::StartWrite => "starting a write to image 'abc' in pool 'images' failed",
            Op::Write => "writing to image 'abc' in pool 'images' failed",
            Op::StartRead => "starting a read from image 'abc' in pool 'images' failed",
            Op::Read => "reading from image 'abc' in pool 'images' failed",
            Op::ShortRead => "reading a whole chunk from image 'abc' in pool 'images' failed",
            Op::Mark => "marking the upload in flight of image 'abc' in pool 'images' failed",
            Op::Unmark => "clearing the in-flight mark of image 'abc' in pool 'images' failed",
            Op::ListSnapshots => "listing the snapshots of image 'abc' in pool 'images' failed",
            Op::ListWatchers => "listing the watchers of image 'abc' in pool 'images' failed",
            Op::ListClones => {
                "listing the clones of the snapshot of image 'abc' in pool 'images' failed"
            }
            Op::MoveToTrash => "moving to the trash image 'abc' in pool 'images' failed",
            Op::Purge => "removing the data in the trash of image 'abc' in pool 'images' failed",
            Op::MarkDelete => "marking the deletion of image 'abc' in pool 'images' failed",
        }
    }

    #[test]
    fn every_op_reads_as_a_sentence() {
        let ops = [
            Op::Open,
            Op::Create,
            Op::Remove,
            Op::ReadSize,
            Op::Resize,
            Op::Flush,
            Op::CreateSnapshot,
            Op::ProtectSnapshot,
            Op::UnprotectSnapshot,
            Op::RemoveSnapshot,
            Op::StartWrite,
            Op::Write,
            Op::StartRead,
            Op::Read,
            Op::ShortRead,
            Op::Mark,
            Op::Unmark,
            Op::ListSnapshots,
            Op::ListWatchers,
            Op::ListClones,
            Op::MoveToTrash,
            Op::Purge,
            Op::MarkDelete,
        ];
        let target = Target::image("images", "abc");
        for op in ops {
            assert_eq!(
                Error::ceph(op, &target, -5).to_string(),
                format!("{}: Input/output error (errno 5)", sentence(op))
            );
        }
    }

    #[test]
    fn message_names_pool_image_and_errno() {
        let err = Error::ceph(Op::Create, &Target::image("images", "abc"), -17);
        assert_eq!(
            err.to_string(),
            "creating image 'abc' in pool 'images' failed: File exists (errno 17)"
        );
        assert_eq!(err.errno(), Some(libc::EEXIST));
        let err = Error::ceph(Op::Open, &Target::pool("nope"), -2);
        assert_eq!(
            err.to_string(),
            "opening pool 'nope' failed: No such file or directory (errno 2)"
        );
    }

    #[test]
    fn connect_message_names_the_settings_and_the_step() {
        let err = Error::Connect {
            step: "reading the configuration file".into(),
            settings: Some("conf /etc/missing.conf, user admin".into()),
            errno: libc::ENOENT,
            identity: None,
        };
        assert_eq!(
            err.to_string(),
            "cannot connect to the Ceph cluster (conf /etc/missing.conf, user admin): \
             reading the configuration file failed: No such file or directory (errno 2)"
        );
        let err = Error::Connect {
            step: "reading option 'rbd_default_features'".into(),
            settings: None,
            errno: libc::ENOENT,
            identity: None,
        };
        assert_eq!(
            err.to_string(),
            "cannot connect to the Ceph cluster: reading option 'rbd_default_features' \
             failed: No such file or directory (errno 2)"
        );
    }

    #[test]
    fn a_refusal_names_the_user_and_the_caps_glance_needs() {
        let target = Target::image("images", "abc").by("client.glance");
        assert_eq!(
            Error::ceph(Op::Create, &target, -1).to_string(),
            "creating image 'abc' in pool 'images' as client.glance was refused: Operation not \
             permitted (errno 1): glance's cephx user needs the caps mon 'profile rbd' osd \
             'profile rbd pool=images' mgr 'profile rbd pool=images'; `ceph auth get \
             client.glance` shows the caps it has"
        );
        assert_eq!(
            Error::ceph(Op::Create, &target, -110).to_string(),
            "creating image 'abc' in pool 'images' as client.glance got no answer in time: \
             Connection timed out (errno 110): the OSDs may be down or unreachable, or \
             client.glance may have no osd cap on the pool (a Ceph 20 cluster leaves the \
             operations of such a user unanswered); glance's cephx user needs the caps mon \
             'profile rbd' osd 'profile rbd pool=images' mgr 'profile rbd pool=images'; `ceph \
             auth get client.glance` shows the caps it has"
        );
        // Other errors of the same target read as before.
        assert_eq!(
            Error::ceph(Op::Create, &target, -17).to_string(),
            "creating image 'abc' in pool 'images' failed: File exists (errno 17)"
        );
        assert_eq!(
            Error::ceph(Op::Open, &Target::pool("vms"), -13).to_string(),
            "opening pool 'vms' was refused: Permission denied (errno 13): glance's cephx user \
             needs the caps mon 'profile rbd' osd 'profile rbd pool=vms' mgr 'profile rbd \
             pool=vms'"
        );
    }

    fn refused_connect(errno: i32, keyring: Keyring) -> String {
        Error::Connect {
            step: "connecting to the monitors".into(),
            settings: Some("conf /etc/ceph/ceph.conf, user glance".into()),
            errno,
            identity: Some(Box::new(Identity {
                entity: "client.glance".into(),
                keyring,
            })),
        }
        .to_string()
    }

    fn file(key: Key, other: Option<(&str, Key)>) -> Keyring {
        Keyring::File {
            path: "/etc/ceph/ceph.client.glance.keyring".into(),
            key,
            other: other.map(|(owner, key)| (owner.to_owned(), key)),
        }
    }

    const PREFIX: &str = "cannot connect to the Ceph cluster (conf /etc/ceph/ceph.conf, user \
                          glance): connecting to the monitors failed: ";

    #[test]
    fn a_key_this_client_cannot_parse_is_named_with_its_keyring() {
        let keyring = file(Key::Aes256k, Some(("client.glance", Key::Aes256k)));
        assert_eq!(
            refused_connect(libc::EIO, keyring),
            format!(
                "{PREFIX}Input/output error (errno 5): this client cannot parse keyring \
                 /etc/ceph/ceph.client.glance.keyring: the key of client.glance there is an \
                 aes256k key (cephx key type 2), which needs a Ceph 20 (Tentacle) client; use \
                 one on this host, or give client.glance a legacy aes key (`ceph-authtool \
                 KEYRING --gen-key -n client.glance --key-type aes`, with its caps, then `ceph \
                 auth import -i KEYRING`) and let the cluster accept it (`ceph mon set \
                 auth_allowed_ciphers aes,aes256k`)"
            )
        );
        // Another entity's key fails the whole file.
        let keyring = file(
            Key::Aes,
            Some(("client.admin", Key::Bad("not base64".into()))),
        );
        assert_eq!(
            refused_connect(libc::EIO, keyring),
            format!(
                "{PREFIX}Input/output error (errno 5): this client cannot parse keyring \
                 /etc/ceph/ceph.client.glance.keyring: the key of client.admin there is not \
                 base64"
            )
        );
        // Nothing found wrong in the file: no claim about it.
        assert_eq!(
            refused_connect(libc::EIO, file(Key::Aes, None)),
            format!("{PREFIX}Input/output error (errno 5)")
        );
    }

    #[test]
    fn a_refused_authentication_names_the_user_and_the_keyring() {
        let expected = format!(
            "{PREFIX}Permission denied (errno 13): authentication failed for client.glance \
             with keyring /etc/ceph/ceph.client.glance.keyring: the monitors refused it, as \
             they do when the key is not the cluster's key of client.glance, when the cluster \
             has no client.glance, or when it has no mon caps (glance's user needs mon \
             'profile rbd'); `ceph auth get client.glance` on the cluster shows its key and caps"
        );
        assert_eq!(
            refused_connect(libc::EACCES, file(Key::Aes256k, None)),
            expected
        );
        assert_eq!(
            refused_connect(libc::EACCES, file(Key::Aes, None)),
            format!(
                "{expected}; a Ceph 20 (Tentacle) cluster also refuses legacy aes keys such as \
                 this one unless its monitors allow them (`ceph mon set auth_allowed_ciphers \
                 aes,aes256k`; a new cluster allows aes256k alone)"
            )
        );
        assert_eq!(
            refused_connect(libc::EACCES, file(Key::Absent, None)),
            format!(
                "{PREFIX}Permission denied (errno 13): keyring \
                 /etc/ceph/ceph.client.glance.keyring has no key for client.glance"
            )
        );
        let unreadable = Keyring::Unreadable {
            path: "/etc/ceph/ceph.client.glance.keyring".into(),
            reason: "Permission denied".into(),
        };
        assert_eq!(
            refused_connect(libc::EACCES, unreadable),
            format!(
                "{PREFIX}Permission denied (errno 13): keyring \
                 /etc/ceph/ceph.client.glance.keyring of client.glance cannot be read by this \
                 process: Permission denied"
            )
        );
        let missing = Keyring::Missing {
            searched: "/etc/ceph/ceph.client.glance.keyring, /etc/ceph/ceph.keyring".into(),
        };
        assert_eq!(
            refused_connect(libc::ENOENT, missing),
            format!(
                "{PREFIX}No such file or directory (errno 2): no keyring for client.glance: \
                 none of /etc/ceph/ceph.client.glance.keyring, /etc/ceph/ceph.keyring exists"
            )
        );
    }

    #[test]
    fn the_keyring_is_not_blamed_for_what_it_has_no_part_in() {
        assert_eq!(
            refused_connect(libc::ETIMEDOUT, file(Key::Aes256k, None)),
            format!("{PREFIX}Connection timed out (errno 110)")
        );
        assert_eq!(
            refused_connect(libc::EACCES, Keyring::Elsewhere),
            format!("{PREFIX}Permission denied (errno 13)")
        );
    }

    #[test]
    fn caps_advice_is_for_refusals_and_timeouts_alone() {
        assert_eq!(
            caps_advice(libc::EACCES, "images", None).as_deref(),
            Some(
                "glance's cephx user needs the caps mon 'profile rbd' osd 'profile rbd \
                 pool=images' mgr 'profile rbd pool=images'"
            )
        );
        let timeout = caps_advice(libc::ETIMEDOUT, "images", Some("client.glance")).unwrap();
        assert!(timeout.starts_with("the OSDs may be down or unreachable, or client.glance "));
        assert!(timeout.ends_with("; `ceph auth get client.glance` shows the caps it has"));
        assert_eq!(
            caps_advice(libc::ENOENT, "images", Some("client.glance")),
            None
        );
    }

    #[test]
    fn internal_errors_are_neither_usage_nor_ceph() {
        let err = Error::Internal("the md5 digest thread panicked".into());
        assert_eq!(err.to_string(), "the md5 digest thread panicked");
        assert_eq!(err.errno(), None);
        assert!(!matches!(err, Error::Usage(_)));
    }

    #[test]
    fn check_keeps_non_negative_values() {
        let target = Target::pool("p");
        assert_eq!(check(5, Op::Read, &target).unwrap(), 5);
        assert_eq!(check(-28, Op::Read, &target).unwrap_err().errno(), Some(28));
    }
}
