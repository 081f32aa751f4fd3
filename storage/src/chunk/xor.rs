//! XOR float value coding as described in Facebook's Gorilla paper (Pelkonen et al., VLDB 2015).
//!
//! Each value is XOR'd with the previous one's bits:
//! - `0`: identical bits;
//! - `10`: the meaningful bits fit the previous window: write them (window width bits);
//! - `11`: new window: leading zeros (5 bits, capped at 31), width - 1 (6 bits), then the bits.

use super::bitstream::{BitReader, BitSink};

/// Encoder/decoder state: the previous value's bits and the current window.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct XorState {
    prev: u64,
    lead: u8,
    trail: u8,
    has_window: bool,
}

impl XorState {
    /// A state after the first value `bits` (written separately).
    pub(crate) fn new(first: u64) -> Self {
        XorState {
            prev: first,
            lead: 0,
            trail: 0,
            has_window: false,
        }
    }

    /// The bits of the last value encoded or decoded (the first value before any).
    pub(crate) fn prev(&self) -> u64 {
        self.prev
    }

    /// Sets the last value's bits (for codings other than XOR, which keep it here).
    #[inline]
    pub(crate) fn set_prev(&mut self, bits: u64) {
        self.prev = bits;
    }

    /// Encodes `bits`, returning the bits written.
    #[inline]
    pub(crate) fn encode<S: BitSink>(&mut self, bits: u64, out: &mut S) -> u32 {
        let x = bits ^ self.prev;
        self.prev = bits;
        if x == 0 {
            out.write(0, 1);
            return 1;
        }
        let lead = x.leading_zeros().min(31);
        let trail = x.trailing_zeros();
        let (plead, ptrail) = (u32::from(self.lead), u32::from(self.trail));
        if self.has_window && lead >= plead && trail >= ptrail {
            let width = 64 - plead - ptrail;
            out.write(0b10, 2);
            out.write(x >> ptrail, width);
            2 + width
        } else {
            let width = 64 - lead - trail;
            out.write(0b11, 2);
            out.write(u64::from(lead), 5);
            out.write(u64::from(width - 1), 6);
            out.write(x >> trail, width);
            self.lead = lead as u8;
            self.trail = trail as u8;
            self.has_window = true;
            13 + width
        }
    }

    /// Decodes the next value's bits. Corrupt input yields some value and possibly an overrun.
    #[inline(always)]
    pub(crate) fn decode(&mut self, r: &mut BitReader<'_>) -> u64 {
        let p = r.peek();
        if p >> 63 == 0 {
            r.skip(1);
            return self.prev;
        }
        if (p >> 62) & 1 == 0 {
            r.skip(2);
            // a window must exist; in corrupt input it may not, then lead = trail = 0
            let trail = u32::from(self.trail);
            let width = 64u32.saturating_sub(u32::from(self.lead) + trail);
            let v = r.read_long(width);
            self.prev ^= if trail >= 64 { 0 } else { v << trail };
            return self.prev;
        }
        // new window: 2 + 5 + 6 header bits are all within the peeked word
        let lead = ((p >> 57) & 0x1f) as u32;
        let width = ((p >> 51) & 0x3f) as u32 + 1;
        r.skip(13);
        let trail = 64u32.saturating_sub(lead + width);
        let width = 64 - lead - trail; // corrupt lead + width > 64: shrink width
        let v = r.read_long(width);
        self.lead = lead as u8;
        self.trail = trail as u8;
        self.has_window = true;
        self.prev ^= if trail >= 64 { 0 } else { v << trail };
        self.prev
    }
}

#[cfg(test)]
mod tests {
    use super::super::bitstream::BitWriter;
    use super::*;

    #[test]
    fn xor_round_trip() {
        let vals: Vec<u64> = [
            1.0f64,
            1.0,
            1.5,
            -0.0,
            0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            412.736,
            412.737,
            1e300,
            f64::MIN_POSITIVE,
        ]
        .iter()
        .map(|v| v.to_bits())
        .chain([0x7ff0_0000_0000_0002, 1, u64::MAX, 0x8000_0000_0000_0001])
        .collect();
        let mut w = BitWriter::new();
        let mut e = XorState::new(vals[0]);
        let mut total = 0u64;
        for &v in &vals[1..] {
            total += u64::from(e.encode(v, &mut w));
        }
        assert_eq!(total, w.bit_len());
        let mut r = BitReader::new(w.bytes(), w.bit_len());
        let mut d = XorState::new(vals[0]);
        for &v in &vals[1..] {
            assert_eq!(d.decode(&mut r), v);
        }
        assert!(!r.overrun());
        assert_eq!(r.remaining(), 0);
    }
}
