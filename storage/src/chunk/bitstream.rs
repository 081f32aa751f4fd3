//! Bit-level writer and reader (most significant bit first), and the
//! adaptive Rice coder shared by the timestamp and integer value streams.
//!
//! The reader never panics: reads past the end return zero bits and advance the position, and
//! callers compare [`BitReader::overrun`] once per sample.

/// Something bits can be written to: a real [`BitWriter`] or a [`BitCounter`] that only counts.
pub(crate) trait BitSink {
    /// Writes the low `n` bits of `value` (`n <= 64`), most significant first.
    fn write(&mut self, value: u64, n: u32);
}

/// Counts bits instead of storing them (used to price alternative encodings).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BitCounter(pub u64);

impl BitSink for BitCounter {
    #[inline]
    fn write(&mut self, _value: u64, n: u32) {
        self.0 += u64::from(n);
    }
}

/// An append-only bit buffer backed by a `Vec<u8>`; the last byte is zero-padded.
///
/// The vector always holds at least 8 zero bytes after the last written byte, so a write is
/// one 64-bit read-modify-write at the current byte.
#[derive(Debug, Default, Clone)]
pub(crate) struct BitWriter {
    buf: Vec<u8>,
    bits: u64,
}

/// Zero bytes kept after the written ones.
const SLACK: usize = 8;

impl BitWriter {
    /// An empty writer.
    pub(crate) fn new() -> Self {
        BitWriter {
            buf: Vec::new(),
            bits: 0,
        }
    }

    /// Forgets the bits written, keeping the buffer (zeroed).
    pub(crate) fn clear(&mut self) {
        let n = (self.bits.div_ceil(8) as usize).min(self.buf.len());
        self.buf[..n].fill(0);
        self.bits = 0;
    }

    /// Number of bits written.
    pub(crate) fn bit_len(&self) -> u64 {
        self.bits
    }

    /// The bytes written so far (the last one zero-padded).
    pub(crate) fn bytes(&self) -> &[u8] {
        let n = self.bits.div_ceil(8) as usize;
        self.buf.get(..n).unwrap_or(&[])
    }

    /// The bytes written so far followed by zero bytes (for readers).
    pub(crate) fn padded(&self) -> &[u8] {
        &self.buf
    }

    /// Heap capacity held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// The address of the byte the next bits go to (for prefetching; never dereferenced).
    pub(crate) fn tail_addr(&self) -> *const u8 {
        self.buf.as_ptr().wrapping_add((self.bits >> 3) as usize)
    }

    #[cold]
    fn grow(&mut self) {
        // grow gently: chunks are small and many are open at once
        let extra = (self.buf.capacity() / 4).clamp(16, 128);
        self.buf.reserve_exact(extra);
        let cap = self.buf.capacity();
        self.buf.resize(cap, 0);
    }

    /// Writes the low `n <= 57` bits of `value`, which has no bits above them.
    #[inline(always)]
    fn put(&mut self, value: u64, n: u32) {
        let i = (self.bits >> 3) as usize;
        if i + SLACK > self.buf.len() {
            self.grow();
        }
        let used = (self.bits & 7) as u32;
        if let Some(s) = self.buf.get_mut(i..i + 8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            let w = u64::from_be_bytes(a) | (value << (64 - used - n));
            s.copy_from_slice(&w.to_be_bytes());
        }
        self.bits += u64::from(n);
    }
}

impl BitSink for BitWriter {
    #[inline(always)]
    fn write(&mut self, value: u64, n: u32) {
        if n == 0 {
            return;
        }
        if n <= 57 {
            self.put(value & ((1u64 << n) - 1), n);
        } else {
            let n = n.min(64);
            let lo = value & ((1u64 << 32) - 1);
            let hi = (value >> 32) & ((1u64 << (n - 32)) - 1);
            self.put(hi, n - 32);
            self.put(lo, 32);
        }
    }
}

/// Reads bits from a byte slice, most significant bit first.
#[derive(Debug, Clone)]
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    pos: u64,
    end: u64,
    /// Offset in `data` of `tail[0]`: the last (up to) 8 bytes of `data` are copied to `tail`,
    /// followed by zeros, so that [`peek`](BitReader::peek) near the end is one load too.
    tail_at: usize,
    tail: [u8; 16],
}

impl<'a> BitReader<'a> {
    /// A reader over the first `end_bits` bits of `data` (clamped to the slice).
    pub(crate) fn new(data: &'a [u8], end_bits: u64) -> Self {
        let max = (data.len() as u64).saturating_mul(8);
        let tail_at = data.len().saturating_sub(8);
        let mut tail = [0u8; 16];
        let last = data.get(tail_at..).unwrap_or(&[]);
        if let Some(t) = tail.get_mut(..last.len()) {
            t.copy_from_slice(last);
        }
        BitReader {
            data,
            pos: 0,
            end: end_bits.min(max),
            tail_at,
            tail,
        }
    }

    /// Whether reads went past the end of the stream.
    #[inline]
    pub(crate) fn overrun(&self) -> bool {
        self.pos > self.end
    }

    /// Bits not yet read (0 after an overrun).
    pub(crate) fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.pos)
    }

    /// Current bit position.
    #[inline]
    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }

    /// Moves to bit position `pos` (one this reader reached, or up to a few hundred bits
    /// beyond: see [`skip`](BitReader::skip)).
    #[inline]
    pub(crate) fn set_pos(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// The end of the stream in bits (reads beyond it are an overrun).
    #[inline]
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// The next 64 bits, left-aligned; at least 57 of them are real stream bits (bits past the
    /// data are zero). Never panics.
    // always inlined in optimised builds (else the decoding loops call it out of line); not
    // in debug builds, where inlining it everywhere grows the bulk loop's frame
    #[cfg_attr(not(debug_assertions), inline(always))]
    #[cfg_attr(debug_assertions, inline)]
    pub(crate) fn peek(&self) -> u64 {
        let byte = (self.pos >> 3) as usize;
        let shift = (self.pos & 7) as u32;
        // a branch, not a select: the load stays off the bit position's dependency chain
        let word = match self.data.get(byte..byte.wrapping_add(8)) {
            Some(s) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(s);
                u64::from_be_bytes(a)
            }
            None => self.tail_word(byte),
        };
        word << shift
    }

    /// The 8 bytes from `byte` when they are not all within `data`: the last bytes are in
    /// `tail`, followed by zeros.
    #[cold]
    #[inline(never)]
    fn tail_word(&self, byte: usize) -> u64 {
        let off = byte.wrapping_sub(self.tail_at).min(8);
        let mut a = [0u8; 8];
        if let Some(s) = self.tail.get(off..off + 8) {
            a.copy_from_slice(s);
        }
        u64::from_be_bytes(a)
    }

    /// Skips `n` bits.
    #[inline]
    pub(crate) fn skip(&mut self, n: u32) {
        // cannot wrap: a chunk has at most 65,535 samples and a sample takes at most a few
        // hundred bits of reads, also past the end (callers stop at the first overrun)
        self.pos = self.pos.wrapping_add(u64::from(n));
    }

    /// Reads `n <= 56` bits.
    #[inline]
    pub(crate) fn read(&mut self, n: u32) -> u64 {
        if n == 0 {
            return 0;
        }
        let n = n.min(56);
        let v = self.peek() >> (64 - n);
        self.skip(n);
        v
    }

    /// Reads `n <= 64` bits.
    #[inline]
    pub(crate) fn read_long(&mut self, n: u32) -> u64 {
        if n <= 56 {
            self.read(n)
        } else {
            let n = n.min(64);
            let hi = self.read(n - 32);
            let lo = self.read(32);
            (hi << 32) | lo
        }
    }
}

/// Unary prefixes at least this long are escapes followed by an explicit bit length.
pub(crate) const RICE_ESCAPE: u32 = 16;

/// The "exception" symbol: an escape with bit length 1 (which a real escape never has, as
/// escaped residuals are at least 16). The integer coding follows it with a raw `f64` for a
/// value it cannot represent (a staleness marker, NaN, ...). It leaves the coder state alone.
pub(crate) const EXCEPTION: u64 = u64::MAX;
/// Cap on a residual's contribution to the running mean (keeps the state within `u32`; larger
/// residuals are escaped).
const RICE_CAP: u64 = 1 << 27;
/// Largest parameter [`Rice::decode_word`] decodes: with `q < 16`, `z < 16 << 23 = RICE_CAP`.
const WORD_MAX_K: u32 = 23;

/// Adaptive Rice coder for unsigned residuals. The parameter `k` follows a running mean of the
/// recent residuals (an exponential moving average with weight 1/16), which the decoder
/// recomputes from the decoded values, so no parameter is stored.
///
/// Code for `z` with `q = z >> k`: if `q < 16`, `q` one-bits, a zero bit, then the low `k` bits
/// of `z`; otherwise sixteen one-bits, `bitlen(z) - 1` in 6 bits, then `z` without its top bit.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Rice {
    m: u32,
}

impl Rice {
    /// A coder that starts as if the recent residuals averaged `mean`.
    pub(crate) const fn with_mean(mean: u32) -> Self {
        Rice { m: mean << 4 }
    }

    #[inline]
    fn k(&self) -> u32 {
        32 - (self.m >> 4).leading_zeros()
    }

    #[inline]
    fn update(&mut self, z: u64) {
        self.m = self.m - (self.m >> 4) + z.min(RICE_CAP) as u32;
    }

    /// Encodes `z`, returning the number of bits written.
    #[inline]
    pub(crate) fn encode<S: BitSink>(&mut self, z: u64, out: &mut S) -> u32 {
        if z == EXCEPTION {
            // the exception symbol leaves the parameter's state alone
            return put_code(z, 0, out);
        }
        let bits = put_code(z, self.k(), out);
        self.update(z);
        bits
    }

    /// Decodes one residual from `word`, whose top `avail <= 57` bits are the next stream
    /// bits (as from [`BitReader::peek`]): `Some((z, bits used))` when the whole code lies
    /// within them and is not an escape, else `None` (nothing changed; use
    /// [`decode`](Rice::decode)). Gives what `decode` gives for the same bits.
    #[inline(always)]
    pub(crate) fn decode_word(&mut self, word: u64, avail: u32) -> Option<(u64, u32)> {
        let k = self.k();
        let q = (!word).leading_zeros();
        let total = q + 1 + k;
        // q < RICE_ESCAPE is implied by total <= avail <= 57 only for large k: check both
        // k <= WORD_MAX_K keeps z under RICE_CAP, so the state update needs no `min` (two
        // cycles less on the serial chain from one parameter to the next)
        if q >= RICE_ESCAPE || total > avail || k > WORD_MAX_K {
            return None;
        }
        // the bit after the q ones is a zero, so the top k + 1 bits of `word << q` are the
        // low k bits of z: one shift, and no k == 0 special case (q < 16, k <= 23)
        let low = (word << q) >> (63 - k);
        let z = (u64::from(q) << k) | low;
        debug_assert!(z < RICE_CAP);
        self.m = self.m - (self.m >> 4) + z as u32;
        Some((z, total))
    }

    /// Decodes one residual. Corrupt input yields some value and possibly an overrun.
    #[inline(always)]
    pub(crate) fn decode(&mut self, r: &mut BitReader<'_>) -> u64 {
        let k = self.k();
        let p = r.peek();
        let q = (!p).leading_zeros();
        let z = if q < RICE_ESCAPE {
            if q + 1 + k <= 64 {
                // fast path: prefix and payload within the peeked word
                let total = q + 1 + k;
                // as in `decode_word`: the zero after the prefix tops the low bits
                let low = (p << q) >> (63 - k);
                // peek guarantees 57 real bits; longer codes fall back to a second read
                if total <= 57 {
                    r.skip(total);
                    (u64::from(q) << k) | low
                } else {
                    r.skip(q + 1);
                    (u64::from(q) << k) | r.read_long(k)
                }
            } else {
                r.skip(q + 1);
                (u64::from(q) << k) | r.read_long(k)
            }
        } else {
            r.skip(RICE_ESCAPE);
            let bl = r.read(6) as u32 + 1;
            if bl == 1 {
                return EXCEPTION;
            }
            let rest = r.read_long(bl - 1);
            (1u64 << (bl - 1)) | rest
        };
        self.update(z);
        z
    }

    /// The cost in bits of encoding `z` next, updating the state as `encode` would.
    #[inline]
    pub(crate) fn cost(&mut self, z: u64) -> u32 {
        let mut c = BitCounter(0);
        self.encode(z, &mut c)
    }
}

/// Writes the Rice code of `z` with parameter `k` (the code [`Rice`] writes for its current
/// parameter; [`EXCEPTION`] as the exception symbol), returning the bits written.
#[inline(always)]
fn put_code<S: BitSink>(z: u64, k: u32, out: &mut S) -> u32 {
    if z == EXCEPTION {
        out.write((1u64 << RICE_ESCAPE) - 1, RICE_ESCAPE);
        out.write(0, 6);
        return RICE_ESCAPE + 6;
    }
    let q = z >> k;
    if q < u64::from(RICE_ESCAPE) {
        let q = q as u32;
        // q ones followed by a zero, then the low k bits
        if q + 1 + k <= 57 {
            let low = z & ((1u64 << k) - 1);
            out.write((((1u64 << (q + 1)) - 2) << k) | low, q + 1 + k);
        } else {
            out.write((1u64 << (q + 1)) - 2, q + 1);
            out.write(z, k);
        }
        q + 1 + k
    } else {
        let bl = 64 - z.leading_zeros(); // >= 5 since z >= 16
        out.write((1u64 << RICE_ESCAPE) - 1, RICE_ESCAPE);
        out.write(u64::from(bl - 1), 6);
        out.write(z, bl - 1);
        RICE_ESCAPE + 6 + bl - 1
    }
}

/// The length in bits of [`put_code`]'s code for `z` with parameter `k`.
#[inline(always)]
fn code_bits(z: u64, k: u32) -> u32 {
    // branch-free (selects): the pricing loop runs it for several parameters per residual
    let q = z >> k;
    let short = (q as u32).wrapping_add(1 + k);
    let escaped = RICE_ESCAPE + 6 + 63 - z.leading_zeros();
    let long = if z == EXCEPTION {
        RICE_ESCAPE + 6
    } else {
        escaped
    };
    if q < u64::from(RICE_ESCAPE) {
        short
    } else {
        long
    }
}

/// Reads a code written by [`put_code`] with parameter `k <= 63`. Corrupt input yields some
/// value and possibly an overrun.
#[inline(always)]
fn get_code(r: &mut BitReader<'_>, k: u32) -> u64 {
    let p = r.peek();
    let q = (!p).leading_zeros();
    if q < RICE_ESCAPE {
        let total = q + 1 + k;
        if total <= 57 {
            // the zero after the prefix tops the low bits (see `Rice::decode_word`)
            let low = (p << q) >> (63 - k);
            r.skip(total);
            (u64::from(q) << k) | low
        } else {
            r.skip(q + 1);
            (u64::from(q) << k) | r.read_long(k)
        }
    } else {
        r.skip(RICE_ESCAPE);
        let bl = r.read(6) as u32 + 1;
        if bl == 1 {
            return EXCEPTION;
        }
        let rest = r.read_long(bl - 1);
        (1u64 << (bl - 1)) | rest
    }
}

/// Bits of the parameter that starts a [`FixedRice`] stream.
pub(crate) const FIXED_K_BITS: u32 = 6;
/// Largest parameter [`FixedRice::choose`] picks (decoders accept up to 63).
const FIXED_MAX_K: u32 = 58;

/// Rice coder with one parameter `k` for a whole residual stream, written in
/// [`FIXED_K_BITS`] bits before the first code; codes are those of [`Rice`] (escapes and the
/// exception symbol included). The encoder picks the `k` that makes the stream shortest, so
/// it is usually smaller than the adaptive coder, and decoding has no serial dependency from
/// one residual's value to the next code's parameter.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FixedRice {
    k: u32,
    /// The parameter was written (encoder) or read (decoder).
    started: bool,
    /// The encoder was given its parameter ([`with_param`](FixedRice::with_param)).
    given: bool,
}

impl FixedRice {
    /// The parameter that codes `zs` in the fewest bits, and that number of bits (the
    /// parameter's own bits included; exceptions without their raw 64 bits).
    #[inline(never)]
    pub(crate) fn choose(zs: &[u64]) -> (u32, u64) {
        // the best parameter is about the bit length of the median residual (or one or two
        // less); the median, unlike the mean, ignores a few huge outliers (escapes)
        let mut hist = [0u32; 65];
        let mut n = 0u32;
        for &z in zs {
            if z != EXCEPTION {
                hist[(64 - z.leading_zeros()) as usize] += 1;
                n += 1;
            }
        }
        let (mut b, mut seen) = (0u32, 0u32);
        for (len, &c) in hist.iter().enumerate() {
            seen += c;
            if 2 * seen >= n {
                b = len as u32;
                break;
            }
        }
        // the candidates priced in one pass
        let lo = b.saturating_sub(2).min(FIXED_MAX_K - 2);
        let mut sums = [0u64; 3];
        for &z in zs {
            for (i, s) in sums.iter_mut().enumerate() {
                *s += u64::from(code_bits(z, lo + i as u32));
            }
        }
        let mut best = (lo, sums[0]);
        for (i, &s) in sums.iter().enumerate().skip(1) {
            if s < best.1 {
                best = (lo + i as u32, s);
            }
        }
        (best.0, best.1 + u64::from(FIXED_K_BITS))
    }

    /// An encoder with parameter `k <= 63` (as [`choose`](FixedRice::choose) gave it).
    pub(crate) fn with_param(k: u32) -> Self {
        FixedRice {
            k: k.min(63),
            started: false,
            given: true,
        }
    }

    /// Encodes `z`, a residual of the stream `all` (unless given, the parameter is chosen
    /// from `all`; it is written before the first code). Returns the bits written.
    // out of line, as `Rice::encode` is: inlined, it kept the writer's residual dispatch
    // (`ResCoder::encode`) from being inlined, which cost the adaptive path ~3 %
    #[inline(never)]
    pub(crate) fn encode_at<S: BitSink>(&mut self, z: u64, all: &[u64], out: &mut S) -> u32 {
        let mut head = 0;
        if !self.started {
            self.started = true;
            if !self.given {
                self.k = Self::choose(all).0;
            }
            out.write(u64::from(self.k), FIXED_K_BITS);
            head = FIXED_K_BITS;
        }
        head + put_code(z, self.k, out)
    }

    /// The parameter, once read (decoder) or written (encoder).
    #[inline(always)]
    pub(crate) fn param(&self) -> Option<u32> {
        self.started.then_some(self.k)
    }

    /// Decodes one residual (reading the parameter first at the start of the stream).
    #[inline(always)]
    pub(crate) fn decode(&mut self, r: &mut BitReader<'_>) -> u64 {
        if !self.started {
            self.started = true;
            self.k = r.read(FIXED_K_BITS) as u32;
        }
        get_code(r, self.k)
    }

    /// [`Rice::decode_word`] for this coder: `None` at the start of the stream, for escapes
    /// and for codes not within the top `avail <= 57` bits of `word`.
    #[inline(always)]
    pub(crate) fn decode_word(&mut self, word: u64, avail: u32) -> Option<(u64, u32)> {
        let k = self.k;
        let q = (!word).leading_zeros();
        let total = q + 1 + k;
        if q >= RICE_ESCAPE || total > avail || !self.started {
            return None;
        }
        let low = (word << q) >> (63 - k);
        Some(((u64::from(q) << k) | low, total))
    }
}

/// Run-length coder for residual streams that are mostly zero (scrape jitter, rarely changing
/// values). At the first residual of a run of `r >= 0` zeros, `r` is written ([`Rice`] coded);
/// each non-zero residual `z` is written as `z - 1` (another [`Rice`] state) after its run.
/// Trailing zeros are one final run. Writing needs to know each run's length when it starts
/// ([`encode_at`](Sparse::encode_at)); [`StreamCost`] gives the same bit count without
/// look-ahead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sparse {
    run: Rice,
    val: Rice,
    /// Zeros still to return (decoder) or to skip (writer).
    zeros: u32,
    /// A run was coded and its non-zero residual is next.
    expect_value: bool,
}

/// Initial mean run length of the run-length coder (sets its first Rice parameter).
const SPARSE_RUN_MEAN: u32 = 32;
/// Initial mean non-zero residual of the run-length coder.
const SPARSE_VAL_MEAN: u32 = 8;

impl Default for Sparse {
    fn default() -> Self {
        Sparse {
            run: Rice::with_mean(SPARSE_RUN_MEAN),
            val: Rice::with_mean(SPARSE_VAL_MEAN),
            zeros: 0,
            expect_value: false,
        }
    }
}

impl Sparse {
    /// Writes residual `z`; `run_len` counts the zeros starting at this residual (called only
    /// when a run starts). Returns the bits written.
    #[inline]
    pub(crate) fn encode_at<S: BitSink>(
        &mut self,
        z: u64,
        run_len: impl FnOnce() -> u64,
        out: &mut S,
    ) -> u32 {
        if self.zeros > 0 {
            self.zeros -= 1;
            return 0;
        }
        if self.expect_value {
            self.expect_value = false;
            return self.val.encode(minus_one(z), out);
        }
        let r = if z == 0 { run_len().max(1) } else { 0 };
        let b = self.run.encode(r, out);
        if r == 0 {
            return b + self.val.encode(minus_one(z), out);
        }
        self.zeros = u32::try_from(r - 1).unwrap_or(u32::MAX);
        self.expect_value = true;
        b
    }

    /// Zero residuals the decoder returns next without reading bits (the rest of a run).
    #[inline(always)]
    pub(crate) fn pending_zeros(&self) -> u32 {
        self.zeros
    }

    /// Consumes `n <= pending_zeros()` zero residuals at once (bulk decoding of a run).
    #[inline(always)]
    pub(crate) fn take_zeros(&mut self, n: u32) {
        self.zeros -= n.min(self.zeros);
    }

    /// Decodes one residual.
    #[inline(always)]
    pub(crate) fn decode(&mut self, r: &mut BitReader<'_>) -> u64 {
        if self.zeros > 0 {
            self.zeros -= 1;
            return 0;
        }
        if self.expect_value {
            self.expect_value = false;
            return plus_one(self.val.decode(r));
        }
        let run = self.run.decode(r);
        if run == 0 {
            return plus_one(self.val.decode(r));
        }
        self.zeros = u32::try_from(run - 1).unwrap_or(u32::MAX);
        self.expect_value = true;
        0
    }
}

/// Non-zero residual `z` as coded in a run-length stream (exceptions stay exceptions).
#[inline]
fn minus_one(z: u64) -> u64 {
    if z == EXCEPTION {
        EXCEPTION
    } else {
        z.wrapping_sub(1)
    }
}

/// Inverse of [`minus_one`].
#[inline]
fn plus_one(z: u64) -> u64 {
    if z == EXCEPTION {
        EXCEPTION
    } else {
        z.wrapping_add(1)
    }
}

/// Prices a residual stream in both codings at once.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StreamCost {
    rice: Rice,
    run: Rice,
    val: Rice,
    zeros: u32,
    rice_bits: u32,
    sparse_bits: u32,
}

impl StreamCost {
    /// A fresh tracker.
    pub(crate) fn new() -> Self {
        StreamCost {
            run: Rice::with_mean(SPARSE_RUN_MEAN),
            val: Rice::with_mean(SPARSE_VAL_MEAN),
            ..Default::default()
        }
    }

    /// Adds a residual.
    #[inline]
    pub(crate) fn add(&mut self, z: u64) {
        self.rice_bits = self.rice_bits.saturating_add(self.rice.cost(z));
        if z == 0 {
            self.zeros += 1;
        } else {
            let b = self.run.cost(u64::from(self.zeros)) + self.val.cost(minus_one(z));
            self.sparse_bits = self.sparse_bits.saturating_add(b);
            self.zeros = 0;
        }
    }

    /// Adds an exception (a value the integer coding cannot represent: 64 raw bits follow).
    pub(crate) fn add_exception(&mut self) {
        self.add(EXCEPTION);
        self.rice_bits = self.rice_bits.saturating_add(64);
        self.sparse_bits = self.sparse_bits.saturating_add(64);
    }

    /// Whether every residual so far was zero (a non-zero one costs sparse bits; a run of
    /// zeros is only priced at the end).
    pub(crate) fn all_zero(&self) -> bool {
        self.sparse_bits == 0
    }

    /// Bits of the sparse coding, trailing zeros included.
    pub(crate) fn sparse_bits(&self) -> u64 {
        let mut run = self.run;
        let tail = if self.zeros > 0 {
            run.cost(u64::from(self.zeros))
        } else {
            0
        };
        u64::from(self.sparse_bits) + u64::from(tail)
    }

    /// The cheaper coding: `(bits, sparse?)`.
    pub(crate) fn best(&self) -> (u64, bool) {
        let s = self.sparse_bits();
        let r = u64::from(self.rice_bits);
        if s < r {
            (s, true)
        } else {
            (r, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip() {
        let mut w = BitWriter::new();
        let items: Vec<(u64, u32)> = vec![
            (1, 1),
            (0, 1),
            (0x5, 3),
            (u64::MAX, 64),
            (0x1234_5678_9abc, 48),
            (0, 0),
            (3, 2),
            (0xdead_beef_cafe_f00d, 64),
            (0x7f, 7),
        ];
        for &(v, n) in &items {
            w.write(v, n);
        }
        let total: u32 = items.iter().map(|x| x.1).sum();
        assert_eq!(w.bit_len(), u64::from(total));
        let mut r = BitReader::new(w.bytes(), w.bit_len());
        for &(v, n) in &items {
            let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            assert_eq!(r.read_long(n), v & mask, "n={n}");
        }
        assert!(!r.overrun());
        assert_eq!(r.remaining(), 0);
        r.read(1);
        assert!(r.overrun());
    }

    #[test]
    fn peek_near_and_past_the_end() {
        let data: Vec<u8> = (0..21u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for len in 0..data.len() {
            let d = &data[..len];
            // the bits of `d` from `pos`, then zeros
            let naive = |pos: u64| {
                (0..64u64).fold(0u64, |acc, i| {
                    let p = pos + i;
                    let bit = d
                        .get((p / 8) as usize)
                        .map_or(0, |b| u64::from(b >> (7 - p % 8)) & 1);
                    (acc << 1) | bit
                })
            };
            let mut r = BitReader::new(d, u64::MAX);
            for pos in 0..(len as u64 + 10) * 8 {
                // (the low 7 bits may be zeros instead of stream bits)
                assert_eq!(r.peek() >> 7, naive(pos) >> 7, "len {len} pos {pos}");
                r.skip(1);
            }
            r.skip(1 << 20);
            assert_eq!(r.peek(), 0);
        }
    }

    #[test]
    fn rice_round_trip() {
        let values: Vec<u64> = vec![
            0,
            0,
            1,
            5,
            1000,
            1003,
            998,
            u64::MAX,
            0,
            1 << 40,
            3,
            (1 << 50) + 7,
            17,
            0,
            0,
            0,
            u64::MAX - 1,
        ];
        let mut w = BitWriter::new();
        let mut e = Rice::default();
        let mut c = Rice::default();
        let mut total = 0u64;
        for &v in &values {
            let b = e.encode(v, &mut w);
            assert_eq!(b, c.cost(v));
            total += u64::from(b);
        }
        assert_eq!(total, w.bit_len());
        let mut r = BitReader::new(w.bytes(), w.bit_len());
        let mut d = Rice::default();
        for &v in &values {
            assert_eq!(d.decode(&mut r), v);
        }
        assert!(!r.overrun());
        assert_eq!(r.remaining(), 0);
    }

    /// `decode_word` (word-ahead path) gives what `decode` gives, or `None`, for residuals
    /// that drive the parameter from 0 up past `WORD_MAX_K` and back (every k, k == 0, the
    /// cap and escapes included).
    #[test]
    fn rice_word_decoding_matches_decode() {
        let mut values = Vec::new();
        for b in 0..40u32 {
            for j in 0..20u64 {
                let top = 1u64 << b;
                values.push(top | (j.wrapping_mul(0x9E37_79B9_7F4A_7C15) & (top - 1)));
            }
        }
        for b in (0..40u32).rev() {
            for j in 0..20u64 {
                values.push((1u64 << b) + j % 3);
            }
        }
        values.extend([0, 0, 0, 1, 0, RICE_CAP - 1, RICE_CAP, RICE_CAP + 1, 0]);
        let mut w = BitWriter::new();
        let mut e = Rice::default();
        for &v in &values {
            e.encode(v, &mut w);
        }
        let mut r = BitReader::new(w.bytes(), w.bit_len());
        let (mut d, mut dw) = (Rice::default(), Rice::default());
        let (mut words, mut max_k) = (0, 0);
        for &v in &values {
            max_k = max_k.max(d.k());
            let pos = r.pos();
            let word = r.peek();
            let got = dw.decode_word(word, 57);
            assert_eq!(d.decode(&mut r), v);
            match got {
                Some((z, used)) => {
                    words += 1;
                    assert_eq!(z, v);
                    assert_eq!(u64::from(used), r.pos() - pos);
                }
                None => dw = d,
            }
            assert_eq!(dw.m, d.m, "state after {v}");
        }
        assert!(max_k > WORD_MAX_K, "the parameter reached {max_k} only");
        assert!(
            words > values.len() / 2,
            "{words} of {} by word",
            values.len()
        );
    }

    /// One-parameter Rice: every parameter the encoder may pick (escapes, the exception
    /// symbol, the largest residuals), decoded by `decode` and by `decode_word` alike; the
    /// chosen parameter's price is the bits written.
    #[test]
    fn fixed_rice_round_trip_and_word_decoding() {
        let mut streams: Vec<Vec<u64>> = vec![vec![], vec![0], vec![EXCEPTION, 3]];
        for b in 0..64u32 {
            let top = 1u64 << b;
            let mut zs: Vec<u64> = (0..40u64)
                .map(|j| top | (j.wrapping_mul(0x9E37_79B9_7F4A_7C15) & (top - 1)))
                .collect();
            zs.extend([0, 1, u64::MAX - 1, EXCEPTION, top.wrapping_mul(3), 17]);
            streams.push(zs);
        }
        let mut ks = std::collections::BTreeSet::new();
        for zs in &streams {
            let (k, bits) = FixedRice::choose(zs);
            ks.insert(k);
            let mut w = BitWriter::new();
            let mut e = FixedRice::default();
            let mut total = 0u64;
            for &z in zs {
                total += u64::from(e.encode_at(z, zs, &mut w));
            }
            assert_eq!(total, w.bit_len());
            if !zs.is_empty() {
                assert_eq!(bits, total, "price of k = {k}");
            }
            let mut r = BitReader::new(w.bytes(), w.bit_len());
            let mut d = FixedRice::default();
            for (i, &z) in zs.iter().enumerate() {
                if i > 0 {
                    let (pos, word) = (r.pos(), r.peek());
                    let mut dw = d;
                    if let Some((got, used)) = dw.decode_word(word, 57) {
                        assert_eq!(got, z, "word decoding, k = {k}");
                        assert_eq!(u64::from(used), bits_of(z, k));
                        r.set_pos(pos);
                    }
                }
                assert_eq!(d.decode(&mut r), z, "k = {k}");
                assert_eq!(d.param(), Some(k));
            }
            assert!(!r.overrun());
            assert_eq!(r.remaining(), 0);
        }
        assert!(ks.len() > 40, "parameters used: {ks:?}");
    }

    fn bits_of(z: u64, k: u32) -> u64 {
        u64::from(code_bits(z, k))
    }

    #[test]
    fn sparse_round_trip_and_cost() {
        let cases: Vec<Vec<u64>> = vec![
            vec![],
            vec![0, 0, 0],
            vec![5],
            vec![0, 0, 7, 0, 0, 0, 1, 0],
            vec![
                3,
                4,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                9,
                u64::MAX,
            ],
            (0..200).map(|i| if i % 17 == 0 { i } else { 0 }).collect(),
        ];
        for vals in cases {
            let mut w = BitWriter::new();
            let mut e = Sparse::default();
            let mut cost = StreamCost::new();
            let mut bits = 0u64;
            for (i, &v) in vals.iter().enumerate() {
                let run = || vals[i..].iter().take_while(|&&x| x == 0).count() as u64;
                bits += u64::from(e.encode_at(v, run, &mut w));
                cost.add(v);
            }
            assert_eq!(bits, cost.sparse_bits());
            assert_eq!(bits, w.bit_len());
            assert_eq!(cost.all_zero(), vals.iter().all(|&v| v == 0));
            let mut r = BitReader::new(w.bytes(), w.bit_len());
            let mut d = Sparse::default();
            for &v in &vals {
                assert_eq!(d.decode(&mut r), v);
            }
            assert!(!r.overrun());
            assert_eq!(r.remaining(), 0);
        }
    }
}
