//! Bulk decoding: a chunk's timestamps and values into two `Vec`s, one loop per coding,
//! compiled for the baseline CPU and for lzcnt/BMI2.

use super::*;

/// Decodes one sample after timestamp `t` (the per-sample path of the bulk loop).
#[inline(always)]
pub(super) fn bulk_one<T: TimeDec, V: ValueDec>(
    td: &mut T,
    vd: &mut V,
    r: &mut BitReader<'_>,
    t: i64,
) -> Result<(i64, f64), &'static str> {
    let nt = td.step(r, t);
    if nt <= t {
        return Err("timestamps not increasing");
    }
    let nv = vd.step(r);
    if r.overrun() {
        return Err("bit stream ends early");
    }
    Ok((nt, nv))
}

impl SampleIter<'_> {
    /// Decodes every remaining sample, appending timestamps to `ts` and values to `vs`
    /// (the same samples `next` would return, in one tight loop per coding: the fast way
    /// to read whole chunks). Returns the number of samples appended; corrupt data ends
    /// the decoding early as it ends iteration (see [`err`](SampleIter::err)).
    pub fn decode_into(&mut self, ts: &mut Vec<i64>, vs: &mut Vec<f64>) -> usize {
        self.decode_into_with(ts, vs, true)
    }

    /// [`decode_into`](SampleIter::decode_into); `cpu_features: false` forces the loop
    /// compiled for the baseline CPU (tests compare both).
    pub(super) fn decode_into_with(
        &mut self,
        ts: &mut Vec<i64>,
        vs: &mut Vec<f64>,
        cpu_features: bool,
    ) -> usize {
        let left = usize::from(self.count.saturating_sub(self.idx));
        if let Some(d) = self.decoded.as_deref() {
            let i = usize::from(self.idx);
            let end = i + left;
            ts.extend_from_slice(&d.ts[i..end]);
            vs.extend_from_slice(&d.vs[i..end]);
            if left > 0 {
                (self.t, self.v) = (d.ts[end - 1], d.vs[end - 1]);
            }
            self.idx = self.count;
            return left;
        }
        if left == 0 {
            self.check_end();
            return 0;
        }
        let start = ts.len();
        ts.resize(start + left, 0);
        vs.resize(start + left, 0.0);
        let mut done = 0;
        if self.idx == 0 {
            (ts[start], vs[start]) = self.first_sample();
            done = 1;
        }
        if done < left {
            let (ot, ov) = (&mut ts[start + done..], &mut vs[start + done..]);
            done += if cpu_features {
                self.bulk_dispatch(ot, ov)
            } else {
                self.bulk_time(ot, ov)
            };
        }
        ts.truncate(start + done);
        vs.truncate(start + done);
        if self.err.is_none() {
            self.check_end();
        }
        done
    }

    /// [`bulk_time`](SampleIter::bulk_time), compiled for CPUs with `lzcnt` and BMI2 when this
    /// one has them (x86-64): the Rice and XOR decoders' bit scans and shifts are on the
    /// critical path, and `lzcnt` takes 1 cycle where the baseline `bsr` takes 3-4.
    pub(super) fn bulk_dispatch(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("lzcnt")
                && std::arch::is_x86_feature_detected!("bmi1")
                && std::arch::is_x86_feature_detected!("bmi2")
            {
                self.fast_cpu = true;
                // SAFETY: the CPU supports every feature `bulk_time_lzcnt` is compiled for
                // (checked just above), which is the only requirement of calling it.
                return unsafe { self.bulk_time_lzcnt(ot, ov) };
            }
        }
        self.bulk_time(ot, ov)
    }

    /// [`bulk_time`](SampleIter::bulk_time) with `lzcnt`, BMI1 and BMI2 instructions.
    ///
    /// # Safety
    /// The CPU must support `lzcnt`, `bmi1` and `bmi2` (an `unsafe fn` rather than a safe
    /// `#[target_feature]` fn, which needs Rust 1.86, above the workspace's `rust-version`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "lzcnt,bmi1,bmi2")]
    pub(super) unsafe fn bulk_time_lzcnt(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        self.bulk_time(ot, ov)
    }

    /// Decodes samples `idx >= 1` into `ot` / `ov` (as many as remain); returns how many.
    // inlined into the loop compiled per CPU level; not in debug builds, whose frames of
    // every coding's locals together would take ~1 MB of stack
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(super) fn bulk_time(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        match (self.time, self.ts_coder) {
            (TimeEncoding::Regular, _) => self.bulk_value(
                TRegular {
                    delta1: self.delta1,
                },
                ot,
                ov,
            ),
            (TimeEncoding::Delta { .. }, ResCoder::Rice(c)) => self.bulk_value(
                TDelta {
                    delta1: self.delta1,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::Delta { .. }, ResCoder::Sparse(c)) => self.bulk_value(
                TDelta {
                    delta1: self.delta1,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::DeltaOfDelta { .. }, ResCoder::Rice(c)) => self.bulk_value(
                TDod {
                    delta: self.delta,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::DeltaOfDelta { .. }, ResCoder::Sparse(c)) => self.bulk_value(
                TDod {
                    delta: self.delta,
                    c,
                },
                ot,
                ov,
            ),
            (TimeEncoding::Grid { .. }, ResCoder::Rice(c)) => {
                let grid = self.grid_point();
                self.bulk_value(
                    TGrid {
                        grid,
                        delta1: self.delta1,
                        c,
                    },
                    ot,
                    ov,
                )
            }
            (TimeEncoding::Grid { .. }, ResCoder::Sparse(c)) => {
                let grid = self.grid_point();
                self.bulk_value(
                    TGrid {
                        grid,
                        delta1: self.delta1,
                        c,
                    },
                    ot,
                    ov,
                )
            }
            // timestamps never use one parameter; decode as iteration does
            (_, ResCoder::Fixed(_)) => self.by_sample(ot, ov),
        }
    }

    /// Decodes samples into `ot` / `ov` with `next` (codings without a bulk loop).
    pub(super) fn by_sample(&mut self, ot: &mut [i64], ov: &mut [f64]) -> usize {
        let mut i = 0;
        for (t, v) in ot.iter_mut().zip(ov.iter_mut()) {
            let Some(s) = self.next() else { break };
            (*t, *v) = s;
            i += 1;
        }
        i
    }

    /// The grid point `t0 + i * delta1` of the first sample whose timestamp is coded as a
    /// grid offset (`i = idx`, at least 2: the second sample's is the first delta).
    pub(super) fn grid_point(&self) -> i64 {
        self.t0
            .wrapping_add(i64::from(self.idx.max(2)).wrapping_mul(self.delta1))
    }

    // inlined into the loop compiled per CPU level; not in debug builds, whose frames of
    // every coding's locals together would take ~1 MB of stack
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(super) fn bulk_value<T: TimeDec>(
        &mut self,
        td: T,
        ot: &mut [i64],
        ov: &mut [f64],
    ) -> usize {
        match self.value {
            ValueEncoding::Const => {
                let v = VConst(self.v);
                self.bulk(td, v, ot, ov).1
            }
            ValueEncoding::Xor => {
                let v = VXor(self.xor);
                let (v, n) = self.bulk(td, v, ot, ov);
                self.xor = v.0;
                n
            }
            ValueEncoding::Ulp {
                delta_of_delta,
                shift,
            } => {
                let ResCoder::Fixed(c) = self.v_coder else {
                    return self.by_sample(ot, ov);
                };
                macro_rules! ulp_loop {
                    ($dod:literal) => {{
                        let v = VUlp::<_, $dod> {
                            c,
                            v: self.v,
                            k: self.d,
                            shift: u32::from(shift),
                        };
                        let (v, n) = self.bulk(td, v, ot, ov);
                        self.d = v.k;
                        self.v_coder = ResCoder::Fixed(v.c);
                        n
                    }};
                }
                if delta_of_delta {
                    ulp_loop!(true)
                } else {
                    ulp_loop!(false)
                }
            }
            ValueEncoding::Int {
                decimals,
                delta_of_delta,
                no_bits,
                ..
            } => {
                let (n, d) = (self.n, self.d);
                macro_rules! int_loop {
                    ($c:expr, $dod:literal, $wrap:expr) => {{
                        let v = VInt::<_, $dod> {
                            c: $c,
                            n,
                            d,
                            decimals,
                            fast_cpu: self.fast_cpu,
                        };
                        let (v, k) = self.bulk(td, v, ot, ov);
                        (self.n, self.d) = (v.n, v.d);
                        if let Some(c) = $wrap(v.c) {
                            self.v_coder = c;
                        }
                        k
                    }};
                }
                match (self.v_coder, no_bits, delta_of_delta) {
                    // all residuals zero: deltas and deltas of deltas alike keep `n`
                    (_, true, _) => int_loop!(NoBits, false, |_| None),
                    (ResCoder::Rice(c), false, true) => {
                        int_loop!(c, true, |c| Some(ResCoder::Rice(c)))
                    }
                    (ResCoder::Rice(c), false, false) => {
                        int_loop!(c, false, |c| Some(ResCoder::Rice(c)))
                    }
                    (ResCoder::Sparse(c), false, true) => {
                        int_loop!(c, true, |c| Some(ResCoder::Sparse(c)))
                    }
                    (ResCoder::Sparse(c), false, false) => {
                        int_loop!(c, false, |c| Some(ResCoder::Sparse(c)))
                    }
                    (ResCoder::Fixed(c), false, true) => {
                        int_loop!(c, true, |c| Some(ResCoder::Fixed(c)))
                    }
                    (ResCoder::Fixed(c), false, false) => {
                        int_loop!(c, false, |c| Some(ResCoder::Fixed(c)))
                    }
                }
            }
        }
    }

    /// The loop over samples `idx >= 1`, into `ot` / `ov` (at most their length). Runs of
    /// timestamps that take no bits (zero residuals of a run-length coded stream, regular
    /// chunks) are filled without reading bits, their values decoded in a loop of their own.
    /// Leaves `t`, `v`, `idx` (and the error) as `next` would; returns the value decoder (its
    /// state) and the number of samples decoded. The timestamp state is not kept: it is only
    /// needed for the second sample, which is decoded here without it.
    // inlined into the loop compiled per CPU level; not in debug builds, whose frames of
    // every coding's locals together would take ~1 MB of stack
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(super) fn bulk<T: TimeDec, V: ValueDec>(
        &mut self,
        mut td: T,
        mut vd: V,
        ot: &mut [i64],
        ov: &mut [f64],
    ) -> (V, usize) {
        let mut r = self.r.clone();
        let mut t = self.t;
        let mut v = self.v;
        let n = ot.len().min(ov.len());
        let mut i = 0usize;
        let mut bad = None;
        if self.idx == 1 && n > 0 {
            // the second sample's delta is the first delta, whatever the coding
            let mut first = TRegular {
                delta1: self.delta1,
            };
            match bulk_one(&mut first, &mut vd, &mut r, t) {
                Ok((nt, nv)) => {
                    (t, v) = (nt, nv);
                    (ot[0], ov[0]) = (t, v);
                    i = 1;
                }
                Err(e) => bad = Some(e),
            }
        }
        while bad.is_none() && i < n {
            let run = td.run();
            if run == 0 {
                match bulk_one(&mut td, &mut vd, &mut r, t) {
                    Ok((nt, nv)) => {
                        (t, v) = (nt, nv);
                        (ot[i], ov[i]) = (t, v);
                        i += 1;
                    }
                    Err(e) => bad = Some(e),
                }
                continue;
            }
            let len = (n - i).min(run as usize);
            let (first, step) = td.run_start(t);
            let last = i64::try_from(len - 1)
                .ok()
                .and_then(|k| k.checked_mul(step))
                .and_then(|d| first.checked_add(d));
            if first > t && (len == 1 || step > 0) && last.is_some() {
                // the run's timestamps increase: fill them, then decode its values
                let mut x = first;
                for o in &mut ot[i..i + len] {
                    *o = x;
                    x = x.wrapping_add(step);
                }
                let got = vd.fill(&mut r, &mut ov[i..i + len], &mut v);
                td.take_run(got as u32);
                if got > 0 {
                    // no overflow: checked above for the whole run
                    t = first.wrapping_add((got as i64 - 1).wrapping_mul(step));
                }
                i += got;
                if got < len {
                    bad = Some("bit stream ends early");
                }
                continue;
            }
            // corrupt: sample by sample, failing where iteration fails
            for _ in 0..len {
                match bulk_one(&mut td, &mut vd, &mut r, t) {
                    Ok((nt, nv)) => {
                        (t, v) = (nt, nv);
                        (ot[i], ov[i]) = (t, v);
                        i += 1;
                    }
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
        }
        self.r = r;
        self.t = t;
        self.v = v;
        self.idx += i as u16;
        if let Some(reason) = bad {
            self.fail(reason);
        }
        (vd, i)
    }
}

/// Decodes the chunk at the start of `bytes` (after verifying header and checksum), appending
/// its timestamps to `ts` and values to `vs`; returns the number of samples appended.
pub fn decode_into(bytes: &[u8], ts: &mut Vec<i64>, vs: &mut Vec<f64>) -> Result<usize, Error> {
    let mut it = decode(bytes)?;
    let n = it.decode_into(ts, vs);
    match it.take_err() {
        Some(e) => Err(e),
        None => Ok(n),
    }
}
