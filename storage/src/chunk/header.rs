//! The chunk header and checksum: parsing, verifying, and opening the body for decoding.

use super::*;

/// A parsed header.
pub(super) struct Parsed {
    pub(super) time: TimeEncoding,
    pub(super) value: ValueEncoding,
    pub(super) count: u16,
    pub(super) body_start: usize,
    pub(super) body_end: usize,
    pub(super) total: usize,
}

#[inline]
pub(super) fn parse_header(bytes: &[u8]) -> Result<Parsed, Error> {
    let b0 = *bytes.first().ok_or_else(|| corrupt(0, "empty chunk"))?;
    if b0 & KIND_RESERVED != 0 {
        return Err(corrupt(0, format!("unknown chunk encoding byte {b0:#04x}")));
    }
    let sparse = b0 & TS_SPARSE != 0;
    let time = match (b0 & TS_DELTA != 0, b0 & TS_REGULAR != 0) {
        (false, false) => TimeEncoding::DeltaOfDelta { sparse },
        (true, false) => TimeEncoding::Delta { sparse },
        (false, true) if !sparse => TimeEncoding::Regular,
        (true, true) => TimeEncoding::Grid { sparse },
        _ => return Err(corrupt(0, format!("conflicting timestamp flags {b0:#04x}"))),
    };
    let mut pos = 1;
    let value = match b0 & KIND_MASK {
        KIND_XOR => ValueEncoding::Xor,
        KIND_CONST => ValueEncoding::Const,
        KIND_INT => {
            let b1 = *bytes
                .get(1)
                .ok_or_else(|| corrupt(1, "truncated chunk header"))?;
            pos = 2;
            let decimals = b1 & INT_DEC_MASK;
            let fixed_k = b1 & INT_FIXED != 0;
            if decimals > int::MAX_DECIMALS || (fixed_k && b1 & (INT_NO_BITS | INT_SPARSE) != 0) {
                return Err(corrupt(1, format!("bad integer parameters {b1:#04x}")));
            }
            ValueEncoding::Int {
                decimals,
                delta_of_delta: b1 & INT_DELTA == 0,
                no_bits: b1 & INT_NO_BITS != 0,
                sparse: b1 & INT_SPARSE != 0,
                fixed_k,
            }
        }
        KIND_ULP => {
            let b1 = *bytes
                .get(1)
                .ok_or_else(|| corrupt(1, "truncated chunk header"))?;
            pos = 2;
            if b1 & !(ULP_DOD | ULP_SHIFT_MASK) != 0 {
                return Err(corrupt(1, format!("bad step parameters {b1:#04x}")));
            }
            ValueEncoding::Ulp {
                delta_of_delta: b1 & ULP_DOD != 0,
                shift: (b1 & ULP_SHIFT_MASK) >> ULP_SHIFT_AT,
            }
        }
        _ => return Err(corrupt(0, format!("unknown value encoding {b0:#04x}"))),
    };
    let at = pos;
    let count = get_uvarint(bytes, &mut pos).map_err(|_| corrupt(at, "bad sample count"))?;
    let count =
        u16::try_from(count).map_err(|_| corrupt(at, format!("sample count {count} too large")))?;
    let at = pos;
    let body_len = get_uvarint(bytes, &mut pos).map_err(|_| corrupt(at, "bad body length"))?;
    let body_end = usize::try_from(body_len)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .ok_or_else(|| corrupt(at, format!("body length {body_len} too large")))?;
    let total = body_end
        .checked_add(4)
        .ok_or_else(|| corrupt(at, "body length too large"))?;
    if total > bytes.len() {
        return Err(corrupt(
            at,
            format!("chunk of {total} bytes truncated to {} bytes", bytes.len()),
        ));
    }
    if count == 0 && body_end != pos {
        return Err(corrupt(at, "empty chunk with a body"));
    }
    Ok(Parsed {
        time,
        value,
        count,
        body_start: pos,
        body_end,
        total,
    })
}

/// The length in bytes of the chunk at the start of `bytes` (header, body and checksum), from
/// its header alone; the checksum is not verified.
pub fn encoded_len(bytes: &[u8]) -> Result<usize, Error> {
    if group::is_member(bytes) {
        return group::member_len(bytes);
    }
    parse_header(bytes).map(|p| p.total)
}

/// The header of the chunk at the start of `bytes`, after verifying its checksum.
pub fn header(bytes: &[u8]) -> Result<ChunkHeader, Error> {
    if group::is_member(bytes) {
        // a group member: its samples decoded, coded as the values of an XOR chunk would be
        let len = group::member_len(bytes)?;
        let it = group::decode_member(bytes, true)?;
        return Ok(ChunkHeader {
            time: TimeEncoding::DeltaOfDelta { sparse: false },
            value: ValueEncoding::Xor,
            num_samples: it.count,
            len,
        });
    }
    let p = parse_header(bytes)?;
    verify_crc(bytes, &p)?;
    Ok(ChunkHeader {
        time: p.time,
        value: p.value,
        num_samples: p.count,
        len: p.total,
    })
}

#[inline]
pub(super) fn verify_crc(bytes: &[u8], p: &Parsed) -> Result<(), Error> {
    let (data, rest) = bytes.split_at(p.body_end.min(bytes.len()));
    let stored = rest
        .get(..4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| corrupt(p.body_end, "missing checksum"))?;
    let actual = crc32fast::hash(data);
    if stored != actual {
        return Err(corrupt(
            p.body_end,
            format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    Ok(())
}

/// Opens the chunk at the start of `bytes` (which may extend past it) for iteration, after
/// verifying header and checksum. Errors in the bit stream itself (only possible if the
/// checksum matched by chance) end the iteration and are reported by [`SampleIter::err`].
#[inline]
pub fn decode(bytes: &[u8]) -> Result<SampleIter<'_>, Error> {
    if group::is_member(bytes) {
        return group::decode_member(bytes, true);
    }
    let p = parse_header(bytes)?;
    verify_crc(bytes, &p)?;
    open_body(bytes, &p)
}

/// Like [`decode`] but without verifying the checksum: exercises the bit-stream decoder on
/// arbitrary input (fuzzing). Never panics.
#[doc(hidden)]
pub fn decode_unverified(bytes: &[u8]) -> Result<SampleIter<'_>, Error> {
    if group::is_member(bytes) {
        return group::decode_member(bytes, false);
    }
    let p = parse_header(bytes)?;
    open_body(bytes, &p)
}

#[inline]
pub(super) fn open_body<'a>(bytes: &'a [u8], p: &Parsed) -> Result<SampleIter<'a>, Error> {
    let body = bytes
        .get(p.body_start..p.body_end)
        .ok_or_else(|| corrupt(p.body_start, "truncated body"))?;
    let mut pos = 0;
    let (mut t0, mut delta1, mut first) = (0i64, 0i64, 0u64);
    if p.count > 0 {
        t0 = get_uvarint(body, &mut pos)
            .map(unzigzag)
            .map_err(|_| corrupt(p.body_start + pos, "bad first timestamp"))?;
        if p.count >= 2 {
            delta1 = get_uvarint(body, &mut pos)
                .map(unzigzag)
                .map_err(|_| corrupt(p.body_start + pos, "bad first delta"))?;
            if delta1 <= 0 {
                return Err(corrupt(
                    p.body_start + pos,
                    format!("first delta {delta1} not positive"),
                ));
            }
        }
        first = get_uvarint(body, &mut pos)
            .map_err(|_| corrupt(p.body_start + pos, "bad first value"))?;
    }
    let bits = &body[pos.min(body.len())..];
    Ok(SampleIter::new(
        p.time,
        p.value,
        p.count,
        t0,
        delta1,
        first,
        BitReader::new(bits, (bits.len() as u64).saturating_mul(8)),
        (p.body_start + pos) as u64,
    ))
}

/// Time range and sample count of the chunk at the start of `bytes` (verifies the checksum and
/// decodes the chunk).
pub fn meta(bytes: &[u8]) -> Result<ChunkMeta, Error> {
    let mut it = decode(bytes)?;
    let num_samples = it.count;
    let mut min_time = i64::MAX;
    let mut max_time = i64::MIN;
    if let Some((t, _)) = it.next() {
        min_time = t;
        max_time = t;
    }
    if it.time == TimeEncoding::Regular && num_samples >= 2 {
        // no need to decode: t0 + (n - 1) * delta
        max_time = i64::from(num_samples - 1)
            .checked_mul(it.delta1)
            .and_then(|x| x.checked_add(min_time))
            .ok_or_else(|| corrupt(0, "timestamps overflow"))?;
    } else {
        for (t, _) in it.by_ref() {
            max_time = t;
        }
        if let Some(e) = it.err.take() {
            return Err(e);
        }
    }
    Ok(ChunkMeta {
        min_time,
        max_time,
        num_samples,
    })
}
