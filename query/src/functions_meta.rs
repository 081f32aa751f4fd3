//! The signature of every PromQL function: argument types and return type. Shared by the
//! parser (type checking) and the evaluator (dispatch).

use crate::ast::ValueType;

/// A function's signature.
#[derive(Debug, Clone, Copy)]
pub struct FunctionSig {
    /// Name as written.
    pub name: &'static str,
    /// Argument types in order.
    pub args: &'static [ValueType],
    /// Number of trailing arguments that may be omitted (`round(v)` vs `round(v, 1)`).
    pub optional: usize,
    /// Whether the last argument type repeats without bound (`label_join`, `sort_by_label`).
    pub variadic: bool,
    /// Return type.
    pub ret: ValueType,
}

use ValueType::{Matrix as M, Scalar as S, String as Str, Vector as V};

macro_rules! sig {
    ($name:literal, [$($a:expr),*], $opt:expr, $var:expr, $ret:expr) => {
        FunctionSig { name: $name, args: &[$($a),*], optional: $opt, variadic: $var, ret: $ret }
    };
}

/// Every function the engine knows, in alphabetical order.
pub static FUNCTIONS: &[FunctionSig] = &[
    sig!("abs", [V], 0, false, V),
    sig!("absent", [V], 0, false, V),
    sig!("absent_over_time", [M], 0, false, V),
    sig!("acos", [V], 0, false, V),
    sig!("acosh", [V], 0, false, V),
    sig!("asin", [V], 0, false, V),
    sig!("asinh", [V], 0, false, V),
    sig!("atan", [V], 0, false, V),
    sig!("atanh", [V], 0, false, V),
    sig!("avg_over_time", [M], 0, false, V),
    sig!("ceil", [V], 0, false, V),
    sig!("changes", [M], 0, false, V),
    sig!("clamp", [V, S, S], 0, false, V),
    sig!("clamp_max", [V, S], 0, false, V),
    sig!("clamp_min", [V, S], 0, false, V),
    sig!("cos", [V], 0, false, V),
    sig!("cosh", [V], 0, false, V),
    sig!("count_over_time", [M], 0, false, V),
    sig!("day_of_month", [V], 1, false, V),
    sig!("day_of_week", [V], 1, false, V),
    sig!("day_of_year", [V], 1, false, V),
    sig!("days_in_month", [V], 1, false, V),
    sig!("deg", [V], 0, false, V),
    sig!("delta", [M], 0, false, V),
    sig!("deriv", [M], 0, false, V),
    sig!("double_exponential_smoothing", [M, S, S], 0, false, V),
    sig!("end", [], 0, false, S),
    sig!("exp", [V], 0, false, V),
    sig!("first_over_time", [M], 0, false, V),
    sig!("floor", [V], 0, false, V),
    sig!("histogram_avg", [V], 0, false, V),
    sig!("histogram_count", [V], 0, false, V),
    sig!("histogram_fraction", [S, S, V], 0, false, V),
    sig!("histogram_quantile", [S, V], 0, false, V),
    sig!("histogram_quantiles", [V, Str, S], 0, true, V),
    sig!("histogram_stddev", [V], 0, false, V),
    sig!("histogram_stdvar", [V], 0, false, V),
    sig!("histogram_sum", [V], 0, false, V),
    sig!("hour", [V], 1, false, V),
    sig!("idelta", [M], 0, false, V),
    sig!("increase", [M], 0, false, V),
    sig!("info", [V, V], 1, false, V),
    sig!("irate", [M], 0, false, V),
    sig!("label_join", [V, Str, Str, Str], 1, true, V),
    sig!("label_replace", [V, Str, Str, Str, Str], 0, false, V),
    sig!("last_over_time", [M], 0, false, V),
    sig!("ln", [V], 0, false, V),
    sig!("log10", [V], 0, false, V),
    sig!("log2", [V], 0, false, V),
    sig!("mad_over_time", [M], 0, false, V),
    sig!("max_of", [S, S], 0, false, S),
    sig!("max_over_time", [M], 0, false, V),
    sig!("min_of", [S, S], 0, false, S),
    sig!("min_over_time", [M], 0, false, V),
    sig!("minute", [V], 1, false, V),
    sig!("month", [V], 1, false, V),
    sig!("pi", [], 0, false, S),
    sig!("predict_linear", [M, S], 0, false, V),
    sig!("present_over_time", [M], 0, false, V),
    sig!("quantile_over_time", [S, M], 0, false, V),
    sig!("rad", [V], 0, false, V),
    sig!("range", [], 0, false, S),
    sig!("rate", [M], 0, false, V),
    sig!("resets", [M], 0, false, V),
    sig!("round", [V, S], 1, false, V),
    sig!("scalar", [V], 0, false, S),
    sig!("sgn", [V], 0, false, V),
    sig!("sin", [V], 0, false, V),
    sig!("sinh", [V], 0, false, V),
    sig!("sort", [V], 0, false, V),
    sig!("sort_by_label", [V, Str], 1, true, V),
    sig!("sort_by_label_desc", [V, Str], 1, true, V),
    sig!("sort_desc", [V], 0, false, V),
    sig!("sqrt", [V], 0, false, V),
    sig!("start", [], 0, false, S),
    sig!("stddev_over_time", [M], 0, false, V),
    sig!("stdvar_over_time", [M], 0, false, V),
    sig!("step", [], 0, false, S),
    sig!("sum_over_time", [M], 0, false, V),
    sig!("tan", [V], 0, false, V),
    sig!("tanh", [V], 0, false, V),
    sig!("time", [], 0, false, S),
    sig!("timestamp", [V], 0, false, V),
    sig!("ts_of_first_over_time", [M], 0, false, V),
    sig!("ts_of_last_over_time", [M], 0, false, V),
    sig!("ts_of_max_over_time", [M], 0, false, V),
    sig!("ts_of_min_over_time", [M], 0, false, V),
    sig!("vector", [S], 0, false, V),
    sig!("year", [V], 1, false, V),
];

/// Looks a function up by name.
pub fn lookup(name: &str) -> Option<&'static FunctionSig> {
    FUNCTIONS
        .binary_search_by(|f| f.name.cmp(name))
        .ok()
        .map(|i| &FUNCTIONS[i])
}

/// The return type of function `name` (vector for unknown names, which the parser rejects).
pub fn return_type(name: &str) -> ValueType {
    lookup(name).map(|f| f.ret).unwrap_or(ValueType::Vector)
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_is_sorted() {
        assert!(super::FUNCTIONS.windows(2).all(|w| w[0].name < w[1].name));
    }
}
