//! What the keyring of a connection holds for its cephx entity, read as librados reads it, for
//! the errors of a connect that failed: librados says only "Input/output error" for a key it
//! cannot parse and "Permission denied" for a keyring it cannot read, and logs why nowhere a
//! glance host looks.

use std::path::Path;

use crate::error::{Key, Keyring};

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
