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

/// What the template functions of one expansion read besides their arguments.
struct RenderCtx {
    /// The query function, valid while the expansion runs.
    query: Option<*const QueryFn<'static>>,
    external_url: String,
    html: bool,
    /// The template's name and full text, for `tmpl` (which runs a template defined in it).
    name: String,
    text: String,
}

thread_local! {
    static CTX: RefCell<Option<RenderCtx>> = const { RefCell::new(None) };
}

/// How [`expand`] runs a template: the options of Prometheus' template expander.
#[derive(Default)]
pub struct ExpandOptions<'a> {
    /// Escape the output as `html/template` does (console pages); `safeHtml` opts out.
    pub html: bool,
    /// `missingkey=error`: refuse to print a missing map key.
    pub missingkey_error: bool,
    /// The external URL (`externalURL`, `pathPrefix`, `graphLink`, `tableLink`).
    pub external_url: &'a str,
    /// What `query` runs.
    pub query: Option<&'a QueryFn<'a>>,
}

/// Expands `text` with `data` as `.`, as Prometheus' `Expander.Expand` (or `ExpandHTML`) does;
/// errors read `error parsing template NAME: ...` / `error executing template NAME: ...`.
pub fn expand(
    name: &str,
    text: &str,
    data: Value,
    opts: &ExpandOptions<'_>,
) -> Result<String, TemplateError> {
    let nil_data = matches!(data, Value::Nil | Value::NoValue);
    let data = match data {
        // Go reads a field of nil data as `<no value>`; gtmpl refuses fields of nil
        Value::Nil | Value::NoValue => Value::Map(HashMap::new()),
        d => d,
    };
    let main = parsed(name, text, opts.html)
        .map_err(|e| TemplateError(format!("error parsing template {name}: {e}")))?;
    let (t, src) = &*main;
    let exec_err = |e: String| TemplateError(format!("error executing template {name}: {e}"));
    let out = render(t, name, src, data.clone(), opts)
        .map_err(|e| exec_err(go_message(name, text, e)))?;
    if opts.missingkey_error && !text.contains(NO_VALUE) {
        // gtmpl has no `missingkey` option: a missing key is found by its `<no value>`
        // (which html escaping prints as ""), so html output is checked as text
        let printed = if opts.html {
            let p = parsed(name, text, false).map_err(exec_err)?;
            let (t, src) = &*p;
            let text_opts = ExpandOptions {
                html: false,
                missingkey_error: false,
                external_url: opts.external_url,
                query: opts.query,
            };
            render(t, name, src, data, &text_opts).unwrap_or_default()
        } else {
            out.clone()
        };
        if printed.contains(NO_VALUE) {
            return Err(exec_err(missing_key(name, text, nil_data)));
        }
    }
    Ok(out)
}

/// How many parsed templates [`parsed`] keeps per thread (all dropped when full).
const PARSED_MAX: usize = 1024;

/// A parsed template and the text it was parsed from.
type Parsed = std::rc::Rc<(Template, String)>;

thread_local! {
    /// Templates parsed by this thread, by name, text and html: an alerting rule expands
    /// the same annotation texts for every alert of every evaluation.
    static PARSED: RefCell<HashMap<(String, String, bool), Parsed>> = RefCell::new(HashMap::new());
}

/// `text` as [`expand`] runs it (time formats, label lookups and printing rewritten), parsed
/// as Go does, or taken from this thread's earlier parse of the same name and text.
fn parsed(name: &str, text: &str, html: bool) -> Result<Parsed, String> {
    let key = (name.to_string(), text.to_string(), html);
    if let Some(p) = PARSED.with(|c| c.borrow().get(&key).cloned()) {
        return Ok(p);
    }
    let src = rewrite_label_lookups(&map_actions(text, rewrite_time_format));
    let src = print_actions(&src, if html { "__html" } else { "__print" });
    let t = parse_go(name, &src)?;
    let p = std::rc::Rc::new((t, src));
    PARSED.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= PARSED_MAX {
            c.clear();
        }
        c.insert(key, p.clone());
    });
    Ok(p)
}

/// Runs a parsed template with the expansion's context set for its functions.
#[allow(unsafe_code)] // the query closure's lifetime erased for gtmpl's function pointers
fn render(
    t: &Template,
    name: &str,
    text: &str,
    data: Value,
    opts: &ExpandOptions<'_>,
) -> Result<String, String> {
    // The query function is a plain function pointer in gtmpl: it finds the closure through
    // this thread's slot, set for the duration of this call only.
    let query = opts.query.map(|q| {
        // SAFETY: the pointer is only dereferenced while this call runs (cleared below).
        unsafe { std::mem::transmute::<*const QueryFn<'_>, *const QueryFn<'static>>(q) }
    });
    let prev = CTX.with(|s| {
        s.borrow_mut().replace(RenderCtx {
            query,
            external_url: opts.external_url.to_string(),
            html: opts.html,
            name: name.to_string(),
            text: text.to_string(),
        })
    });
    let out = t.render(&Context::from(data));
    CTX.with(|s| *s.borrow_mut() = prev);
    out.map_err(|e| e.to_string())
}

/// Reads `X.Labels.name`, `$labels.name` and `$externalLabels.name` through `__label`: label
/// sets are Go `map[string]string`s, so a missing label is "" (printed, and compared by `eq`),
/// where gtmpl's untyped maps give `<no value>`.
fn rewrite_label_lookups(text: &str) -> String {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(^|[\s(|,])((?:\$[A-Za-z_][A-Za-z0-9_]*)?(?:\.[A-Za-z_][A-Za-z0-9_]*)*?(?:\.Labels|\$labels|\$externalLabels))\.([A-Za-z_][A-Za-z0-9_]*)",
        )
        .expect("label lookup pattern")
    });
    static NEG: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(^|[\s(|,])-([0-9]*\.[0-9]+(?:[eE][-+]?[0-9]+)?)")
            .expect("negative float pattern")
    });
    map_actions(text, |action| {
        map_unquoted(action, |code| {
            let code = RE.replace_all(code, "$1(__label $2 \"$3\")");
            // gtmpl reads a negative float literal as 0: negate the positive one instead
            NEG.replace_all(&code, "$1(__neg $2)").into_owned()
        })
    })
}

/// Which bytes of `code` are outside quoted strings and character literals.
fn unquoted_mask(code: &str) -> Vec<bool> {
    let b = code.as_bytes();
    let mut mask = vec![true; b.len()];
    let mut i = 0;
    while i < b.len() {
        let q = b[i];
        if q == b'"' || q == b'`' || q == b'\'' {
            let mut j = i + 1;
            while j < b.len() && b[j] != q {
                if b[j] == b'\\' && q != b'`' {
                    j += 1;
                }
                j += 1;
            }
            let end = (j + 1).min(b.len());
            mask[i..end].iter_mut().for_each(|m| *m = false);
            i = end;
            continue;
        }
        i += 1;
    }
    mask
}

/// Rewrites `(PIPELINE).Format LAYOUT` (Go's `time.Time.Format` on what `toTime` gives)
/// into `(__timeFormat LAYOUT (PIPELINE))`: gtmpl's values have no methods.
fn rewrite_time_format(action: &str) -> String {
    const METHOD: &str = ").Format";
    let mut a = action.to_string();
    loop {
        let mask = unquoted_mask(&a);
        let b = a.as_bytes();
        let Some(close) = a.match_indices(METHOD).map(|(i, _)| i).find(|&i| {
            mask[i]
                && b.get(i + METHOD.len())
                    .is_none_or(|c| !c.is_ascii_alphanumeric())
        }) else {
            return a;
        };
        let mut depth = 0;
        let mut open = None;
        for k in (0..close).rev() {
            if !mask[k] {
                continue;
            }
            match b[k] {
                b')' => depth += 1,
                b'(' if depth == 0 => {
                    open = Some(k);
                    break;
                }
                b'(' => depth -= 1,
                _ => {}
            }
        }
        let Some(open) = open else {
            return a;
        };
        let start = close + METHOD.len();
        let mut end = a.len();
        let mut depth = 0;
        for (k, &c) in b.iter().enumerate().skip(start) {
            if !mask[k] {
                continue;
            }
            match c {
                b'(' => depth += 1,
                b')' if depth == 0 => {
                    end = k;
                    break;
                }
                b')' => depth -= 1,
                b'|' if depth == 0 => {
                    end = k;
                    break;
                }
                _ => {}
            }
        }
        a = format!(
            "{}(__timeFormat {} ({})){}",
            &a[..open],
            a[start..end].trim(),
            &a[open + 1..close],
            &a[end..]
        );
    }
}

/// Applies `f` to the parts of an action outside quoted strings and character literals.
fn map_unquoted(action: &str, mut f: impl FnMut(&str) -> String) -> String {
    let b = action.as_bytes();
    let mut out = String::with_capacity(action.len() + 16);
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let q = b[i];
        if q == b'"' || q == b'`' || q == b'\'' {
            out.push_str(&f(&action[start..i]));
            let mut j = i + 1;
            while j < b.len() && b[j] != q {
                if b[j] == b'\\' && q != b'`' {
                    j += 1;
                }
                j += 1;
            }
            let end = (j + 1).min(b.len());
            out.push_str(&action[i..end]);
            start = end;
            i = end;
            continue;
        }
        i += 1;
    }
    out.push_str(&f(&action[start..]));
    out
}

/// Go's lexer refuses characters that cannot start a token inside an action (a no-break
/// space, say), which gtmpl misreads: find the first as Go reports it.
fn unrecognized_character(text: &str) -> Option<(usize, String)> {
    let mut found = None;
    map_actions(text, |action| {
        if found.is_none() {
            map_unquoted(action, |code| {
                if found.is_none() {
                    if let Some(c) = code.chars().find(|c| !c.is_ascii() && !c.is_alphanumeric()) {
                        found = Some(c);
                    }
                }
                String::new()
            });
        }
        String::new()
    });
    let c = found?;
    let at = text.find(c).unwrap_or(0);
    let line = 1 + text[..at].matches('\n').count();
    let printable = !c.is_whitespace() && !c.is_control();
    let shown = if printable {
        format!("U+{:04X} '{c}'", c as u32)
    } else {
        format!("U+{:04X}", c as u32)
    };
    Some((line, format!("unrecognized character in action: {shown}")))
}

/// Parses as Go does, with Go's line and wording for the errors gtmpl words differently:
/// gtmpl's line numbers are not Go's, so the line is the first whose prefix of the text
/// fails with the same message.
fn parse_go(name: &str, text: &str) -> Result<Template, String> {
    if let Some((line, msg)) = unrecognized_character(text) {
        return Err(format!("template: {name}:{line}: {msg}"));
    }
    if let Some(at) = open_action(text) {
        return Err(unclosed(name, text, at));
    }
    let mut t = new_template(name);
    let Err(e) = t.parse(text.to_string()) else {
        return Ok(t);
    };
    let body = go_body(&e.to_string());
    let body = match body.as_str() {
        "unexpected unclosed action in command" | "unexpected EOF in command" => {
            "unclosed action".to_string()
        }
        b => match b
            .strip_prefix("function ")
            .and_then(|r| r.strip_suffix(" not defined"))
        {
            Some(f) => format!("function \"{f}\" not defined"),
            None => b.to_string(),
        },
    };
    let mut line = 1 + text.trim_end_matches('\n').matches('\n').count();
    let mut end = 0;
    for (k, l) in text.split_inclusive('\n').enumerate() {
        end += l.len();
        // a prefix that ends inside an action is read with the action closed (see open_action)
        let mut prefix = text[..end].to_string();
        if open_action(&prefix).is_some() {
            prefix.push_str("}}");
            if open_action(&prefix).is_some() {
                continue;
            }
        }
        let mut p = new_template(name);
        if let Err(pe) = p.parse(prefix) {
            if pe.to_string() == e.to_string() {
                line = k + 1;
                break;
            }
        }
    }
    Err(format!("template: {name}:{line}: {body}"))
}

/// Where the first action left open at the end of `text` starts (its `{{`). gtmpl's lexer never
/// returns on such text when the action ends in a space (`{{ x `), so it is refused before
/// gtmpl sees it.
fn open_action(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("{{") {
        let at = from + i;
        let after = &text[at + 2..];
        let after = after.strip_prefix("- ").unwrap_or(after);
        let Some(end) = action_end(after) else {
            return Some(at);
        };
        from = text.len() - after.len() + end + 2;
    }
    None
}

/// Go's error for text whose action opened at byte `at` is not closed, as its lexer and parser
/// find it: a comment or quoted string left open where it starts; otherwise the tokens before
/// the end are read first (an unknown function or variable, a stray `}` there is the error),
/// then the end of the text is `unclosed action`, at the last line, naming the line the action started on
/// when that is another.
fn unclosed(name: &str, text: &str, at: usize) -> String {
    let line_of = |byte: usize| 1 + text[..byte].matches('\n').count();
    let inner = text[at + 2..].trim_start_matches("- ");
    let inner_at = text.len() - inner.len();
    if inner.trim_start().starts_with("/*") && !inner.contains("*/") {
        return format!("template: {name}:{}: unclosed comment", line_of(at));
    }
    let b = inner.as_bytes();
    let mut quote: Option<(u8, usize)> = None;
    let mut i = 0;
    while i < b.len() {
        match quote {
            Some((q, _)) if b[i] == b'\\' && q != b'`' => i += 1,
            Some((q, _)) if b[i] == q => quote = None,
            Some(_) => {}
            None if matches!(b[i], b'"' | b'`' | b'\'') => quote = Some((b[i], i)),
            None => {}
        }
        i += 1;
    }
    if let Some((q, qi)) = quote {
        let what = match q {
            b'"' => "unterminated quoted string",
            b'`' => "unterminated raw quoted string",
            _ => "unterminated character constant",
        };
        return format!("template: {name}:{}: {what}", line_of(inner_at + qi));
    }
    let closed = format!("{text}}}}}");
    if open_action(&closed).is_none() {
        if let Err(e) = parse_go(name, &closed) {
            // an error at the added `}}` or at the end is the end's: `unclosed action`
            let body = go_body(&e);
            if !["EOF", "unclosed", "missing", "empty"]
                .iter()
                .any(|w| body.contains(w))
            {
                return e;
            }
        }
    }
    let (start, line) = (line_of(at), line_of(text.len()));
    if start == line {
        format!("template: {name}:{line}: unclosed action")
    } else {
        format!("template: {name}:{line}: unclosed action started at {name}:{start}")
    }
}

/// Pipes every printing action into `printer`: `__print` writes values as Go's `fmt` does
/// (gtmpl's numbers print as Rust's), `__html` also escapes as `html/template` does in text
/// context.
fn print_actions(text: &str, printer: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
    ];
    map_actions(text, |action| {
        let body = action.trim();
        let first = body.split_whitespace().next().unwrap_or("");
        let assigns = body.starts_with('$')
            && body
                .split_whitespace()
                .nth(1)
                .is_some_and(|w| w == ":=" || w == "=");
        if body.is_empty() || body.starts_with("/*") || KEYWORDS.contains(&first) || assigns {
            action.to_string()
        } else {
            format!("{action} | {printer} ")
        }
    })
}

/// Applies `f` to the inside of every `{{ ... }}` action (trim markers kept outside), leaving
/// the text between actions and quoted strings' `}}` alone.
fn map_actions(text: &str, mut f: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let (open, after) = match after.strip_prefix("- ") {
            Some(a) => ("{{- ", a),
            None => ("{{", after),
        };
        let Some(end) = action_end(after) else {
            out.push_str(open);
            out.push_str(after);
            return out;
        };
        let inner = &after[..end];
        let (inner, close) = match inner.strip_suffix(" -") {
            Some(x) => (x, " -}}"),
            None => (inner, "}}"),
        };
        out.push_str(open);
        out.push_str(&f(inner));
        out.push_str(close);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Where the action's closing `}}` is, outside quoted strings.
fn action_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < b.len() {
        match quote {
            Some(q) => {
                if b[i] == b'\\' && q != b'`' {
                    i += 1;
                } else if b[i] == q {
                    quote = None;
                }
            }
            None => match b[i] {
                b'"' | b'`' | b'\'' => quote = Some(b[i]),
                b'}' if b.get(i + 1) == Some(&b'}') => return Some(i),
                _ => {}
            },
        }
        i += 1;
    }
    None
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
    m.insert("Value".to_string(), float_value(d.value));
    Value::Object(m)
}

/// A float64 as a template value. gtmpl keeps whole numbers as integers and turns negative
/// fractions and positive ones under its epsilon into integers too (-0.5 becomes 0): those,
/// and the numbers it would round, are given as the text Go's `fmt` prints for them, which
/// the functions taking numbers read back.
pub fn float_value(v: f64) -> Value {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        Value::from(v as i64)
    } else if v.is_finite() && v > 0.0 && v.fract() >= f64::EPSILON {
        Value::from(v)
    } else {
        Value::String(go_float_v(v))
    }
}

/// Go's `fmt` `%v` of a float64: shortest digits, exponent form below 1e-4 and from 1e21.
pub fn go_float_v(v: f64) -> String {
    if v.is_nan() || v.is_infinite() {
        return fmt_4g(v);
    }
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        let e = format!("{v:e}");
        let (m, x) = e.split_once('e').unwrap_or((&e, "0"));
        let x: i32 = x.parse().unwrap_or(0);
        let sign = if x < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", x.abs());
    }
    format!("{v}")
}

/// What Go's `fmt.Fprint` writes for a template value.
fn go_print(v: &Value) -> String {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (_, _, Some(f)) => go_float_v(f),
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            _ => n.to_string(),
        },
        v => v.to_string(),
    }
}

fn print(args: &[Value]) -> Result<Value, FuncError> {
    Ok(match args.first() {
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(v) => Value::String(go_print(v)),
        None => Value::String(NO_VALUE.to_string()),
    })
}

fn new_template(name: &str) -> Template {
    let mut t = Template {
        name: name.to_string(),
        ..Default::default()
    };
    t.add_funcs(&FUNCS);
    t
}

/// The body of gtmpl's message (after its `template: name:line:` prefix) in Go's wording.
fn go_body(msg: &str) -> String {
    let body = msg
        .strip_prefix("template: ")
        .and_then(|r| r.split_once(':').map(|(_, r)| r))
        .map(|r| r.split_once(':').map(|(_, m)| m).unwrap_or(r))
        .unwrap_or(msg)
        .trim();
    match body.strip_prefix("undefined variable ") {
        Some(v) => format!("undefined variable \"{}\"", v.trim_matches('"')),
        None => body.to_string(),
    }
}

/// An execution error as Go's `text/template` words it. A failing function call reads
/// `template: NAME:LINE:COL: executing "NAME" at <CALL>: error calling FN: MESSAGE`, with
/// the call found in `text` by its function's name (when it is called once; otherwise
/// without the position); other errors have no column or node.
fn go_message(name: &str, text: &str, msg: String) -> String {
    let body = go_body(&msg);
    let Some((func, err)) = body
        .strip_prefix(CALL_MARK)
        .and_then(|r| r.split_once(CALL_MARK))
    else {
        return format!("template: {name}:1: {body}");
    };
    let err = err.replace(CALL_MARK, "");
    match find_call(text, func) {
        Some((at, call)) => {
            let before = &text[..at];
            let line = 1 + before.matches('\n').count();
            let col = before.rfind('\n').map_or(at, |nl| at - nl - 1);
            format!(
                "template: {name}:{line}:{col}: executing \"{name}\" at <{call}>: error calling {func}: {err}"
            )
        }
        None => format!("template: {name}:1: error calling {func}: {err}"),
    }
}

/// The offset of the only call of function `func` in the actions of `text`, and the call as
/// Go prints its command node (its words joined by single spaces, up to the next `|`, the
/// closing parenthesis or the action's end); `None` unless called exactly once.
fn find_call(text: &str, func: &str) -> Option<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = 0;
    while let Some(i) = text[rest..].find("{{") {
        let start = rest + i + 2;
        let end = start + action_end(&text[start..])?;
        let b = text.as_bytes();
        let mut quote: Option<u8> = None;
        let mut k = start;
        while k < end {
            let c = b[k];
            match quote {
                Some(q) => {
                    if c == b'\\' && q != b'`' {
                        k += 1;
                    } else if c == q {
                        quote = None;
                    }
                }
                None if c == b'"' || c == b'`' || c == b'\'' => quote = Some(c),
                None => {
                    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
                    if b[k..end].starts_with(func.as_bytes())
                        && !(k > 0 && (word(b[k - 1]) || b[k - 1] == b'.' || b[k - 1] == b'$'))
                        && !b.get(k + func.len()).is_some_and(|x| word(*x))
                    {
                        found.push((k, end));
                    }
                }
            }
            k += 1;
        }
        rest = end + 2;
    }
    let [(at, end)] = found[..] else {
        return None;
    };
    // the command: to the first `|` or unmatched `)` outside strings
    let b = text.as_bytes();
    let (mut depth, mut quote, mut k) = (0i32, None::<u8>, at);
    while k < end {
        let c = b[k];
        match quote {
            Some(q) => {
                if c == b'\\' && q != b'`' {
                    k += 1;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                b'"' | b'`' | b'\'' => quote = Some(c),
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                b'|' if depth == 0 => break,
                _ => {}
            },
        }
        k += 1;
    }
    // Go prints the words separated by single spaces: collapse whitespace outside strings
    let mut call = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text[at..k.min(end)].trim_end().chars() {
        match quote {
            Some(q) => {
                call.push(c);
                if escaped {
                    escaped = false;
                } else if c == '\\' && q != '`' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c.is_whitespace() => {
                if !call.ends_with(' ') {
                    call.push(' ');
                }
            }
            None => {
                if matches!(c, '"' | '`' | '\'') {
                    quote = Some(c);
                }
                call.push(c);
            }
        }
    }
    Some((at, call))
}

/// Go's `missingkey=error` failure: `template: NAME:LINE:COL: executing "NAME" at <.KEY>:
/// map has no entry for key "KEY"` (`nil data; no entry for key` when the data is nil), when
/// the text reads a single field; otherwise without the position and key.
fn missing_key(name: &str, text: &str, nil_data: bool) -> String {
    let mut fields = Vec::new();
    let mut rest = 0;
    while let Some(i) = text[rest..].find("{{") {
        let start = rest + i + 2;
        let Some(len) = action_end(&text[start..]) else {
            break;
        };
        let mut offset = start;
        map_unquoted(&text[start..start + len], |code| {
            let b = code.as_bytes();
            for (k, _) in code.match_indices('.') {
                let prev = k.checked_sub(1).map(|p| b[p]);
                let after = &code[k + 1..];
                let key_len = after
                    .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .unwrap_or(after.len());
                let starts_ident = after.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
                let follows_word = prev.is_some_and(|p| {
                    p.is_ascii_alphanumeric() || matches!(p, b'_' | b')' | b']' | b'$' | b'.')
                });
                if starts_ident && !follows_word {
                    fields.push((
                        offset + k,
                        after[..key_len].to_string(),
                        after[key_len..].starts_with('.'),
                    ));
                }
            }
            offset += code.len();
            String::new()
        });
        rest = start + len + 2;
    }
    let why = if nil_data {
        "nil data; no entry for key"
    } else {
        "map has no entry for key"
    };
    match &fields[..] {
        [(at, key, false)] => {
            let before = &text[..*at];
            let line = 1 + before.matches('\n').count();
            let col = before.rfind('\n').map_or(*at, |nl| at - nl - 1);
            format!(
                "template: {name}:{line}:{col}: executing \"{name}\" at <.{key}>: {why} \"{key}\""
            )
        }
        _ => format!("template: {name}:1: map has no entry for a key"),
    }
}

/// Checks that an alert template parses, as `promtool check rules` and rule loading do.
pub fn parse_test_alert(name: &str, text: &str) -> Result<(), TemplateError> {
    parse_go(name, &format!("{ALERT_DEFS}{text}"))
        .map(|_| ())
        .map_err(TemplateError)
}

/// Expands an alert label or annotation template. `query` serves the `query` function. The
/// error reads as Prometheus' (`error executing template __alert_X: template: ...`), which
/// the rule writes into the annotation as `<error expanding template: ...>`.
pub fn expand_alert(
    name: &str,
    text: &str,
    data: &AlertData,
    query: Option<&QueryFn<'_>>,
) -> Result<String, TemplateError> {
    if !text.contains("{{") {
        return Ok(text.to_string());
    }
    let opts = ExpandOptions {
        external_url: &data.external_url,
        query,
        ..Default::default()
    };
    expand(
        name,
        &format!("{ALERT_DEFS}{text}"),
        data_value(data),
        &opts,
    )
}

/// The fuzz target's body (`fuzz/fuzz_targets/template_expand.rs`): any text is checked as an
/// alert template and expanded, as text and as HTML, with labels, a value and a `query`
/// function; a template that cannot be parsed or run is an error, never a panic. Returns
/// whether the alert template expanded.
pub fn fuzz_expand(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let _ = parse_test_alert("fuzz", &text);
    let alert = AlertData {
        labels: vec![
            ("instance".to_string(), "vllm-0:8000".to_string()),
            ("model_name".to_string(), "meta/llama".to_string()),
        ],
        external_labels: vec![("cluster".to_string(), "a".to_string())],
        external_url: "http://localhost:9090".to_string(),
        value: 0.95,
    };
    let query = |q: &str| -> QueryResult {
        if q.is_empty() {
            return Err("empty query".to_string());
        }
        Ok(vec![(
            vec![("instance".to_string(), "a:1".to_string())],
            1.5,
        )])
    };
    let ok = expand_alert("fuzz", &text, &alert, Some(&query)).is_ok();
    let html = ExpandOptions {
        html: true,
        missingkey_error: true,
        external_url: "http://localhost:9090",
        query: Some(&query),
    };
    let _ = expand("fuzz", &text, data_value(&alert), &html);
    ok
}

/// Wraps a template function so that its error names it (`\u{1}name\u{1}message`), for
/// [`go_message`] to word it as Go's `error calling name: message` at the call's position.
macro_rules! called {
    ($name:literal, $f:ident) => {{
        fn call(args: &[Value]) -> Result<Value, FuncError> {
            $f(args).map_err(|e| FuncError::Generic(format!("{CALL_MARK}{}{CALL_MARK}{e}", $name)))
        }
        call
    }};
}

/// Separates a failing function's name from its message (see `called!`).
const CALL_MARK: char = '\u{1}';

static FUNCS: [(&str, gtmpl::Func); 34] = [
    ("humanize", called!("humanize", humanize)),
    ("humanize1024", called!("humanize1024", humanize1024)),
    (
        "humanizeDuration",
        called!("humanizeDuration", humanize_duration),
    ),
    (
        "humanizePercentage",
        called!("humanizePercentage", humanize_percentage),
    ),
    (
        "humanizeTimestamp",
        called!("humanizeTimestamp", humanize_timestamp),
    ),
    ("toUpper", called!("toUpper", to_upper)),
    ("toLower", called!("toLower", to_lower)),
    ("title", called!("title", title)),
    ("match", called!("match", match_fn)),
    ("reReplaceAll", called!("reReplaceAll", re_replace_all)),
    ("safeHtml", called!("safeHtml", safe_html)),
    ("stripPort", called!("stripPort", strip_port)),
    ("stripDomain", called!("stripDomain", strip_domain)),
    ("first", called!("first", first)),
    ("label", called!("label", label)),
    ("value", called!("value", value)),
    ("strvalue", called!("strvalue", strvalue)),
    ("sortByLabel", called!("sortByLabel", sort_by_label)),
    ("query", called!("query", query_fn)),
    ("args", called!("args", args)),
    ("tmpl", called!("tmpl", tmpl)),
    ("graphLink", called!("graphLink", graph_link)),
    ("tableLink", called!("tableLink", table_link)),
    ("pathPrefix", called!("pathPrefix", path_prefix)),
    ("externalURL", called!("externalURL", external_url)),
    ("parseDuration", called!("parseDuration", parse_duration)),
    ("toTime", called!("toTime", to_time)),
    ("eq", called!("eq", eq)),
    ("ne", called!("ne", ne)),
    ("__label", label_of),
    ("__html", html_escape),
    ("__neg", neg),
    ("__print", print),
    ("__timeFormat", called!("Format", time_format)),
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
    let t = float_to_time(v)?;
    let nanos = t.timestamp_subsec_nanos();
    let mut s = t.format("%Y-%m-%d %H:%M:%S").to_string();
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push_str(" +0000 UTC");
    Ok(Value::String(s))
}

/// Seconds since the epoch as a time, as Prometheus' `floatToTime` converts them (through
/// whole nanoseconds, refusing what overflows int64).
fn float_to_time(v: f64) -> Result<chrono::DateTime<chrono::Utc>, FuncError> {
    let ns = v * 1e9;
    if ns >= i64::MAX as f64 || ns < i64::MIN as f64 {
        return Err(generic(format!(
            "{} cannot be represented as a nanoseconds timestamp since it overflows int64",
            go_float_g(v)
        )));
    }
    Ok(chrono::DateTime::from_timestamp_nanos(ns as i64))
}

fn to_time(args: &[Value]) -> Result<Value, FuncError> {
    let t = float_to_time(arg_f64(args, 0)?)?;
    Ok(Value::String(
        t.format("%Y-%m-%d %H:%M:%S%.f +0000 UTC").to_string(),
    ))
}

/// `time.Time.Format(layout)` on a time as `toTime` gives it (Go's `String()` form) or as
/// seconds since the epoch.
fn time_format(args: &[Value]) -> Result<Value, FuncError> {
    let layout = arg_str(args, 0)?;
    let t = match args.get(1) {
        Some(Value::String(s)) => chrono::NaiveDateTime::parse_from_str(
            s.trim_end_matches(" +0000 UTC"),
            "%Y-%m-%d %H:%M:%S%.f",
        )
        .map(|t| t.and_utc())
        .map_err(|_| generic(format!("can't call method Format on {s:?}")))?,
        _ => float_to_time(arg_f64(args, 1)?)?,
    };
    Ok(Value::String(go_time_layout(&t, &layout)))
}

/// Formats `t` (UTC) with a Go reference-time layout (`2006-01-02 15:04:05.000 MST`).
fn go_time_layout(t: &chrono::DateTime<chrono::Utc>, layout: &str) -> String {
    use chrono::{Datelike, Timelike};
    const CHUNKS: &[&str] = &[
        "January",
        "Monday",
        "Z07:00:00",
        "-07:00:00",
        "Z07:00",
        "-07:00",
        "Z0700",
        "-0700",
        "2006",
        "Z07",
        "-07",
        "MST",
        "Jan",
        "Mon",
        "002",
        "_2",
        "01",
        "02",
        "03",
        "04",
        "05",
        "06",
        "15",
        "PM",
        "pm",
        "1",
        "2",
        "3",
        "4",
        "5",
    ];
    let mut out = String::new();
    let mut i = 0;
    while i < layout.len() {
        let rest = &layout[i..];
        // fractional seconds: `.000` / `,999` (trailing zeros trimmed for 9s)
        if rest.starts_with(['.', ',']) {
            let digits = rest[1..]
                .bytes()
                .take_while(|&c| c == b'0' || c == b'9')
                .count();
            let same = rest[1..1 + digits].bytes().all(|c| c == rest.as_bytes()[1]);
            let next_digit = rest
                .as_bytes()
                .get(1 + digits)
                .is_some_and(u8::is_ascii_digit);
            if digits > 0 && same && !next_digit {
                let frac = format!("{:09}", t.nanosecond() % 1_000_000_000);
                let frac = &frac[..digits.min(9)];
                if rest.as_bytes()[1] == b'9' {
                    let f = frac.trim_end_matches('0');
                    if !f.is_empty() {
                        out.push_str(&rest[..1]);
                        out.push_str(f);
                    }
                } else {
                    out.push_str(&rest[..1]);
                    out.push_str(frac);
                }
                i += 1 + digits;
                continue;
            }
        }
        let Some(chunk) = CHUNKS.iter().find(|c| {
            rest.starts_with(**c)
                && !(matches!(**c, "Jan" | "Mon")
                    && rest[3..].starts_with(|c: char| c.is_ascii_lowercase()))
        }) else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
            continue;
        };
        let hour12 = match t.hour() % 12 {
            0 => 12,
            h => h,
        };
        let piece = match *chunk {
            "January" => t.format("%B").to_string(),
            "Monday" => t.format("%A").to_string(),
            "Jan" => t.format("%b").to_string(),
            "Mon" => t.format("%a").to_string(),
            "2006" => format!("{}", t.year()),
            "06" => format!("{:02}", t.year().rem_euclid(100)),
            "01" => format!("{:02}", t.month()),
            "1" => format!("{}", t.month()),
            "02" => format!("{:02}", t.day()),
            "_2" => format!("{:>2}", t.day()),
            "2" => format!("{}", t.day()),
            "002" => format!("{:03}", t.ordinal()),
            "15" => format!("{:02}", t.hour()),
            "03" => format!("{hour12:02}"),
            "3" => format!("{hour12}"),
            "04" => format!("{:02}", t.minute()),
            "4" => format!("{}", t.minute()),
            "05" => format!("{:02}", t.second()),
            "5" => format!("{}", t.second()),
            "PM" => (if t.hour() < 12 { "AM" } else { "PM" }).to_string(),
            "pm" => (if t.hour() < 12 { "am" } else { "pm" }).to_string(),
            "MST" => "UTC".to_string(),
            z if z.starts_with('Z') => "Z".to_string(),
            "-07:00:00" => "+00:00:00".to_string(),
            "-07:00" => "+00:00".to_string(),
            "-0700" => "+0000".to_string(),
            _ => "+00".to_string(),
        };
        out.push_str(&piece);
        i += chunk.len();
    }
    out
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

/// The key of the one-entry map that marks text as already HTML (`safeHtml`, `tmpl` in
/// HTML mode), which `__html` writes unescaped.
const SAFE_HTML: &str = "\u{0}safeHtml";

fn html_mode() -> bool {
    CTX.with(|c| c.borrow().as_ref().is_some_and(|c| c.html))
}

fn safe(s: String) -> Value {
    if html_mode() {
        Value::Map(HashMap::from([(SAFE_HTML.to_string(), Value::String(s))]))
    } else {
        Value::String(s)
    }
}

fn safe_html(args: &[Value]) -> Result<Value, FuncError> {
    Ok(safe(arg_str(args, 0)?))
}

/// `html/template`'s escaping of an action's output in text context.
fn html_escape(args: &[Value]) -> Result<Value, FuncError> {
    let v = args.first().cloned().unwrap_or(Value::NoValue);
    if let Value::Map(m) = &v {
        if let Some(Value::String(s)) = m.get(SAFE_HTML) {
            return Ok(Value::String(s.clone()));
        }
    }
    let s = match v {
        Value::NoValue | Value::Nil => String::new(),
        Value::String(s) => s,
        v => go_print(&v),
    };
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '+' => out.push_str("&#43;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    Ok(Value::String(out))
}

/// A label of a label set (`$labels`, `.Labels` of a sample): "" when missing.
fn label_of(args: &[Value]) -> Result<Value, FuncError> {
    let name = arg_str(args, 1)?;
    match args.first() {
        Some(Value::Map(m)) => Ok(m
            .get(&name)
            .cloned()
            .unwrap_or(Value::String(String::new()))),
        Some(Value::Object(m)) => m
            .get(&name)
            .cloned()
            .ok_or_else(|| generic(format!("can't evaluate field {name}"))),
        _ => Ok(Value::String(String::new())),
    }
}

/// Go's `eq`: a missing value (`<no value>`) never equals anything, numbers compare by value.
fn eq(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() < 2 {
        return Err(generic("missing arguments for comparison"));
    }
    let first = &args[0];
    Ok(Value::Bool(args[1..].iter().any(|x| same(first, x))))
}

fn ne(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() != 2 {
        return Err(generic("wrong number of args for ne: want 2"));
    }
    Ok(Value::Bool(!same(&args[0], &args[1])))
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

fn neg(args: &[Value]) -> Result<Value, FuncError> {
    Ok(float_value(-arg_f64(args, 0)?))
}

fn strip_domain(args: &[Value]) -> Result<Value, FuncError> {
    let s = arg_str(args, 0)?;
    // IP addresses (with or without port) stay as they are
    let host = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => s.as_str(),
    };
    if host.contains(':') || host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok() {
        return Ok(Value::String(s));
    }
    match s.split_once('.') {
        Some((first, rest)) => {
            let port = rest.rsplit_once(':').map(|(_, p)| p);
            Ok(Value::String(match port {
                Some(p) => format!("{first}:{p}"),
                None => first.to_string(),
            }))
        }
        None => Ok(Value::String(s)),
    }
}

fn ctx_external_url() -> String {
    CTX.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| c.external_url.clone())
            .unwrap_or_default()
    })
}

fn path_prefix(_args: &[Value]) -> Result<Value, FuncError> {
    let u = ctx_external_url();
    let path = url::Url::parse(&u)
        .map(|u| u.path().trim_end_matches('/').to_string())
        .unwrap_or_default();
    Ok(Value::String(path))
}

fn external_url(_args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(ctx_external_url()))
}

fn graph_link_tab(args: &[Value], tab: u8) -> Result<Value, FuncError> {
    let expr = arg_str(args, 0)?;
    let q: String = url::form_urlencoded::byte_serialize(expr.as_bytes()).collect();
    Ok(Value::String(format!("/graph?g0.expr={q}&g0.tab={tab}")))
}

fn graph_link(args: &[Value]) -> Result<Value, FuncError> {
    graph_link_tab(args, 0)
}

fn table_link(args: &[Value]) -> Result<Value, FuncError> {
    graph_link_tab(args, 1)
}

fn parse_duration(args: &[Value]) -> Result<Value, FuncError> {
    let s = arg_str(args, 0)?;
    let ms = inferdb_query::parser::parse_model_duration_ms(&s).map_err(generic)?;
    Ok(float_value(ms as f64 / 1000.0))
}

/// Runs the template named by the first argument, defined in the same text, with the second
/// as its data.
fn tmpl(args: &[Value]) -> Result<Value, FuncError> {
    let which = arg_str(args, 0)?;
    let data = args.get(1).cloned().unwrap_or(Value::Nil);
    let (name, text) = CTX.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| (c.name.clone(), c.text.clone()))
            .unwrap_or_default()
    });
    let mut t = new_template(&name);
    t.parse(text).map_err(|e| generic(e.to_string()))?;
    if !t.tree_set.contains_key(&which) {
        return Err(generic(format!("html/template: {which:?} is undefined")));
    }
    t.name = which;
    let out = t
        .render(&Context::from(data))
        .map_err(|e| generic(e.to_string()))?;
    Ok(safe(out))
}

fn strip_port(args: &[Value]) -> Result<Value, FuncError> {
    let s = arg_str(args, 0)?;
    if let Some(rest) = s.strip_prefix('[') {
        // Go's net.SplitHostPort: "[host]:port", the port without colons
        return Ok(Value::String(match rest.split_once("]:") {
            Some((host, port)) if !port.contains(':') && !host.contains(['[', ']']) => {
                host.to_string()
            }
            _ => s,
        }));
    }
    match s.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => Ok(Value::String(host.to_string())),
        _ => Ok(Value::String(s)),
    }
}

fn sample_value(labels: &[(String, String)], v: f64) -> Value {
    let mut m = HashMap::new();
    m.insert("Labels".to_string(), map_value(labels));
    m.insert("Value".to_string(), float_value(v));
    Value::Object(m)
}

#[allow(unsafe_code)] // reads the closure `render` set for this call
fn query_fn(args: &[Value]) -> Result<Value, FuncError> {
    let q = arg_str(args, 0)?;
    let ptr = CTX.with(|s| s.borrow().as_ref().and_then(|c| c.query));
    let Some(ptr) = ptr else {
        return Err(generic("query function not available"));
    };
    // SAFETY: set by `render` for the duration of the render that calls this.
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

fn strvalue(args: &[Value]) -> Result<Value, FuncError> {
    label(&[
        Value::from("__value__"),
        args.first().cloned().unwrap_or(Value::Nil),
    ])
}

fn sort_by_label(args: &[Value]) -> Result<Value, FuncError> {
    let name = arg_str(args, 0)?;
    let Some(Value::Array(samples)) = args.get(1) else {
        return Err(generic("sortByLabel called without a query result"));
    };
    let key = |v: &Value| match v {
        Value::Object(m) => match m.get("Labels") {
            Some(Value::Map(l)) => match l.get(&name) {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            },
            _ => String::new(),
        },
        _ => String::new(),
    };
    let mut sorted = samples.clone();
    sorted.sort_by_key(|v| key(v));
    Ok(Value::Array(sorted))
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
