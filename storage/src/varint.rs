//! LEB128 integers as Go's `encoding/binary` writes them (`PutUvarint`, `PutVarint`), the one
//! encoding of variable-length integers in the WAL, the index, the chunks and the remote-write
//! protobuf reader.

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The bytes ended inside the varint.
    #[error("truncated varint")]
    Truncated,
    /// The tenth byte carries more than the 64th bit (Go's `binary.Uvarint` overflow).
    #[error("varint overflows 64 bits")]
    Overflow,
}

/// Appends `v` as an unsigned LEB128 varint (Go's `binary.AppendUvarint`).
#[inline]
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zig-zag encoded as an unsigned varint (Go's `binary.AppendVarint`).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, zigzag(v));
}

/// Zig-zag encoding: small magnitudes of either sign become small unsigned numbers.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Reads an unsigned varint at `*pos`, advancing it past the varint (Go's `binary.Uvarint`).
#[inline]
pub fn get_uvarint(data: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    match data.get(*pos) {
        Some(&b) if b < 0x80 => {
            *pos += 1;
            Ok(u64::from(b))
        }
        _ => get_uvarint_long(data, pos),
    }
}

/// Reads a zig-zag varint at `*pos`, advancing it (Go's `binary.Varint`).
#[inline]
pub fn get_varint(data: &[u8], pos: &mut usize) -> Result<i64, VarintError> {
    get_uvarint(data, pos).map(unzigzag)
}

/// [`get_uvarint`] for varints of two or more bytes (and errors).
fn get_uvarint_long(data: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = *data.get(*pos).ok_or(VarintError::Truncated)?;
        *pos += 1;
        if i == 9 && b > 1 {
            return Err(VarintError::Overflow);
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(VarintError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from Go's `binary.AppendUvarint` / `binary.AppendVarint`.
    #[test]
    fn matches_go_encoding_binary() {
        for (v, go) in [
            (0u64, &[0x00][..]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (16384, &[0x80, 0x80, 0x01]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let mut b = vec![];
            put_uvarint(&mut b, v);
            assert_eq!(b, go, "{v}");
            let mut pos = 0;
            assert_eq!(get_uvarint(&b, &mut pos), Ok(v));
            assert_eq!(pos, b.len());
        }
        for (v, go) in [
            (0i64, &[0x00][..]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
        ] {
            let mut b = vec![];
            put_varint(&mut b, v);
            assert_eq!(b, go, "{v}");
            assert_eq!(get_varint(&b, &mut 0), Ok(v));
        }
        for v in [i64::MIN, i64::MAX, -12345, 0] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    /// Go's `binary.Uvarint` errors: truncation, and a tenth byte above 1 (overflow).
    #[test]
    fn refuses_what_go_refuses() {
        assert_eq!(get_uvarint(&[], &mut 0), Err(VarintError::Truncated));
        assert_eq!(get_uvarint(&[0x80], &mut 0), Err(VarintError::Truncated));
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(get_uvarint(&over, &mut 0), Err(VarintError::Overflow));
        let long = [0x80; 11];
        assert_eq!(get_uvarint(&long, &mut 0), Err(VarintError::Overflow));
    }
}
