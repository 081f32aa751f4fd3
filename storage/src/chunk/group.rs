//! Histogram group chunks: the `_bucket` series of one classic histogram (and its `_count`)
//! stored together over one time range, as one timestamp column and per-member increments.
//!
//! A classic histogram's buckets are cumulative counters that move together: bucket `j`
//! minus bucket `j - 1` (the observations between their bounds) is small and often constant,
//! and every bucket has the same timestamps. A group chunk codes member 0 as an ordinary
//! chunk (timestamps and values) and every later member `j` as the column of differences
//! `v[j] - v[j - 1]`, row by row, with the integer value codings of ordinary chunks and no
//! timestamps. The block writer groups only members whose values are whole numbers of at most
//! 2^52 (so the differences and the sums that restore them are exact) and checks that the
//! group decodes to every member's exact bits before it uses it.
//!
//! # Byte layout
//!
//! Each member is reached through its own chunk reference: the group is preceded by one
//! marker byte per member, written from the last member down to member 0, and member `j`'s
//! reference points at its marker, `0x80 | j`. Reading a member's bytes therefore starts with
//! its marker, which says how many marker bytes (`j`) follow before the group itself.
//!
//! ```text
//! member  := marker[j] marker[j-1] ... marker[0] group       marker[i] = 0x80 | i
//! group   := 0x40 members:u8 (2..=128) count:uvarint body_len:uvarint body crc32:u32le
//! body    := base_len:uvarint base (members - 1) × column
//! base    := an ordinary chunk (see the module docs of `chunk`): the timestamps and
//!            member 0's values, count samples
//! column  := kind:u8 [intparams:u8] first:uvarint bits_len:uvarint bits[bits_len]
//! kind    := value coding as in an ordinary chunk's kind bits 0-1 (1 XOR, 2 integer,
//!            3 constant); bit 7 set: the column holds the member's own values; other
//!            bits zero; intparams as in an ordinary chunk (integers); first and bits as an
//!            ordinary chunk's first value and value codes, with no timestamp codes (every
//!            column has count values)
//! crc32   := CRC-32 (IEEE) of every byte from 0x40 to the end of body
//! ```
//!
//! Member `j`'s value in row `r` is `member[j - 1][r] + column[j][r]` (f64 addition), or
//! `column[j][r]` itself where the column is marked as holding the member's own values. The
//! writer codes each column the cheaper way: the lowest buckets, which count few observations,
//! are usually cheaper on their own than as offsets from `+Inf`, and a member whose column
//! holds its own values is read without the columns below it (and, where the base's
//! timestamps are regular, without decoding the base's values).
//! Ordinary chunks never have bits 6 or 7 of their first byte set, so readers that do not
//! know groups reject them as an unknown encoding.

use super::*;

/// First byte of a group (after the markers).
const GROUP_KIND: u8 = 0x40;
/// Bit set in every marker byte.
const MARKER: u8 = 0x80;
/// Bit 7 of a column's kind byte: the column holds its member's own values rather than
/// differences from the member below.
const COLUMN_ABSOLUTE: u8 = 0x80;
/// Most members in one group (the marker's 7 bits).
pub const MAX_GROUP_MEMBERS: usize = 128;
/// Largest magnitude of a grouped value: differences of two such values are exact in f64.
const MAX_GROUPED: f64 = (1u64 << 52) as f64;

/// Whether a group can hold the value `v`: a whole number of at most 2^52 (not `-0.0`, NaN,
/// a staleness marker or an infinity).
#[inline]
pub fn groupable(v: f64) -> bool {
    v.abs() <= MAX_GROUPED && v.fract() == 0.0 && v.to_bits() != (-0.0f64).to_bits()
}

/// Whether `bytes` start with a group member's marker (rather than an ordinary chunk).
#[inline]
pub(super) fn is_member(bytes: &[u8]) -> bool {
    bytes.first().is_some_and(|&b| b & MARKER != 0)
}

/// The position in its group of the member whose bytes start `bytes` (from its marker byte
/// alone: the group is checked when decoded); `None` for an ordinary chunk.
#[inline]
pub fn member_index(bytes: &[u8]) -> Option<usize> {
    bytes
        .first()
        .filter(|&&b| b & MARKER != 0)
        .map(|&b| usize::from(b & !MARKER))
}

/// A parsed member reference.
struct MemberRef<'a> {
    /// The member's position in its group.
    member: usize,
    /// The group's bytes, from [`GROUP_KIND`] to the end of its checksum.
    group: &'a [u8],
    /// Where the group starts in the member's bytes (= `member + 1`).
    group_at: usize,
    members: usize,
    count: u16,
    body_start: usize,
    body_end: usize,
}

fn parse_member(bytes: &[u8]) -> Result<MemberRef<'_>, Error> {
    let b0 = *bytes.first().ok_or_else(|| corrupt(0, "empty chunk"))?;
    if b0 & MARKER == 0 {
        return Err(corrupt(0, "not a histogram group member"));
    }
    let member = usize::from(b0 & !MARKER);
    for i in 1..=member {
        let want = MARKER | (member - i) as u8;
        match bytes.get(i) {
            Some(&b) if b == want => {}
            Some(&b) => {
                return Err(corrupt(
                    i,
                    format!("group marker {b:#04x} where {want:#04x} belongs"),
                ))
            }
            None => return Err(corrupt(i, "group markers truncated")),
        }
    }
    let group_at = member + 1;
    let g = bytes.get(group_at..).unwrap_or(&[]);
    match g.first() {
        Some(&GROUP_KIND) => {}
        Some(&b) => {
            return Err(corrupt(
                group_at,
                format!("group kind {b:#04x} after the markers"),
            ))
        }
        None => return Err(corrupt(group_at, "group truncated")),
    }
    let members = usize::from(
        *g.get(1)
            .ok_or_else(|| corrupt(group_at + 1, "group truncated"))?,
    );
    if !(2..=MAX_GROUP_MEMBERS).contains(&members) || member >= members {
        return Err(corrupt(
            group_at + 1,
            format!("member {member} of a group of {members}"),
        ));
    }
    let mut pos = 2;
    let count = get_uvarint(g, &mut pos).map_err(|_| corrupt(group_at + pos, "bad row count"))?;
    let count = u16::try_from(count)
        .ok()
        .filter(|&c| c > 0)
        .ok_or_else(|| corrupt(group_at + 2, format!("row count {count}")))?;
    let at = pos;
    let body_len =
        get_uvarint(g, &mut pos).map_err(|_| corrupt(group_at + at, "bad body length"))?;
    let body_end = usize::try_from(body_len)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .filter(|&e| e.checked_add(4).is_some_and(|t| t <= g.len()))
        .ok_or_else(|| {
            corrupt(
                group_at + at,
                format!("group body of {body_len} bytes truncated"),
            )
        })?;
    Ok(MemberRef {
        member,
        group: &g[..body_end + 4],
        group_at,
        members,
        count,
        body_start: pos,
        body_end,
    })
}

/// The member position and the length of the member's bytes (markers and group) of the
/// group member at the start of `bytes`; `None` for an ordinary chunk or bytes that are not a
/// well-formed group (see [`decode`]'s error for why).
pub fn group_member(bytes: &[u8]) -> Option<(u8, usize)> {
    let m = parse_member(bytes).ok()?;
    Some((m.member as u8, m.group_at + m.group.len()))
}

/// The length of the group member at the start of `bytes`: its markers and the group.
pub(super) fn member_len(bytes: &[u8]) -> Result<usize, Error> {
    parse_member(bytes).map(|m| m.group_at + m.group.len())
}

fn verify_group_crc(m: &MemberRef<'_>) -> Result<(), Error> {
    let (data, rest) = m.group.split_at(m.body_end);
    let stored = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let actual = crc32fast::hash(data);
    if stored != actual {
        return Err(corrupt(
            m.group_at + m.body_end,
            format!("group checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    Ok(())
}

/// A column's header and bits.
struct Column<'a> {
    value: ValueEncoding,
    /// Whether the column holds the member's own values (not differences).
    absolute: bool,
    first: u64,
    bits: &'a [u8],
    /// Offset of `bits` in the group.
    at: usize,
}

fn parse_column<'a>(body: &'a [u8], pos: &mut usize, base: usize) -> Result<Column<'a>, Error> {
    let at = *pos;
    let b0 = *body
        .get(at)
        .ok_or_else(|| corrupt(base + at, "group column missing"))?;
    *pos += 1;
    let absolute = b0 & COLUMN_ABSOLUTE != 0;
    let value = match b0 & !COLUMN_ABSOLUTE {
        KIND_XOR => ValueEncoding::Xor,
        KIND_CONST => ValueEncoding::Const,
        KIND_INT => {
            let b1 = *body
                .get(*pos)
                .ok_or_else(|| corrupt(base + *pos, "group column truncated"))?;
            *pos += 1;
            let decimals = b1 & INT_DEC_MASK;
            let fixed_k = b1 & INT_FIXED != 0;
            if decimals > int::MAX_DECIMALS || (fixed_k && b1 & (INT_NO_BITS | INT_SPARSE) != 0) {
                return Err(corrupt(
                    base + *pos - 1,
                    format!("bad integer parameters {b1:#04x}"),
                ));
            }
            ValueEncoding::Int {
                decimals,
                delta_of_delta: b1 & INT_DELTA == 0,
                no_bits: b1 & INT_NO_BITS != 0,
                sparse: b1 & INT_SPARSE != 0,
                fixed_k,
            }
        }
        _ => return Err(corrupt(base + at, format!("unknown column kind {b0:#04x}"))),
    };
    let first =
        get_uvarint(body, pos).map_err(|_| corrupt(base + *pos, "bad column first value"))?;
    let len = get_uvarint(body, pos).map_err(|_| corrupt(base + *pos, "bad column length"))?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .filter(|&e| e <= body.len())
        .ok_or_else(|| corrupt(base + *pos, format!("column of {len} bytes truncated")))?;
    let bits = &body[*pos..end];
    let c = Column {
        value,
        absolute,
        first,
        bits,
        at: base + *pos,
    };
    *pos = end;
    Ok(c)
}

/// Where a column is: its coding, first value code and the range of its bits in the group.
#[derive(Debug, Clone, Copy)]
struct ColumnAt {
    value: ValueEncoding,
    absolute: bool,
    first: u64,
    start: usize,
    end: usize,
}

/// One histogram group opened for decoding its members, in any order, each column once.
///
/// Opening verifies the group's checksum (once), reads every column's header and the
/// timestamps: from the base's header alone where they are regular, else by decoding the
/// base. Asking for member `j` decodes the columns up to `j` that are not decoded yet,
/// starting at the highest column at or below `j` that holds its member's own values when no
/// wanted member lies below it (so member 0's values are decoded only when needed). The
/// members a reader will still ask for (`wanted`) are kept as they are passed on the way up;
/// the others are not. Readers that read several members of one group (the querier, for a
/// histogram's buckets) keep one decoder per group instead of decoding each member alone.
#[derive(Debug)]
pub struct GroupDecoder {
    ts: Vec<i64>,
    /// Values of member `at`, the highest decoded so far (empty while `base` is pending).
    top: Vec<f64>,
    at: usize,
    /// Where the base chunk is in the group while member 0's values are not decoded yet.
    base: Option<(usize, usize)>,
    columns: Vec<ColumnAt>,
    /// The group's length in bytes: later calls must pass a member of the same group.
    len: usize,
    /// Whether the checksum was verified (a member asked for again is decoded with the same
    /// care).
    verify: bool,
    /// Members still to be asked for (bit `j`: member `j`).
    wanted: u128,
    /// Values of wanted members below `at`, kept when they were passed.
    kept: Vec<Option<Vec<f64>>>,
    /// Buffers reused for the next column.
    spare: Vec<f64>,
    scratch: Vec<i64>,
}

impl GroupDecoder {
    /// Opens the group of the member whose bytes start `bytes` (from its marker): checks the
    /// group's structure (and its checksum when `verify`), reads every column's header and
    /// the timestamps (decoding member 0 with them unless they are regular and the lowest
    /// member in `wanted` is read without it). `wanted` has bit `j` set for each member `j`
    /// that will be asked for.
    pub fn open(bytes: &[u8], wanted: u128, verify: bool) -> Result<GroupDecoder, Error> {
        let m = parse_member(bytes)?;
        if verify {
            verify_group_crc(&m)?;
        }
        let body = &m.group[m.body_start..m.body_end];
        let off = m.group_at + m.body_start;
        let mut pos = 0;
        let base_len = get_uvarint(body, &mut pos).map_err(|_| corrupt(off, "bad base length"))?;
        let base_end = usize::try_from(base_len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e <= body.len())
            .ok_or_else(|| corrupt(off, format!("base chunk of {base_len} bytes truncated")))?;
        let base = &body[pos..base_end];
        let p = header::parse_header(base).map_err(|e| shift(e, off + pos))?;
        if p.total != base.len() || p.count != m.count {
            return Err(corrupt(
                off + pos,
                format!(
                    "base chunk of {} samples in {} bytes, group says {} rows in {} bytes",
                    p.count,
                    p.total,
                    m.count,
                    base.len()
                ),
            ));
        }
        let n = usize::from(m.count);
        let base_at = (m.body_start + pos, m.body_start + base_end);
        let mut cpos = base_end;
        let mut columns = Vec::with_capacity(m.members - 1);
        for _ in 1..m.members {
            let c = parse_column(body, &mut cpos, off)?;
            let start = c.at - m.group_at;
            columns.push(ColumnAt {
                value: c.value,
                absolute: c.absolute,
                first: c.first,
                start,
                end: start + c.bits.len(),
            });
        }
        if cpos != body.len() {
            return Err(corrupt(off + cpos, "trailing bytes after the last column"));
        }
        // member 0's values are decoded now, with the timestamps, when the lowest wanted
        // member's chain starts at the base (or the timestamps are not regular); else the
        // timestamps come from the base's header and its values wait until needed
        let lowest = (wanted != 0).then(|| wanted.trailing_zeros() as usize);
        let lazy = p.time == TimeEncoding::Regular
            && lowest.is_none_or(|w| columns[..w.min(columns.len())].iter().any(|c| c.absolute));
        let (ts, top, pending) = if lazy {
            let it = header::open_body(base, &p).map_err(|e| shift(e, off + pos))?;
            let (t0, d) = (it.t0, it.delta1);
            let last = i64::try_from(n - 1)
                .ok()
                .and_then(|k| k.checked_mul(d))
                .and_then(|x| t0.checked_add(x));
            if last.is_none() {
                return Err(corrupt(off + pos, "timestamps overflow"));
            }
            let ts: Vec<i64> = (0..n as i64).map(|i| t0 + i * d).collect();
            (ts, Vec::new(), Some(base_at))
        } else {
            let mut it = header::open_body(base, &p).map_err(|e| shift(e, off + pos))?;
            let (mut ts, mut vs) = (Vec::with_capacity(n), Vec::with_capacity(n));
            it.decode_into(&mut ts, &mut vs);
            if let Some(e) = it.take_err() {
                return Err(shift(e, off + pos));
            }
            (ts, vs, None)
        };
        Ok(GroupDecoder {
            ts,
            top,
            at: 0,
            base: pending,
            columns,
            len: m.group.len(),
            verify,
            wanted,
            kept: Vec::new(),
            spare: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The group's timestamps (every member has them all).
    pub fn timestamps(&self) -> &[i64] {
        &self.ts
    }

    /// Whether every member asked for in `wanted` has been asked for.
    pub fn done(&self) -> bool {
        self.wanted == 0
    }

    /// Appends the samples of the member whose bytes start `bytes` (a member of the group
    /// this decoder opened) to `ts` and `vs`; returns their number. A member asked for a
    /// second time, or one below the highest decoded that was not `wanted`, is decoded again
    /// on its own.
    pub fn member_into(
        &mut self,
        bytes: &[u8],
        ts: &mut Vec<i64>,
        vs: &mut Vec<f64>,
    ) -> Result<usize, Error> {
        let m = parse_member(bytes)?;
        if m.group.len() != self.len || m.members != self.columns.len() + 1 {
            return Err(corrupt(0, "not a member of the group being decoded"));
        }
        let j = m.member;
        let bit = 1u128 << j;
        let vals: &[f64] = if j == self.at {
            self.decode_to(m.group, j)
                .map_err(|e| shift(e, m.group_at))?;
            &self.top
        } else if let Some(v) = self.kept.get_mut(j).and_then(Option::take) {
            vs.extend_from_slice(&v);
            self.spare = v;
            &[]
        } else if j > self.at {
            self.decode_to(m.group, j)
                .map_err(|e| shift(e, m.group_at))?;
            &self.top
        } else {
            let mut g = GroupDecoder::open(bytes, bit, self.verify)?;
            g.decode_to(m.group, j).map_err(|e| shift(e, m.group_at))?;
            vs.extend_from_slice(&g.top);
            &[]
        };
        vs.extend_from_slice(vals);
        ts.extend_from_slice(&self.ts);
        self.wanted &= !bit;
        Ok(self.ts.len())
    }

    /// The samples of the member whose bytes start `bytes`, taking the decoder's buffers.
    fn into_member(mut self, bytes: &[u8]) -> Result<(Vec<i64>, Vec<f64>), Error> {
        let m = parse_member(bytes)?;
        self.decode_to(m.group, m.member)
            .map_err(|e| shift(e, m.group_at))?;
        Ok((self.ts, self.top))
    }

    /// Decodes member 0's values from the base chunk (`group` from its kind byte) if they
    /// are not decoded yet, checking the timestamps taken from its header.
    fn decode_base(&mut self, group: &[u8]) -> Result<(), Error> {
        let Some((start, end)) = self.base.take() else {
            return Ok(());
        };
        let base = group
            .get(start..end)
            .ok_or_else(|| corrupt(start, "base outside the group"))?;
        let p = header::parse_header(base).map_err(|e| shift(e, start))?;
        let mut it = header::open_body(base, &p).map_err(|e| shift(e, start))?;
        self.scratch.clear();
        let mut vs = std::mem::take(&mut self.spare);
        vs.clear();
        it.decode_into(&mut self.scratch, &mut vs);
        if let Some(e) = it.take_err() {
            return Err(shift(e, start));
        }
        if self.scratch != self.ts {
            return Err(corrupt(start, "base timestamps differ from its header's"));
        }
        self.top = vs;
        Ok(())
    }

    /// Decodes the columns above `at` up to member `j` (`group` from its kind byte); offsets
    /// in errors count from the group's start.
    fn decode_to(&mut self, group: &[u8], j: usize) -> Result<(), Error> {
        if j > self.at {
            // start at the highest column up to `j` that holds its member's own values, when
            // no member still wanted would be passed over (member `at` included)
            let from = (self.at + 1..=j).rev().find(|&k| {
                self.columns.get(k - 1).is_some_and(|c| c.absolute)
                    && self.wanted & (mask_below(k) & !mask_below(self.at)) == 0
            });
            if let Some(k) = from {
                // `top` is stale from here: column `k` does not read it
                self.at = k - 1;
            }
        }
        let needs_base = if self.at == j {
            j == 0
        } else {
            // the chain starts at member 0: its values are read or kept
            self.at == 0
                && (self.wanted & 1 != 0 || self.columns.first().is_some_and(|c| !c.absolute))
        };
        if needs_base {
            self.decode_base(group)?;
        }
        let n = self.ts.len();
        let count = u16::try_from(n).unwrap_or(u16::MAX);
        while self.at < j {
            let k = self.at + 1;
            let c = *self
                .columns
                .get(k - 1)
                .ok_or_else(|| corrupt(0, format!("group has no member {j}")))?;
            if !c.absolute
                && matches!(c.value, ValueEncoding::Const)
                && c.first == 0
                && c.start == c.end
            {
                // a constant zero offset (`+Inf` against the count): member `k` is member
                // `k - 1`, exactly (whole numbers plus +0.0)
                if self.wanted & (1u128 << (k - 1)) != 0 {
                    if self.kept.len() < k {
                        self.kept.resize_with(self.columns.len() + 1, || None);
                    }
                    self.kept[k - 1] = Some(self.top.clone());
                }
                self.at = k;
                continue;
            }
            let bits = group
                .get(c.start..c.end)
                .ok_or_else(|| corrupt(c.start, "column outside the group"))?;
            let mut ci = SampleIter::new(
                TimeEncoding::Regular,
                c.value,
                count,
                0,
                1,
                c.first,
                BitReader::new(bits, (bits.len() as u64).saturating_mul(8)),
                c.start as u64,
            );
            let mut col = std::mem::take(&mut self.spare);
            col.clear();
            self.scratch.clear();
            ci.decode_into(&mut self.scratch, &mut col);
            if let Some(e) = ci.take_err() {
                return Err(e);
            }
            if col.len() != n {
                return Err(corrupt(c.start, "column shorter than the group"));
            }
            if !c.absolute {
                for (v, p) in col.iter_mut().zip(&self.top) {
                    *v += p;
                }
            }
            let below = std::mem::replace(&mut self.top, col);
            if self.wanted & (1u128 << (k - 1)) != 0 {
                if self.kept.len() < k {
                    self.kept.resize_with(self.columns.len() + 1, || None);
                }
                self.kept[k - 1] = Some(below);
            } else {
                self.spare = below;
            }
            self.at = k;
        }
        Ok(())
    }
}

/// Bits `0..k` set (members below `k`).
#[inline]
fn mask_below(k: usize) -> u128 {
    if k >= 128 {
        u128::MAX
    } else {
        (1u128 << k) - 1
    }
}

/// One group a reader reads some members of: the members it will read (see
/// [`want`](GroupSlot::want)) and, while some are unread, the group's [`GroupDecoder`],
/// opened by the first member read (checksum verified). Readers keep one slot per group,
/// told apart by where the group is (a block and chunk reference), never by its bytes.
#[derive(Debug, Default)]
pub struct GroupSlot {
    wanted: u128,
    dec: Option<GroupDecoder>,
}

impl GroupSlot {
    /// Notes that member `j` will be read.
    pub fn want(&mut self, j: usize) {
        self.wanted |= 1u128 << (j % MAX_GROUP_MEMBERS);
    }

    /// Appends the samples of the member whose bytes start `bytes` to `ts` and `vs`; returns
    /// their number. The decoder is dropped once every wanted member has been read (a later
    /// read opens the group again).
    pub fn read(
        &mut self,
        bytes: &[u8],
        ts: &mut Vec<i64>,
        vs: &mut Vec<f64>,
    ) -> Result<usize, Error> {
        let mut dec = match self.dec.take() {
            Some(d) => d,
            None => GroupDecoder::open(bytes, self.wanted, true)?,
        };
        let n = dec.member_into(bytes, ts, vs)?;
        if !dec.done() {
            self.dec = Some(dec);
        }
        Ok(n)
    }
}

/// Decodes the group member at the start of `bytes` on its own (member `j` needs the
/// columns of members `0..=j`); `verify` checks the group's checksum. Readers of several
/// members of one group use a [`GroupDecoder`].
pub(super) fn decode_member(bytes: &[u8], verify: bool) -> Result<SampleIter<'static>, Error> {
    let (ts, vs) = GroupDecoder::open(bytes, 0, verify)?.into_member(bytes)?;
    Ok(SampleIter::materialized(ts, vs))
}

/// Moves a chunk error's offset by `by` bytes (errors of the base chunk, whose offsets count
/// from its own start).
fn shift(e: Error, by: usize) -> Error {
    match e {
        Error::Corrupt {
            what,
            path,
            offset,
            reason,
        } => Error::Corrupt {
            what,
            path,
            offset: offset + by as u64,
            reason,
        },
        e => e,
    }
}

/// A guess at the bits a column of whole numbers codes in: per row, the bit length of its
/// change from the row before or of the change of that change, whichever sum is smaller
/// (the integer codings code one or the other).
fn guess_bits(values: &[f64]) -> u64 {
    let (mut d1, mut d2, mut prev) = (0u64, 0u64, 0f64);
    for w in values.windows(2) {
        let d = w[1] - w[0];
        d1 += 64 - (d.abs() as u64).leading_zeros() as u64;
        d2 += 64 - ((d - prev).abs() as u64).leading_zeros() as u64;
        prev = d;
    }
    d1.min(d2)
}

/// Codes one column of `values` (one per row of `rows`) into `out` (replacing what it held):
/// kind byte (with [`COLUMN_ABSOLUTE`] when `absolute`), integer parameters, first value
/// code, length and bits; `None` when the cheapest coding is not row-regular.
fn encode_column(rows: &[i64], values: &[f64], absolute: bool, out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let mut w = ChunkWriter::new();
    for (&r, &v) in rows.iter().zip(values) {
        w.append(r, v);
    }
    let (time, value, param) = w.cheapest(rows, values);
    let e = w.encoder_from(rows, values, time, value, param);
    if e.time != TimeEncoding::Regular && rows.len() > 1 {
        return None;
    }
    let (kb, kn) = e.kind_bytes();
    out.push((kb[0] & KIND_MASK) | if absolute { COLUMN_ABSOLUTE } else { 0 });
    if kn == 2 {
        out.push(kb[1]);
    }
    put_uvarint(out, e.first_value_code());
    let bits = e.w.bytes();
    put_uvarint(out, bits.len() as u64);
    out.extend_from_slice(bits);
    Some(())
}

/// Encodes one histogram group: `ts` the shared timestamps (strictly increasing, at most
/// [`MAX_ENCODED_SAMPLES`]), `members[j]` member `j`'s values (same length). Returns the
/// markers followed by the group (member `j`'s bytes start at offset `members - 1 - j`), or
/// `None` when the group cannot be coded losslessly or does not apply: fewer than 2 or more
/// than [`MAX_GROUP_MEMBERS`] members, lengths that differ, a value that is not a whole number
/// of at most 2^52 (NaN, staleness markers, fractions, `-0.0`), or any member that would not
/// decode to its exact bits.
pub fn encode_group(ts: &[i64], members: &[&[f64]]) -> Option<Vec<u8>> {
    encode_group_with(ts, members, true)
}

/// [`encode_group`]; `own_values: false` codes every column as an offset from the member
/// below, as groups were written before columns could hold their own values (tests read
/// such groups).
fn encode_group_with(ts: &[i64], members: &[&[f64]], own_values: bool) -> Option<Vec<u8>> {
    let n = members.len();
    if !(2..=MAX_GROUP_MEMBERS).contains(&n)
        || ts.is_empty()
        || ts.len() > MAX_ENCODED_SAMPLES
        || ts.windows(2).any(|w| w[1] <= w[0])
        || members.iter().any(|m| m.len() != ts.len())
    {
        return None;
    }
    if !members.iter().all(|m| m.iter().all(|&v| groupable(v))) {
        return None;
    }
    let mut base = ChunkWriter::new();
    for (&t, &v) in ts.iter().zip(members[0]) {
        base.append(t, v);
    }
    if base.len() != ts.len() {
        return None;
    }
    let base = base.finish();
    let mut body = Vec::with_capacity(base.len() + 8 * n);
    put_uvarint(&mut body, base.len() as u64);
    body.extend_from_slice(&base);
    let rows: Vec<i64> = (0..ts.len() as i64).collect();
    let mut d = Vec::with_capacity(ts.len());
    let (mut diff, mut own) = (Vec::new(), Vec::new());
    for j in 1..n {
        d.clear();
        // whole numbers of at most 2^52: the difference and the sum restoring it are exact
        d.extend(members[j].iter().zip(members[j - 1]).map(|(a, b)| a - b));
        // the member's own values where they are no dearer (a low bucket counts few
        // observations, and is then read without the columns below it); both codings are
        // made unless a guess of their sizes tells them apart by more than a quarter
        // (BENCHMARKS.md: 0.03 % more bytes than coding both everywhere, half the time)
        let (ge, go) = (guess_bits(&d), guess_bits(members[j]));
        let try_diff = !own_values || ge <= go + go / 4 + 64;
        let try_own = own_values && go <= ge + ge / 4 + 64;
        if try_diff {
            encode_column(&rows, &d, false, &mut diff)?;
        }
        if try_own {
            encode_column(&rows, members[j], true, &mut own)?;
        }
        body.extend_from_slice(if try_own && (!try_diff || own.len() <= diff.len()) {
            &own
        } else {
            &diff
        });
    }
    let mut out = Vec::with_capacity(n + body.len() + 16);
    for j in (0..n).rev() {
        out.push(MARKER | j as u8);
    }
    let g = out.len();
    out.push(GROUP_KIND);
    out.push(n as u8);
    put_uvarint(&mut out, ts.len() as u64);
    put_uvarint(&mut out, body.len() as u64);
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out[g..]);
    out.extend_from_slice(&crc.to_le_bytes());
    // lossless or nothing: every member must decode to its exact bits
    let all = u128::MAX >> (128 - n);
    let mut g = GroupDecoder::open(&out[n - 1..], all, true).ok()?;
    let (mut dt, mut dv) = (Vec::new(), Vec::new());
    for (j, m) in members.iter().enumerate() {
        dt.clear();
        dv.clear();
        g.member_into(&out[n - 1 - j..], &mut dt, &mut dv).ok()?;
        if dt != ts
            || dv
                .iter()
                .zip(m.iter())
                .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(bytes: &[u8], n: usize, j: usize) -> Vec<(i64, u64)> {
        let b = &bytes[n - 1 - j..];
        assert_eq!(encoded_len(b).unwrap(), b.len());
        assert_eq!(group_member(b), Some((j as u8, b.len())));
        let mut it = decode(b).unwrap();
        let a: Vec<_> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
        assert!(it.err().is_none());
        let (mut ts, mut vs) = (Vec::new(), Vec::new());
        decode_into(b, &mut ts, &mut vs).unwrap();
        let bulk: Vec<_> = ts.iter().zip(&vs).map(|(&t, v)| (t, v.to_bits())).collect();
        assert_eq!(a, bulk);
        let m = meta(b).unwrap();
        assert_eq!(usize::from(m.num_samples), a.len());
        assert_eq!(header(b).unwrap().len, b.len());
        a
    }

    fn roundtrip(ts: &[i64], members: &[Vec<f64>]) -> Option<Vec<u8>> {
        let refs: Vec<&[f64]> = members.iter().map(Vec::as_slice).collect();
        let bytes = encode_group(ts, &refs)?;
        for (j, m) in members.iter().enumerate() {
            let want: Vec<_> = ts.iter().zip(m).map(|(&t, v)| (t, v.to_bits())).collect();
            assert_eq!(member(&bytes, members.len(), j), want, "member {j}");
        }
        Some(bytes)
    }

    /// Cumulative buckets of a histogram scraped every 15 s.
    fn histogram(buckets: usize, rows: usize, seed: u64) -> (Vec<i64>, Vec<Vec<f64>>) {
        let mut x = seed | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let ts: Vec<i64> = (0..rows as i64)
            .map(|i| 1_700_000_000_000 + 15_000 * i)
            .collect();
        let mut counts = vec![0f64; buckets];
        let mut members = vec![Vec::new(); buckets];
        for _ in 0..rows {
            for c in counts.iter_mut() {
                *c += (rnd() % 5) as f64;
            }
            let mut cum = 0.0;
            for (j, c) in counts.iter().enumerate() {
                cum += c;
                members[j].push(cum);
            }
        }
        (ts, members)
    }

    #[test]
    fn histogram_group_is_smaller_than_its_members() {
        let (ts, members) = histogram(12, 120, 7);
        let bytes = roundtrip(&ts, &members).unwrap();
        let apart: usize = members
            .iter()
            .map(|m| {
                let mut w = ChunkWriter::new();
                for (&t, &v) in ts.iter().zip(m) {
                    w.append(t, v);
                }
                w.finish().len()
            })
            .sum();
        // each member's own chunk codes the sum of all lower buckets' noise; the group does not
        assert!(
            bytes.len() * 5 < apart * 4,
            "group {} bytes, members apart {apart}",
            bytes.len()
        );
    }

    #[test]
    fn refuses_what_it_cannot_code_exactly() {
        let ts = [1000, 2000, 3000];
        let ok = [1.0, 2.0, 3.0];
        for bad in [
            [1.0, f64::NAN, 3.0],
            [1.0, f64::from_bits(0x7ff0_0000_0000_0002), 3.0],
            [1.0, 2.5, 3.0],
            [1.0, -0.0, 3.0],
            [1.0, f64::INFINITY, 3.0],
            [1.0, 9.1e15, 3.0],
        ] {
            assert!(encode_group(&ts, &[&ok, &bad]).is_none(), "{bad:?}");
            assert!(encode_group(&ts, &[&bad, &ok]).is_none(), "{bad:?}");
        }
        assert!(encode_group(&ts, &[&ok]).is_none(), "one member");
        assert!(
            encode_group(&ts, &[&ok, &ok[..2]]).is_none(),
            "lengths differ"
        );
        assert!(
            encode_group(&[1000, 1000, 3000], &[&ok, &ok]).is_none(),
            "timestamps"
        );
        assert!(encode_group(&[], &[&[], &[]]).is_none(), "empty");
        let many = vec![&ok[..]; MAX_GROUP_MEMBERS + 1];
        assert!(encode_group(&ts, &many).is_none());
        let most = vec![&ok[..]; MAX_GROUP_MEMBERS];
        roundtrip(&ts, &most.iter().map(|m| m.to_vec()).collect::<Vec<_>>()).unwrap();
    }

    #[test]
    fn resets_negative_increments_and_one_row() {
        // a counter reset in every member, a lower bucket above a higher one, one row
        let ts = [10, 20, 30, 40];
        let a = vec![5.0, 9.0, 0.0, 2.0];
        let b = vec![7.0, 8.0, 1.0, 2.0];
        let c = vec![7.0, 12.0, 1.0, 4e15];
        roundtrip(&ts, &[a, b, c]).unwrap();
        roundtrip(&[5], &[vec![1.0], vec![3.0]]).unwrap();
    }

    #[test]
    fn corrupt_groups_are_errors() {
        let (ts, members) = histogram(4, 30, 3);
        let bytes = roundtrip(&ts, &members).unwrap();
        // every flipped byte: an error or (markers aside) a checksum mismatch, never a panic
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                let _ = encoded_len(&b);
                let _ = group_member(&b);
                if i >= 4 {
                    assert!(decode(&b).is_err(), "byte {i} bit {bit:#x} went unnoticed");
                }
                if let Ok(mut it) = decode_unverified(&b) {
                    for _ in it.by_ref() {}
                }
            }
        }
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err());
            let _ = decode_unverified(&bytes[..cut]);
        }
    }

    #[test]
    fn members_read_in_any_order_and_reused_buffers() {
        let (ts, a) = histogram(6, 100, 11);
        let (_, b) = histogram(6, 100, 12);
        let ga = roundtrip(&ts, &a).unwrap();
        let gb = roundtrip(&ts, &b).unwrap();
        let want = |m: &[Vec<f64>], j: usize| -> Vec<(i64, u64)> {
            ts.iter()
                .zip(&m[j])
                .map(|(&t, v)| (t, v.to_bits()))
                .collect()
        };
        for j in [5, 0, 3, 1, 4, 2] {
            assert_eq!(member(&ga, 6, j), want(&a, j));
            assert_eq!(member(&gb, 6, 5 - j), want(&b, 5 - j));
        }
        // the same buffer (same address) holding another group of the same length
        let mut buf = ga.clone();
        assert_eq!(member(&buf, 6, 4), want(&a, 4));
        // a group of the same length with other values: the last row's top bucket one more
        let mut c = a.clone();
        *c[5].last_mut().unwrap() += 1.0;
        let gc = roundtrip(&ts, &c).unwrap();
        assert_eq!(gc.len(), buf.len());
        buf.copy_from_slice(&gc);
        assert_eq!(member(&buf, 6, 5), want(&c, 5));
        let mut buf2 = gb.clone();
        buf2.resize(ga.len().max(gb.len()), 0);
        buf2[..ga.len()].copy_from_slice(&ga);
        assert_eq!(member(&buf2[..ga.len()], 6, 2), want(&a, 2));
    }

    /// A histogram's members as the block writer orders them: the count, `+Inf` (equal to
    /// it), then `buckets - 1` finite buckets from the lowest.
    fn histogram_as_written(buckets: usize, rows: usize, seed: u64) -> (Vec<i64>, Vec<Vec<f64>>) {
        let (ts, mut m) = histogram(buckets, rows, seed);
        let count = m[buckets - 1].clone();
        m.insert(0, count.clone());
        m[1] = count;
        (ts, m)
    }

    /// Per column of a group as coded: whether it holds its member's own values.
    fn column_kinds(bytes: &[u8], n: usize) -> Vec<bool> {
        let g = GroupDecoder::open(&bytes[n - 1..], 0, true).unwrap();
        g.columns.iter().map(|c| c.absolute).collect()
    }

    #[test]
    fn low_bucket_coded_on_its_own_is_read_without_the_base() {
        let (ts, mut m) = histogram_as_written(6, 200, 5);
        // make the lowest finite bucket small against the rest
        for (i, v) in m[2].iter_mut().enumerate() {
            *v = (i / 7) as f64;
        }
        for j in 3..m.len() {
            let (lower, upper) = m.split_at_mut(j);
            for (v, below) in upper[0].iter_mut().zip(&lower[j - 1]) {
                *v = v.max(*below);
            }
        }
        let n = m.len();
        let bytes = roundtrip(&ts, &m).unwrap();
        let kinds = column_kinds(&bytes, n);
        assert!(kinds[1], "lowest finite bucket coded on its own: {kinds:?}");
        assert!(!kinds[0], "+Inf coded against the count: {kinds:?}");
        // read alone: timestamps from the base's header, member 0's values never decoded
        let mut g = GroupDecoder::open(&bytes[n - 1 - 2..], 1 << 2, true).unwrap();
        let (mut t, mut v) = (Vec::new(), Vec::new());
        g.member_into(&bytes[n - 1 - 2..], &mut t, &mut v).unwrap();
        assert_eq!(t, ts);
        assert_eq!(v, m[2]);
        assert!(g.base.is_some(), "the base's values were decoded");
        // the count asked for afterwards still comes out right (decoded on its own)
        let (mut t0, mut v0) = (Vec::new(), Vec::new());
        g.member_into(&bytes[n - 1..], &mut t0, &mut v0).unwrap();
        assert_eq!((t0, v0), (ts.clone(), m[0].clone()));
    }

    #[test]
    fn groups_of_offsets_only_read_as_before() {
        // the layout written before columns could hold their own values
        let (ts, m) = histogram_as_written(6, 150, 9);
        let refs: Vec<&[f64]> = m.iter().map(Vec::as_slice).collect();
        let n = m.len();
        let old = encode_group_with(&ts, &refs, false).unwrap();
        assert!(column_kinds(&old, n).iter().all(|own| !own));
        let new = encode_group(&ts, &refs).unwrap();
        assert!(column_kinds(&new, n).iter().any(|&own| own));
        for wanted in [0u128, 1, 1 << 2, 1 << 4 | 1 << 3, 0b111_1111] {
            let mut g = GroupDecoder::open(&old[n - 1..], wanted, true).unwrap();
            for j in [4, 2, 0, 5, 1, 3, 6] {
                let (mut t, mut v) = (Vec::new(), Vec::new());
                g.member_into(&old[n - 1 - j..], &mut t, &mut v).unwrap();
                assert_eq!((&t, &v), (&ts, &m[j]), "member {j}, wanted {wanted:#b}");
            }
        }
        for (j, mj) in m.iter().enumerate() {
            let want: Vec<_> = ts.iter().zip(mj).map(|(&t, v)| (t, v.to_bits())).collect();
            assert_eq!(member(&old, n, j), want);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random layouts (members, rows, increments that may be negative, resets) round-trip
        /// bit-exactly; members with a value the group cannot code exactly are refused, never
        /// changed.
        #[test]
        fn groups_round_trip(
            members in 2usize..24,
            rows in 1usize..260,
            steps in proptest::collection::vec(0u64..7, 1..400),
            gaps in proptest::collection::vec(1i64..40_000, 1..300),
            reset_at in 0usize..300,
            special in proptest::option::of((0usize..24, 0usize..260, 0usize..5)),
        ) {
            let mut t = 1_700_000_000_000i64;
            let ts: Vec<i64> = (0..rows).map(|i| { t += gaps[i % gaps.len()]; t }).collect();
            let mut cols = vec![0f64; members];
            let mut out = vec![Vec::with_capacity(rows); members];
            let mut k = 0;
            for r in 0..rows {
                if r == reset_at {
                    cols.iter_mut().for_each(|c| *c = 0.0);
                }
                let mut cum = 0.0;
                for (j, c) in cols.iter_mut().enumerate() {
                    *c += steps[k % steps.len()] as f64;
                    k += 1;
                    cum += *c;
                    out[j].push(cum);
                }
            }
            let mut exact = true;
            if let Some((j, r, what)) = special {
                let (j, r) = (j % members, r % rows);
                out[j][r] = [f64::NAN, f64::from_bits(0x7ff0_0000_0000_0002), 0.5, -0.0, -3.0][what];
                exact = what == 4;
            }
            let refs: Vec<&[f64]> = out.iter().map(Vec::as_slice).collect();
            match encode_group(&ts, &refs) {
                Some(bytes) => {
                    prop_assert!(exact);
                    for (j, m) in out.iter().enumerate() {
                        let want: Vec<_> = ts.iter().zip(m).map(|(&t, v)| (t, v.to_bits())).collect();
                        prop_assert_eq!(member(&bytes, members, j), want);
                    }
                }
                None => prop_assert!(!exact),
            }
        }

        /// Groups on a regular grid (timestamps from the base's header) read through one
        /// decoder by a reader that wants some members and asks in any order, some twice:
        /// every answer is the member's exact values, whichever columns hold own values.
        #[test]
        fn wanted_members_in_any_order(
            members in 2usize..20,
            rows in 1usize..200,
            rates in proptest::collection::vec(0u64..9, 2..20),
            wanted in any::<u32>(),
            order in proptest::collection::vec(0usize..20, 1..30),
        ) {
            let ts: Vec<i64> = (0..rows as i64).map(|i| 1_700_000_000_000 + 15_000 * i).collect();
            // as the block writer orders them: the count, `+Inf` (equal), then the finite
            // buckets from the lowest, whose own values are often cheaper than offsets
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ rows as u64;
            let mut cum = vec![0f64; members];
            let mut out = vec![Vec::with_capacity(rows); members];
            for _ in 0..rows {
                let mut bucket = vec![0f64; members];
                let mut below = 0.0;
                for (j, c) in cum.iter_mut().enumerate() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let r = rates[j % rates.len()];
                    *c += if r == 0 { 0.0 } else { (x % (r * r + 1)) as f64 };
                    below += *c;
                    bucket[j] = below;
                }
                let total = bucket[members - 1];
                out[0].push(total);
                for j in 1..members {
                    out[j].push(if j == 1 { total } else { bucket[j - 2] });
                }
            }
            let refs: Vec<&[f64]> = out.iter().map(Vec::as_slice).collect();
            let bytes = encode_group(&ts, &refs).expect("whole numbers group");
            let wanted = u128::from(wanted) & (u128::MAX >> (128 - members));
            let mut g = GroupDecoder::open(&bytes[members - 1..], wanted, true).unwrap();
            for &j in &order {
                let j = j % members;
                let b = &bytes[members - 1 - j..];
                let (mut t, mut v) = (Vec::new(), Vec::new());
                g.member_into(b, &mut t, &mut v).unwrap();
                prop_assert_eq!(&t, &ts);
                let got: Vec<u64> = v.iter().map(|v| v.to_bits()).collect();
                let want: Vec<u64> = out[j].iter().map(|v| v.to_bits()).collect();
                prop_assert_eq!(got, want, "member {}", j);
            }
        }
    }
}
