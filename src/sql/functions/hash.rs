//! Hash functions: the digest of a string's UTF-8 bytes as lower-case
//! hexadecimal, as Flink writes it.

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};

use super::super::compiled::Compiled;
use super::compose::{int, strict, text};
use super::definition::{Call, Function};
use super::signature::{p, Kind::*};
use crate::dataflow::row::{DataType as T, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new("MD5", &[p("s", Text)], "VARCHAR", digest).doc(
        "the MD5 digest of `s`, 32 hexadecimal digits",
        "MD5('weir')",
        "'57c6838eabf401f73f6dd50093408e33'",
    ),
    Function::new("SHA1", &[p("s", Text)], "VARCHAR", digest).doc(
        "the SHA-1 digest of `s`, 40 hexadecimal digits",
        "SHA1('')",
        "'da39a3ee5e6b4b0d3255bfef95601890afd80709'",
    ),
    Function::new("SHA224", &[p("s", Text)], "VARCHAR", digest).doc(
        "the SHA-224 digest of `s`",
        "SHA224('')",
        "'d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f'",
    ),
    Function::new("SHA256", &[p("s", Text)], "VARCHAR", digest).doc(
        "the SHA-256 digest of `s`",
        "SHA256('')",
        "'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'",
    ),
    Function::new("SHA384", &[p("s", Text)], "VARCHAR", digest).doc(
        "the SHA-384 digest of `s`",
        "LEFT(SHA384(''), 16)",
        "'38b060a751ac9638'",
    ),
    Function::new("SHA512", &[p("s", Text)], "VARCHAR", digest).doc(
        "the SHA-512 digest of `s`",
        "LEFT(SHA512(''), 16)",
        "'cf83e1357eefb8bd'",
    ),
    Function::new(
        "SHA2",
        &[p("s", Text), p("bits", Integer)],
        "VARCHAR",
        digest,
    )
    .doc(
        "the SHA-2 digest of `s` with `bits` of 224, 256, 384 or 512; NULL for other bits",
        "LEFT(SHA2('', 256), 16)",
        "'e3b0c44298fc1c14'",
    ),
];

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn digest(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let name = name.to_string();
    Ok(strict(T::String, args, move |v| {
        let s = text(&v[0]).as_bytes();
        let bits = match (name.as_str(), v.get(1)) {
            ("SHA2", Some(b)) => int(b),
            ("MD5", _) => 128,
            ("SHA1", _) => 160,
            (n, _) => n[3..].parse().unwrap_or(0),
        };
        Ok(Value::String(match bits {
            128 => hex(&Md5::digest(s)),
            160 => hex(&Sha1::digest(s)),
            224 => hex(&Sha224::digest(s)),
            256 => hex(&Sha256::digest(s)),
            384 => hex(&Sha384::digest(s)),
            512 => hex(&Sha512::digest(s)),
            _ => return Ok(Value::Null),
        }))
    }))
}
