//! Confluent's wire format: a magic byte 0, the writer's schema id as a
//! 4-byte big-endian integer, then the payload. Protobuf puts the message
//! indexes between the id and the payload: which message of the schema's
//! file the payload is (a zigzag varint count, then that many zigzag
//! varint indexes; the first message, `[0]`, is written as one 0 byte).

use crate::dataflow::codec::{get_varint, put_varint};

/// The payload of a framed record, with its schema id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed<'a> {
    pub schema_id: u32,
    pub payload: &'a [u8],
}

/// Splits a framed record; the error names what is wrong with the frame.
pub fn unframe(bytes: &[u8]) -> Result<Framed<'_>, String> {
    match bytes {
        [] => Err("the record is empty: no magic byte and schema id".into()),
        [magic, ..] if *magic != 0 => Err(format!(
            "wrong magic byte {magic:#04x} (a schema registry's framing starts with 0x00): \
             the record was not written by a registry serializer"
        )),
        [_, a, b, c, d, payload @ ..] => Ok(Framed {
            schema_id: u32::from_be_bytes([*a, *b, *c, *d]),
            payload,
        }),
        _ => Err(format!(
            "the record is cut short: {} bytes where the magic byte and a 4-byte schema id need 5",
            bytes.len()
        )),
    }
}

/// Writes the frame's header: magic byte and schema id.
pub fn frame(schema_id: u32, out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
}

/// Reads a zigzag varint (Avro's `int`/`long` encoding, and Protobuf's
/// message indexes): the state codec's varint, unzigzagged.
pub fn read_zigzag(input: &mut &[u8]) -> Result<i64, String> {
    let v = get_varint(input).map_err(|e| {
        if e.contains("longer than") {
            "a number is longer than 10 bytes".to_string()
        } else {
            "the record is cut short inside a number".to_string()
        }
    })?;
    Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// Writes a zigzag varint.
pub fn write_zigzag(v: i64, out: &mut Vec<u8>) {
    put_varint(((v << 1) ^ (v >> 63)) as u64, out);
}

/// Protobuf's message indexes after the schema id: the path of the
/// message in the schema's file (`[0]` is the first top-level message).
pub fn read_message_indexes(input: &mut &[u8]) -> Result<Vec<usize>, String> {
    let count = read_zigzag(input)?;
    if count == 0 {
        return Ok(vec![0]);
    }
    if !(0..=64).contains(&count) {
        return Err(format!("{count} message indexes: not a Protobuf frame"));
    }
    (0..count)
        .map(|_| {
            let i = read_zigzag(input)?;
            usize::try_from(i).map_err(|_| format!("message index {i} is negative"))
        })
        .collect()
}

/// Writes message indexes (`[0]` as one 0 byte, as Confluent's serializers do).
pub fn write_message_indexes(indexes: &[usize], out: &mut Vec<u8>) {
    if indexes == [0] {
        out.push(0);
        return;
    }
    write_zigzag(indexes.len() as i64, out);
    for i in indexes {
        write_zigzag(*i as i64, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_and_bad_frames_are_named() {
        let mut b = Vec::new();
        frame(258, &mut b);
        b.extend_from_slice(b"xy");
        assert_eq!(
            unframe(&b).unwrap(),
            Framed {
                schema_id: 258,
                payload: b"xy"
            }
        );
        assert!(unframe(&[1, 0, 0, 0, 1])
            .unwrap_err()
            .contains("magic byte 0x01"));
        assert!(unframe(&[0, 0, 1]).unwrap_err().contains("cut short"));
        assert!(unframe(&[]).unwrap_err().contains("empty"));
    }

    #[test]
    fn zigzag_and_message_indexes_round_trip() {
        for v in [0i64, -1, 1, 63, -64, 64, i64::MAX, i64::MIN] {
            let mut b = Vec::new();
            write_zigzag(v, &mut b);
            assert_eq!(read_zigzag(&mut &b[..]).unwrap(), v);
        }
        for path in [vec![0], vec![1], vec![2, 0, 3]] {
            let mut b = Vec::new();
            write_message_indexes(&path, &mut b);
            let mut input = &b[..];
            assert_eq!(read_message_indexes(&mut input).unwrap(), path);
            assert!(input.is_empty());
        }
        assert_eq!(read_message_indexes(&mut &[0u8][..]).unwrap(), vec![0]);
    }
}
