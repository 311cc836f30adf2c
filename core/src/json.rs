//! JSON written by hand, for the few small objects the core writes (the marks in the pools'
//! index objects, a command to the Ceph manager): no serializer for a handful of fields.

use std::fmt::Write;

/// A JSON string of ASCII only: what the sweep compares a mark with is the very bytes written
/// (Ceph 16's Python binding compares a value's length in characters).
pub(crate) fn json_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_json_in_ascii() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(
            json_string("h\u{e9}te-\u{1f600}"),
            "\"h\\u00e9te-\\ud83d\\ude00\""
        );
    }
}
