//! Alert label and annotation templates: Go `text/template` syntax (parsed and run by the
//! `gtmpl` crate) with Prometheus' data (`$labels`, `$value`, `$externalLabels`,
//! `$externalURL`) and Prometheus' template functions (`humanize`, `title`, `query`, ...).
//! Errors are worded as Go's (`template: __alert_X:1: undefined variable "$label"`).

use std::cell::RefCell;
use std::collections::HashMap;

use gtmpl::{Context, FuncError, Template, Value};

/// Label pairs as templates see them.
pub type LabelPairs = Vec<(String, String)>;

/// What the template function `query` returns: each sample's labels and value.
pub type QueryResult = Result<Vec<(LabelPairs, f64)>, String>;

/// What a template can ask of the store: an instant query at the template's time.
pub type QueryFn<'a> = dyn Fn(&str) -> QueryResult + 'a;

/// Why a template could not be parsed or run; `Display` is Go's text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

/// The data an alert template sees.
#[derive(Debug, Clone, Default)]
pub struct AlertData {
    /// The alert's labels (the sample's, before the rule's labels are applied).
    pub labels: Vec<(String, String)>,
    /// The configured external labels.
    pub external_labels: Vec<(String, String)>,
    /// The configured external URL.
    pub external_url: String,
    /// The sample's value.
    pub value: f64,
}

/// The variable definitions Prometheus puts before every alert template.
const ALERT_DEFS: &str = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}";

const NO_VALUE: &str = "<no value>";

thread_local! {
    static QUERY: RefCell<Option<*const QueryFn<'static>>> = const { RefCell::new(None) };
}

fn map_value(pairs: &[(String, String)]) -> Value {
    let m: HashMap<String, Value> = pairs
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    Value::Map(m)
}

fn data_value(d: &AlertData) -> Value {
    let mut m = HashMap::new();
    m.insert("Labels".to_string(), map_value(&d.labels));
    m.insert("ExternalLabels".to_string(), map_value(&d.external_labels));
    m.insert(
        "ExternalURL".to_string(),
        Value::String(d.external_url.clone()),
    );
    m.insert("Value".to_string(), Value::from(d.value));
    Value::Object(m)
}

fn new_template(name: &str) -> Template {
    let mut t = Template {
        name: name.to_string(),
        ..Default::default()
    };
    t.add_funcs(&FUNCS);
    t
}

/// Rewrites gtmpl's message into Go's wording.
fn go_message(name: &str, user_text: &str, msg: String) -> String {
    let body = msg
        .strip_prefix("template: ")
        .and_then(|r| r.split_once(':').map(|(_, r)| r))
        .map(|r| r.split_once(':').map(|(_, m)| m).unwrap_or(r))
        .unwrap_or(&msg)
        .trim();
    let body = match body.strip_prefix("undefined variable ") {
        Some(v) => format!("undefined variable \"{}\"", v.trim_matches('"')),
        None => body.to_string(),
    };
    let _ = user_text;
    format!("template: {name}:1: {body}")
}

/// Checks that an alert template parses, as `promtool check rules` and rule loading do.
pub fn parse_test_alert(name: &str, text: &str) -> Result<(), TemplateError> {
    let mut t = new_template(name);
    t.parse(format!("{ALERT_DEFS}{text}"))
        .map_err(|e| TemplateError(go_message(name, text, e.to_string())))
}

/// Expands an alert label or annotation template. `query` serves the `query` function.
pub fn expand_alert(
    name: &str,
    text: &str,
    data: &AlertData,
    query: Option<&QueryFn<'_>>,
) -> Result<String, TemplateError> {
    if !text.contains("{{") {
        return Ok(text.to_string());
    }
    let mut t = new_template(name);
    t.parse(format!("{ALERT_DEFS}{text}"))
        .map_err(|e| TemplateError(go_message(name, text, e.to_string())))?;
    let ctx = Context::from(data_value(data));
    // The query function is a plain function pointer in gtmpl: it finds the closure through
    // this thread's slot, set for the duration of this call only.
    let ptr = query.map(|q| {
        // SAFETY: the pointer is only dereferenced while this call runs (cleared below).
        unsafe { std::mem::transmute::<*const QueryFn<'_>, *const QueryFn<'static>>(q) }
    });
    QUERY.with(|s| *s.borrow_mut() = ptr);
    let out = t.render(&ctx);
    QUERY.with(|s| *s.borrow_mut() = None);
    let out = out.map_err(|e| TemplateError(go_message(name, text, e.to_string())))?;
    // `$labels` and `$externalLabels` are Go `map[string]string`s: a missing key reads as
    // the empty string, where gtmpl's untyped maps give `<no value>`.
    if out.contains(NO_VALUE) && !text.contains(NO_VALUE) {
        return Ok(out.replace(NO_VALUE, ""));
    }
    Ok(out)
}

static FUNCS: [(&str, gtmpl::Func); 17] = [
    ("humanize", humanize),
    ("humanize1024", humanize1024),
    ("humanizeDuration", humanize_duration),
    ("humanizePercentage", humanize_percentage),
    ("humanizeTimestamp", humanize_timestamp),
    ("toUpper", to_upper),
    ("toLower", to_lower),
    ("title", title),
    ("match", match_fn),
    ("reReplaceAll", re_replace_all),
    ("safeHtml", safe_html),
    ("stripPort", strip_port),
    ("first", first),
    ("label", label),
    ("value", value),
    ("query", query_fn),
    ("args", args),
];

fn generic(msg: impl Into<String>) -> FuncError {
    FuncError::Generic(msg.into())
}

fn arg_str(args: &[Value], i: usize) -> Result<String, FuncError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Ok(v.to_string()),
        None => Err(generic("wrong number of args")),
    }
}

fn arg_f64(args: &[Value], i: usize) -> Result<f64, FuncError> {
    match args.get(i) {
        Some(Value::Number(n)) => n
            .as_f64()
            .or_else(|| n.as_i64().map(|i| i as f64))
            .or_else(|| n.as_u64().map(|u| u as f64))
            .ok_or_else(|| generic("bad number")),
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| generic(format!("strconv.ParseFloat: parsing {s:?}: invalid syntax"))),
        Some(v) => Err(generic(format!("can't convert {v} to float"))),
        None => Err(generic("wrong number of args")),
    }
}

/// Go's `%.4g` as Prometheus' humanize functions print (no exponent for small magnitudes).
/// Go's `%.4g`.
fn fmt_4g(v: f64) -> String {
    inferdb_query::go_format::format_float_g_prec(v, 4)
}

/// Go's `%v` of a float64 (strconv 'g', shortest).
pub fn go_float_g(v: f64) -> String {
    inferdb_query::go_format::format_float(v, inferdb_query::go_format::FloatFormat::G)
}

fn humanize(args: &[Value]) -> Result<Value, FuncError> {
    let v = arg_f64(args, 0)?;
    if v == 0.0 || v.is_nan() || v.is_infinite() {
        return Ok(Value::String(fmt_4g(v)));
    }
    if v.abs() >= 1.0 {
        let prefixes = ["", "k", "M", "G", "T", "P", "E", "Z", "Y"];
        let mut v = v;
        let mut i = 0;
        while v.abs() >= 1000.0 && i < prefixes.len() - 1 {
            v /= 1000.0;
            i += 1;
        }
        return Ok(Value::String(format!("{}{}", fmt_4g(v), prefixes[i])));
    }
    let prefixes = ["", "m", "u", "n", "p", "f", "a", "z", "y"];
    let mut v = v;
    let mut i = 0;
    while v.abs() < 1.0 && i < prefixes.len() - 1 {
        v *= 1000.0;
        i += 1;
    }
    Ok(Value::String(format!("{}{}", fmt_4g(v), prefixes[i])))
}

fn humanize1024(args: &[Value]) -> Result<Value, FuncError> {
    let v = arg_f64(args, 0)?;
    if v.abs() <= 1.0 || v.is_nan() || v.is_infinite() {
        return Ok(Value::String(fmt_4g(v)));
    }
    let prefixes = ["", "ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"];
    let mut v = v;
    let mut i = 0;
    while v.abs() >= 1024.0 && i < prefixes.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    Ok(Value::String(format!("{}{}", fmt_4g(v), prefixes[i])))
}

fn humanize_duration(args: &[Value]) -> Result<Value, FuncError> {
    let v = arg_f64(args, 0)?;
    if v.is_nan() || v.is_infinite() {
        return Ok(Value::String(fmt_4g(v)));
    }
    if v == 0.0 {
        return Ok(Value::String("0s".into()));
    }
    let (sign, v) = if v < 0.0 { ("-", -v) } else { ("", v) };
    if v >= 1.0 {
        let secs = v as i64;
        let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
        let out = if d != 0 {
            format!("{sign}{d}d {h}h {m}m {s}s")
        } else if h != 0 {
            format!("{sign}{h}h {m}m {s}s")
        } else if m != 0 {
            format!("{sign}{m}m {s}s")
        } else {
            format!("{sign}{}s", fmt_4g(v))
        };
        return Ok(Value::String(out));
    }
    let prefixes = ["m", "u", "n", "p", "f", "a", "z", "y"];
    let mut v = v;
    let mut i = 0;
    while v < 1.0 && i < prefixes.len() {
        v *= 1000.0;
        if v >= 1.0 {
            break;
        }
        i += 1;
    }
    Ok(Value::String(format!(
        "{sign}{}{}s",
        fmt_4g(v),
        prefixes[i.min(prefixes.len() - 1)]
    )))
}

fn humanize_percentage(args: &[Value]) -> Result<Value, FuncError> {
    let v = arg_f64(args, 0)?;
    Ok(Value::String(format!("{}%", fmt_4g(v * 100.0))))
}

fn humanize_timestamp(args: &[Value]) -> Result<Value, FuncError> {
    let v = arg_f64(args, 0)?;
    if v.is_nan() || v.is_infinite() {
        return Ok(Value::String(fmt_4g(v)));
    }
    let secs = v.floor() as i64;
    let nanos = ((v - v.floor()) * 1e9).round() as u32;
    let t = chrono::DateTime::from_timestamp(secs, nanos)
        .ok_or_else(|| generic("timestamp out of range"))?;
    let mut s = t.format("%Y-%m-%d %H:%M:%S%.f").to_string();
    s.push_str(" +0000 UTC");
    Ok(Value::String(s))
}

fn to_upper(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(arg_str(args, 0)?.to_uppercase()))
}

fn to_lower(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(arg_str(args, 0)?.to_lowercase()))
}

fn title(args: &[Value]) -> Result<Value, FuncError> {
    let s = arg_str(args, 0)?;
    let mut out = String::with_capacity(s.len());
    let mut prev_letter = false;
    for c in s.chars() {
        if !prev_letter && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_letter = c.is_alphanumeric() || c == '\'' || c == '_';
    }
    Ok(Value::String(out))
}

fn regex(pat: &str) -> Result<regex::Regex, FuncError> {
    let translated = inferdb_storage::re2::translate(pat).map_err(|e| generic(e.to_string()))?;
    regex::Regex::new(&translated).map_err(|e| generic(e.to_string()))
}

fn match_fn(args: &[Value]) -> Result<Value, FuncError> {
    let re = regex(&arg_str(args, 0)?)?;
    Ok(Value::Bool(re.is_match(&arg_str(args, 1)?)))
}

fn re_replace_all(args: &[Value]) -> Result<Value, FuncError> {
    let re = regex(&arg_str(args, 0)?)?;
    let repl = arg_str(args, 1)?;
    let text = arg_str(args, 2)?;
    Ok(Value::String(
        re.replace_all(&text, repl.as_str()).into_owned(),
    ))
}

fn safe_html(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(arg_str(args, 0)?))
}

fn strip_port(args: &[Value]) -> Result<Value, FuncError> {
    let s = arg_str(args, 0)?;
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, _)) = rest.split_once(']') {
            return Ok(Value::String(host.to_string()));
        }
    }
    match s.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => Ok(Value::String(host.to_string())),
        _ => Ok(Value::String(s)),
    }
}

fn sample_value(labels: &[(String, String)], v: f64) -> Value {
    let mut m = HashMap::new();
    m.insert("Labels".to_string(), map_value(labels));
    m.insert("Value".to_string(), Value::from(v));
    Value::Object(m)
}

fn query_fn(args: &[Value]) -> Result<Value, FuncError> {
    let q = arg_str(args, 0)?;
    let ptr = QUERY.with(|s| *s.borrow());
    let Some(ptr) = ptr else {
        return Err(generic("query function not available"));
    };
    // SAFETY: set by `expand_alert` for the duration of the render that calls this.
    let f = unsafe { &*ptr };
    let res = f(&q).map_err(generic)?;
    Ok(Value::Array(
        res.into_iter().map(|(l, v)| sample_value(&l, v)).collect(),
    ))
}

fn first(args: &[Value]) -> Result<Value, FuncError> {
    match args.first() {
        Some(Value::Array(a)) => a
            .first()
            .cloned()
            .ok_or_else(|| generic("first() called on vector with no elements")),
        _ => Err(generic("first() called on vector with no elements")),
    }
}

fn label(args: &[Value]) -> Result<Value, FuncError> {
    let name = arg_str(args, 0)?;
    if let Some(Value::Object(m)) = args.get(1) {
        if let Some(Value::Map(l)) = m.get("Labels") {
            return Ok(l
                .get(&name)
                .cloned()
                .unwrap_or(Value::String(String::new())));
        }
    }
    Ok(Value::String(String::new()))
}

fn value(args: &[Value]) -> Result<Value, FuncError> {
    if let Some(Value::Object(m)) = args.first() {
        if let Some(v) = m.get("Value") {
            return Ok(v.clone());
        }
    }
    Err(generic("value() called without a sample"))
}

fn args(args: &[Value]) -> Result<Value, FuncError> {
    let m: HashMap<String, Value> = args
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("arg{i}"), v.clone()))
        .collect();
    Ok(Value::Map(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> AlertData {
        AlertData {
            labels: vec![
                ("instance".into(), "a:9090".into()),
                ("job".into(), "j".into()),
            ],
            value: 0.95,
            ..Default::default()
        }
    }

    #[test]
    fn labels_value_and_functions() {
        let d = data();
        let out = expand_alert(
            "__alert_X",
            "{{ $labels.instance }} {{ $value }} {{ $labels.instance | stripPort | toUpper }}",
            &d,
            None,
        )
        .unwrap();
        assert_eq!(out, "a:9090 0.95 A");
        assert_eq!(
            expand_alert("x", "[{{ $labels.missing }}]", &d, None).unwrap(),
            "[]"
        );
        assert_eq!(
            expand_alert(
                "x",
                "{{ humanize 1234567 }} {{ humanizePercentage 0.1234 }} {{ humanize1024 2048 }}",
                &d,
                None
            )
            .unwrap(),
            "1.235M 12.34% 2ki"
        );
        assert_eq!(
            expand_alert("x", "{{ humanizeDuration 3661 }}", &d, None).unwrap(),
            "1h 1m 1s"
        );
    }

    #[test]
    fn undefined_variable_is_refused_as_go_says() {
        let e =
            parse_test_alert("__alert_InstanceDown", "Instance {{ $label.foo }} down").unwrap_err();
        assert_eq!(
            e.0,
            "template: __alert_InstanceDown:1: undefined variable \"$label\""
        );
    }

    #[test]
    fn query_function_reads_through_the_callback() {
        let q = |e: &str| -> QueryResult {
            assert_eq!(e, "up");
            Ok(vec![(vec![("job".into(), "a".into())], 3.0)])
        };
        let out = expand_alert("x", "{{ with query \"up\" }}{{ . | first | value }} {{ . | first | label \"job\" }}{{ end }}", &data(), Some(&q)).unwrap();
        assert_eq!(out, "3 a");
    }
}
