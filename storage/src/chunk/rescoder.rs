//! The residual stream coder of the writer: adaptive Rice, run-length or one Rice parameter.

use super::*;

/// A residual stream coder: plain adaptive Rice or run-length (sparse).
#[derive(Debug, Clone, Copy)]
pub(super) enum ResCoder {
    Rice(Rice),
    Sparse(Sparse),
    Fixed(FixedRice),
}

impl ResCoder {
    pub(super) fn new(use_sparse: bool, fixed: bool) -> Self {
        if use_sparse {
            ResCoder::Sparse(Sparse::default())
        } else if fixed {
            ResCoder::Fixed(FixedRice::default())
        } else {
            ResCoder::Rice(Rice::default())
        }
    }

    /// Codes residual `z`, the `j`th of its stream; `ahead` holds the whole stream's residuals
    /// (needed by the run-length and fixed-parameter codings only).
    // always inlined into the writer's per-sample step (the third coding's arm kept it out
    // of line, ~5 % more instructions per sample)
    #[inline(always)]
    pub(super) fn encode(&mut self, z: u64, j: usize, ahead: &[u64], w: &mut BitWriter) -> u32 {
        match self {
            ResCoder::Rice(r) => r.encode(z, w),
            ResCoder::Sparse(s) => {
                let run = || {
                    ahead
                        .get(j..)
                        .map_or(0, |r| r.iter().take_while(|&&x| x == 0).count() as u64)
                };
                s.encode_at(z, run, w)
            }
            ResCoder::Fixed(f) => Self::encode_fixed(f, z, ahead, w),
        }
    }

    /// The one-parameter arm of [`encode`](ResCoder::encode), kept out of the way of the
    /// online writer's path (only `finish` re-codes with it).
    #[cold]
    #[inline(never)]
    pub(super) fn encode_fixed(f: &mut FixedRice, z: u64, ahead: &[u64], w: &mut BitWriter) -> u32 {
        f.encode_at(z, ahead, w)
    }

    #[inline]
    pub(super) fn decode(&mut self, r: &mut BitReader<'_>) -> u64 {
        match self {
            ResCoder::Rice(c) => c.decode(r),
            ResCoder::Sparse(s) => s.decode(r),
            ResCoder::Fixed(f) => f.decode(r),
        }
    }
}
