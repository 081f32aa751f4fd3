//! Stack room for the recursive walks over the syntax tree (type checking, printing,
//! evaluation). Nesting is limited by the parser, but a flat chain of binary operators
//! (`a or b or … or z`) is as deep as it has terms and Prometheus takes any length; each walk
//! step runs through [`grow`], which continues on a new heap-allocated stack segment when
//! less than [`RED_ZONE`] is left, so no length overflows the thread's stack (measured: a
//! 10,000-term chain needs more than 8 MB of stack in a debug build without it).

/// Stack left below which a walk step moves to a new segment: more than one step's frames
/// take (evaluation of a binary operator, debug build).
pub const RED_ZONE: usize = 256 * 1024;

/// The size of each new segment.
pub const SEGMENT: usize = 4 * 1024 * 1024;

/// Runs `f`, on a new stack segment when this one is nearly used up.
#[inline]
pub fn grow<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, SEGMENT, f)
}
