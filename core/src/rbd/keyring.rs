//! What the keyring of a connection holds for its cephx entity, read as librados reads it, and
//! what to tell the operator when cephx refuses: librados says only "Input/output error" for a
//! key it cannot parse and "Permission denied" for a keyring it cannot read, and logs why
//! nowhere a glance host looks.

use std::path::Path;

/// The cephx entity a connection authenticates as, and what its keyring holds for it, read
/// the way librados reads it (`rbd::keyring`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// "client.glance"; "client.admin" when no user is given (librados' default).
    pub entity: String,
    pub keyring: Keyring,
}

/// The keyring librados loads for a connection: the first file of its `keyring` option that
/// exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keyring {
    /// What the file holds for the entity, and the first key in it that is not a legacy aes key,
    /// by entity: librados refuses the whole file for one key it cannot parse.
    File {
        path: String,
        key: Key,
        other: Option<(String, Key)>,
    },
    /// The file is there, and this process cannot read it.
    Unreadable { path: String, reason: String },
    /// None of the files exists.
    Missing { searched: String },
    /// The key comes from the `key` or `keyfile` option: not looked into.
    Elsewhere,
}

/// A key of a keyring file, as its base64 text decodes: a cephx CryptoKey is a type (u16),
/// a creation time (two u32), the length of the secret (u16), then the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Type 1, 16 bytes: the legacy aes key every Ceph release reads ("AQ..." in base64).
    Aes,
    /// Type 2, 32 bytes: the aes256k key of Ceph 20 (Tentacle) on ("Ag..."), which older
    /// clients cannot parse.
    Aes256k,
    /// The file has no key for the entity.
    Absent,
    /// Not a cephx key this crate knows, and why.
    Bad(String),
}

/// The caps of glance's documented cephx user on `pool`, as `ceph auth caps` takes them.
pub fn glance_caps(pool: &str) -> String {
    format!("mon 'profile rbd' osd 'profile rbd pool={pool}' mgr 'profile rbd pool={pool}'")
}

/// What the keyring says of a connect that failed with `errno`: only what it proves, and
/// nothing for errors it has no part in (a monitor that does not answer).
pub(crate) fn explain_connect(errno: i32, identity: &Identity) -> Option<String> {
    let entity = &identity.entity;
    match (&identity.keyring, errno) {
        (Keyring::Unreadable { path, reason }, libc::EACCES | libc::ENOENT | libc::EIO) => Some(
            format!("keyring {path} of {entity} cannot be read by this process: {reason}"),
        ),
        (Keyring::Missing { searched }, libc::ENOENT | libc::EACCES) => Some(format!(
            "no keyring for {entity}: none of {searched} exists"
        )),
        // librados fails the whole file when it cannot parse one of its keys.
        (
            Keyring::File {
                path,
                other: Some((owner, key)),
                ..
            },
            libc::EIO,
        ) => Some(unparsable(path, owner, key)),
        (
            Keyring::File {
                path,
                key: Key::Absent,
                ..
            },
            libc::EACCES,
        ) => Some(format!("keyring {path} has no key for {entity}")),
        (Keyring::File { path, key, .. }, libc::EACCES) => {
            let mut why = format!(
                "authentication failed for {entity} with keyring {path}: the monitors refused \
                 it, as they do when the key is not the cluster's key of {entity}, when the \
                 cluster has no {entity}, or when it has no mon caps (glance's user needs mon \
                 'profile rbd'); `ceph auth get {entity}` on the cluster shows its key and caps"
            );
            if *key == Key::Aes {
                why.push_str(
                    "; a Ceph 20 (Tentacle) cluster also refuses legacy aes keys such as this \
                     one unless its monitors allow them (`ceph mon set auth_allowed_ciphers \
                     aes,aes256k`; a new cluster allows aes256k alone)",
                );
            }
            Some(why)
        }
        _ => None,
    }
}

/// The key of `owner` in keyring `path` that this client could not parse.
fn unparsable(path: &str, owner: &str, key: &Key) -> String {
    match key {
        Key::Aes256k => format!(
            "this client cannot parse keyring {path}: the key of {owner} there is an aes256k \
             key (cephx key type 2), which needs a Ceph 20 (Tentacle) client; use one on this \
             host, or give {owner} a legacy aes key (`ceph-authtool KEYRING --gen-key -n \
             {owner} --key-type aes`, with its caps, then `ceph auth import -i KEYRING`) and let \
             the cluster accept it (`ceph mon set auth_allowed_ciphers aes,aes256k`)"
        ),
        Key::Bad(why) => {
            format!("this client cannot parse keyring {path}: the key of {owner} there is {why}")
        }
        Key::Aes | Key::Absent => format!("this client cannot parse keyring {path}"),
    }
}

/// The keyring librados loads for `entity`: the first file of `list` (the `keyring` option,
/// its metavariables expanded by librados) that exists, and what it holds.
pub(crate) fn inspect(entity: &str, list: &str) -> Keyring {
    // Ceph splits the option as it splits every list: on these characters.
    let searched: Vec<&str> = list
        .split([',', ';', '=', ' ', '\t'])
        .filter(|path| !path.is_empty())
        .collect();
    let Some(path) = searched.iter().find(|path| Path::new(path).exists()) else {
        return Keyring::Missing {
            searched: searched.join(", "),
        };
    };
    match std::fs::read(path) {
        Ok(bytes) => {
            let (key, other) = read(entity, &String::from_utf8_lossy(&bytes));
            Keyring::File {
                path: (*path).to_owned(),
                key,
                other,
            }
        }
        Err(err) => Keyring::Unreadable {
            path: (*path).to_owned(),
            reason: strip_os_error(&err.to_string()),
        },
    }
}

/// The key of `entity` in the text of a keyring, and the key librados would stumble on first:
/// a malformed one, else an aes256k one, with its entity.
fn read(entity: &str, text: &str) -> (Key, Option<(String, Key)>) {
    let mut section: Option<&str> = None;
    let mut found = Key::Absent;
    let (mut bad, mut newer) = (None, None);
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.trim());
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let (Some(owner), "key") = (section, name.trim()) else {
            continue;
        };
        // Base64 holds neither comment character, so one ends the value.
        let value = value.split(['#', ';']).next().unwrap_or_default();
        let key = classify(value.trim().trim_matches('"'));
        match key {
            Key::Bad(_) if bad.is_none() => bad = Some((owner.to_owned(), key.clone())),
            Key::Aes256k if newer.is_none() => newer = Some((owner.to_owned(), key.clone())),
            _ => {}
        }
        if owner == entity {
            found = key;
        }
    }
    (found, bad.or(newer))
}

/// What the base64 text of a key decodes to.
pub(crate) fn classify(text: &str) -> Key {
    let Ok(raw) = openssl::base64::decode_block(text) else {
        return Key::Bad("not base64".into());
    };
    let Some((header, secret)) = raw.split_at_checked(12) else {
        return Key::Bad(format!("{} bytes, too short for a cephx key", raw.len()));
    };
    let kind = u16::from_le_bytes([header[0], header[1]]);
    let len = usize::from(u16::from_le_bytes([header[10], header[11]]));
    if secret.len() < len {
        return Key::Bad(format!(
            "a cephx key of type {kind} that declares a {len}-byte secret and holds {}",
            secret.len()
        ));
    }
    match (kind, len) {
        (1, 16) => Key::Aes,
        (2, 32) => Key::Aes256k,
        (1, _) => Key::Bad(format!("an aes key of {len} bytes, not 16")),
        (2, _) => Key::Bad(format!("an aes256k key of {len} bytes, not 32")),
        _ => Key::Bad(format!(
            "a key of cephx type {kind}, which Ceph does not have"
        )),
    }
}

fn strip_os_error(text: &str) -> String {
    match text.rfind(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's base64 text, as `struct.pack("<HIIH", kind, sec, nsec, len) + secret`.
    fn key(kind: u16, len: u16, secret: usize) -> String {
        let mut raw = Vec::new();
        raw.extend_from_slice(&kind.to_le_bytes());
        raw.extend_from_slice(&1_764_000_000u32.to_le_bytes());
        raw.extend_from_slice(&0u32.to_le_bytes());
        raw.extend_from_slice(&len.to_le_bytes());
        raw.extend(std::iter::repeat_n(7u8, secret));
        openssl::base64::encode_block(&raw)
    }

    #[test]
    fn key_types_are_told_apart() {
        assert!(key(1, 16, 16).starts_with("AQ"));
        assert!(key(2, 32, 32).starts_with("Ag"));
        assert_eq!(classify(&key(1, 16, 16)), Key::Aes);
        assert_eq!(classify(&key(2, 32, 32)), Key::Aes256k);
        assert_eq!(
            classify(&key(1, 32, 32)),
            Key::Bad("an aes key of 32 bytes, not 16".into())
        );
        assert_eq!(
            classify(&key(9, 16, 16)),
            Key::Bad("a key of cephx type 9, which Ceph does not have".into())
        );
        assert_eq!(classify("not a key!"), Key::Bad("not base64".into()));
        assert_eq!(
            classify("AQAA"),
            Key::Bad("3 bytes, too short for a cephx key".into())
        );
        // The bad key of tests/test_faults.py: base64 of text, so a nonsense length.
        assert_eq!(
            classify("AQBvaGVsbG8gd29ybGQhISEhISEhISEhISE="),
            Key::Bad("a cephx key of type 1 that declares a 29295-byte secret and holds 14".into())
        );
    }

    #[test]
    fn the_entity_key_and_the_first_unparsable_one() {
        let text = format!(
            "# made by hand\n[client.admin]\n\tkey = {}\n\tcaps mon = \"allow *\"\n\
             [client.glance]\n  key = \"{}\"  # the new one\n[client.other]\nkey={}\n",
            key(1, 16, 16),
            key(2, 32, 32),
            key(1, 8, 8),
        );
        let (key_of, other) = read("client.glance", &text);
        assert_eq!(key_of, Key::Aes256k);
        // A malformed key is what librados fails on, whatever came before it.
        assert_eq!(
            other,
            Some((
                "client.other".into(),
                Key::Bad("an aes key of 8 bytes, not 16".into())
            ))
        );
        let (key_of, other) = read(
            "client.nobody",
            &text[..text.find("[client.other]").unwrap()],
        );
        assert_eq!(key_of, Key::Absent);
        assert_eq!(other, Some(("client.glance".into(), Key::Aes256k)));
    }

    #[test]
    fn the_first_file_that_exists_is_the_keyring() {
        let dir = std::env::temp_dir().join(format!("keyring-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ceph.client.glance.keyring");
        std::fs::write(
            &file,
            format!("[client.glance]\n\tkey = {}\n", key(1, 16, 16)),
        )
        .unwrap();
        let missing = dir.join("missing.keyring");
        let list = format!("{}, {};/etc/ceph/none", missing.display(), file.display());
        assert_eq!(
            inspect("client.glance", &list),
            Keyring::File {
                path: file.display().to_string(),
                key: Key::Aes,
                other: None
            }
        );
        assert_eq!(
            inspect(
                "client.glance",
                &format!("{},/etc/ceph/none", missing.display())
            ),
            Keyring::Missing {
                searched: format!("{}, /etc/ceph/none", missing.display())
            }
        );
        // A directory exists and cannot be read as a file: what an unreadable file gives.
        assert!(matches!(
            inspect("client.glance", &dir.display().to_string()),
            Keyring::Unreadable { reason, .. } if reason == "Is a directory"
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
