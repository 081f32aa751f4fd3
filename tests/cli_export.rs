//! `inferdb export parquet|csv`: the files read back with pyarrow and DuckDB equal the store.

mod cli_util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use inferdb::export::{export, ExportFormat, ExportOptions, Partition};
use inferdb::import::{import_files, ImportOptions};
use inferdb_storage::{Db, Labels, Matcher, Options};

// 2026-12-01T01:23:45.678Z
const START: i64 = 1_796_088_225_678;
const STEP: i64 = 15_000;

const PY: &str = r#"
import sys, json, struct, os
import pyarrow as pa, pyarrow.parquet as pq, duckdb

def bits(v):
    return struct.pack('<d', v).hex()

root = sys.argv[1]
files = []
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.parquet'):
            files.append(os.path.join(d, f))
out = {}
con = duckdb.connect()
for f in sorted(files):
    pf = pq.ParquetFile(f)
    md = pf.metadata
    t = pq.read_table(f)
    lab = [c for c in t.column_names if c not in ('timestamp', 'value', '__name__')]
    ts = t.column('timestamp').cast(pa.int64()).to_pylist()
    vs = t.column('value').to_pylist()
    names = t.column('__name__').to_pylist()
    lcols = {c: t.column(c).to_pylist() for c in lab}
    pa_rows = []
    for i in range(t.num_rows):
        ls = {c: lcols[c][i] for c in lab if lcols[c][i] is not None}
        pa_rows.append([names[i], ls, ts[i], bits(vs[i])])
    q = "SELECT epoch_ms(\"timestamp\") AS ts, value, * EXCLUDE (\"timestamp\", value) FROM read_parquet(?)"
    cur = con.execute(q, [f])
    cols = [d[0] for d in cur.description]
    duck_rows = []
    for r in cur.fetchall():
        row = dict(zip(cols, r))
        ls = {c: row[c] for c in lab if row[c] is not None}
        duck_rows.append([row['__name__'], ls, row['ts'], bits(row['value'])])
    cur = con.execute("SELECT * EXCLUDE (\"timestamp\", value), sum(value) AS s__, count(*) AS n__ FROM read_parquet(?) GROUP BY ALL", [f])
    cols = [d[0] for d in cur.description]
    sums = []
    for r in cur.fetchall():
        row = dict(zip(cols, r))
        ls = {c: row[c] for c in lab if row[c] is not None}
        sums.append([row['__name__'], ls, bits(row['s__']), row['n__']])
    out[os.path.relpath(f, root)] = {
        'rows': md.num_rows,
        'row_groups': md.num_row_groups,
        'compression': sorted({md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}),
        'schema': {fld.name: str(fld.type) for fld in t.schema},
        'pa_rows': pa_rows,
        'duck_rows': duck_rows,
        'duck_sums': sums,
    }
print(json.dumps(out))
"#;

/// Whether python3 has pyarrow and duckdb; without them the caller skips, except on CI
/// (which installs them in .ci/run), where a skip would hide the read-back check.
fn python_ok() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import pyarrow, duckdb"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true")
                && std::env::var("INFERDB_REQUIRE_CONFORMANCE").as_deref() != Ok("1"),
            "python3 lacks pyarrow or duckdb (pip install pyarrow duckdb), required here"
        );
        eprintln!("SKIPPED: python3 lacks pyarrow or duckdb (pip install pyarrow duckdb)");
    }
    ok
}

fn run_python(dir: &Path) -> serde_json::Value {
    let script = dir.join("check.py");
    std::fs::write(&script, PY).unwrap();
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A store: 5 h of imported blocks for 3 servers plus 40 newer scrapes in the head.
fn build_store(data: &Path, tmp: &Path) -> i64 {
    let (text, exp) = cli_util::gen(START, 1200, STEP, 3);
    let f = tmp.join("in.om");
    std::fs::write(&f, text).unwrap();
    import_files(
        data,
        &[f],
        &ImportOptions {
            progress: false,
            ..Default::default()
        },
    )
    .unwrap();
    let db = Db::open(data, Options::default()).unwrap();
    let mut a = db.appender();
    let mut last = 0;
    for (l, s) in &exp {
        for i in 0..40 {
            let t = START + (1200 + i) * STEP;
            let v = s[i as usize % s.len()].1 + 1.0;
            a.append(l, t, v).unwrap();
            last = t;
        }
    }
    a.commit().unwrap();
    db.close().unwrap();
    last
}

fn key(name: &str, labels: &serde_json::Value) -> Labels {
    let mut v = vec![("__name__".to_string(), name.to_string())];
    for (k, x) in labels.as_object().unwrap() {
        v.push((k.clone(), x.as_str().unwrap().to_string()));
    }
    Labels::from_pairs(v)
}

fn rows_by_series(rows: &serde_json::Value) -> BTreeMap<Labels, Vec<(i64, u64)>> {
    let mut out: BTreeMap<Labels, Vec<(i64, u64)>> = BTreeMap::new();
    for r in rows.as_array().unwrap() {
        let l = key(r[0].as_str().unwrap(), &r[1]);
        let t = r[2].as_i64().unwrap();
        let b = u64::from_le_bytes(hex(r[3].as_str().unwrap()).try_into().unwrap());
        out.entry(l).or_default().push((t, b));
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn all_series() -> Vec<Vec<Matcher>> {
    vec![inferdb_query::parser::parse_matchers("{__name__=~\".+\"}").unwrap()]
}

#[test]
fn parquet_reads_back_with_pyarrow_and_duckdb() {
    if !python_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let last = build_store(&data, tmp.path());
    // from inside the first block to inside the head, off the 15 s grid
    let (s, e) = (START + 3600 * 1000 + 7, last - 30_000 + 7);
    let db = cli_util::open_read_only(&data);
    let mut o = ExportOptions::new(all_series(), s, e, tmp.path().join("out"));
    o.row_group_rows = 1000;
    let st = export(&db, &o).unwrap();

    let want = cli_util::read_back(&data, s, e);
    let want_rows: usize = want.values().map(Vec::len).sum();
    assert_eq!(st.rows as usize, want_rows);
    assert_eq!(st.files.len(), 5);

    let got = run_python(tmp.path());
    let files = got.as_object().unwrap();
    assert_eq!(files.len(), 5, "{:?}", files.keys().collect::<Vec<_>>());
    let mut total = 0;
    let eng = inferdb_query::Engine::new(Default::default());
    for (name, f) in files {
        let rows = f["rows"].as_u64().unwrap() as usize;
        total += rows;
        assert_eq!(
            f["row_groups"].as_u64().unwrap() as usize,
            rows.div_ceil(1000),
            "{name}"
        );
        assert_eq!(f["compression"], serde_json::json!(["ZSTD"]), "{name}");
        let schema = f["schema"].as_object().unwrap();
        assert_eq!(schema["timestamp"], "timestamp[ms, tz=UTC]");
        assert_eq!(schema["value"], "double");
        for (col, ty) in schema {
            if col != "timestamp" && col != "value" {
                assert_eq!(
                    ty, "dictionary<values=string, indices=int32, ordered=0>",
                    "{col}"
                );
            }
        }
        let metric = name.trim_end_matches(".parquet");
        let want_m: BTreeMap<Labels, Vec<(i64, u64)>> = want
            .iter()
            .filter(|(l, _)| l.metric_name() == Some(metric))
            .map(|(l, v)| (l.clone(), v.iter().map(|x| (x.0, x.1.to_bits())).collect()))
            .collect();
        assert!(!want_m.is_empty());
        // label columns are the union of the metric's label names
        let mut names: Vec<String> = want_m
            .keys()
            .flat_map(|l| l.iter().map(|x| x.name.clone()))
            .filter(|n| n != "__name__")
            .collect();
        names.sort();
        names.dedup();
        let mut cols: Vec<String> = schema
            .keys()
            .filter(|c| !["timestamp", "value", "__name__"].contains(&c.as_str()))
            .cloned()
            .collect();
        cols.sort();
        assert_eq!(cols, names, "{name}");
        // every row, bit for bit, with the right labels (nulls dropped), in both readers
        assert_eq!(rows_by_series(&f["pa_rows"]), want_m, "pyarrow {name}");
        assert_eq!(rows_by_series(&f["duck_rows"]), want_m, "duckdb {name}");
        // per-series sums from DuckDB equal sum_over_time from the engine
        let q = format!("sum_over_time({{__name__=\"{metric}\"}}[{}ms])", e - s + 1);
        let r = eng.instant(&db, &q, e).unwrap();
        let inferdb_query::value::Value::Vector(vec) = r.value else {
            panic!("not a vector")
        };
        let promql: BTreeMap<Labels, f64> = vec
            .into_iter()
            .map(|x| (x.metric.with("__name__", metric), x.f))
            .collect();
        let sums = f["duck_sums"].as_array().unwrap();
        assert_eq!(sums.len(), promql.len(), "{name}");
        for x in sums {
            let l = key(x[0].as_str().unwrap(), &x[1]);
            let sum = f64::from_bits(u64::from_le_bytes(
                hex(x[2].as_str().unwrap()).try_into().unwrap(),
            ));
            let p = promql[&l];
            assert_eq!(x[3].as_u64().unwrap() as usize, want_m[&l].len());
            if metric == "test_special" {
                assert!(sum.is_nan() && p.is_nan(), "{l}: {sum} vs {p}");
            } else {
                assert_eq!(sum, p, "{l}");
            }
        }
    }
    assert_eq!(total, want_rows);
}

#[test]
fn single_file_day_partitions_and_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // 2026-11-30T22:00:00Z, 5 h: crosses midnight
    let start = 1_796_076_000_000 - 2 * 3600 * 1000 + 43 * 60 * 1000;
    let (text, exp) = cli_util::gen(start, 1200, STEP, 2);
    let f = tmp.path().join("in.om");
    std::fs::write(&f, text).unwrap();
    import_files(
        &data,
        &[f],
        &ImportOptions {
            progress: false,
            ..Default::default()
        },
    )
    .unwrap();
    let total: usize = exp.values().map(Vec::len).sum();
    let db = cli_util::open_read_only(&data);
    let (s, e) = (i64::MIN / 4, i64::MAX / 4);

    // day partitions
    let mut o = ExportOptions::new(all_series(), s, e, tmp.path().join("days"));
    o.partition = Partition::Day;
    let st = export(&db, &o).unwrap();
    assert_eq!(st.rows as usize, total);
    let mut dirs: Vec<String> = std::fs::read_dir(tmp.path().join("days"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    dirs.sort();
    assert_eq!(dirs, vec!["date=2026-11-30", "date=2026-12-01"]);
    assert_eq!(st.files.len(), 10);

    // one file with everything
    let one = tmp.path().join("all.parquet");
    let st = export(&db, &ExportOptions::new(all_series(), s, e, one.clone())).unwrap();
    assert_eq!(st.rows as usize, total);
    assert_eq!(st.files, vec![(one.clone(), total as u64)]);
    // exists: refused unless overwrite
    assert!(export(&db, &ExportOptions::new(all_series(), s, e, one.clone())).is_err());
    let mut o = ExportOptions::new(all_series(), s, e, one.clone());
    o.overwrite = true;
    assert!(export(&db, &o).is_ok());

    // csv of one metric, parsed back here
    let csvp = tmp.path().join("special.csv");
    let sel = vec![inferdb_query::parser::parse_matchers("test_special").unwrap()];
    let mut o = ExportOptions::new(sel, s, e, csvp.clone());
    o.format = ExportFormat::Csv;
    export(&db, &o).unwrap();
    let text = std::fs::read_to_string(&csvp).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("timestamp,value,__name__"));
    let want = &exp[&Labels::from_pairs([("__name__", "test_special")])];
    let got: Vec<(i64, f64)> = lines
        .map(|l| {
            let p: Vec<&str> = l.split(',').collect();
            assert_eq!(p[2], "test_special");
            let v = inferdb::model::exposition::parse_value(p[1]).unwrap();
            (p[0].parse().unwrap(), v)
        })
        .collect();
    assert!(cli_util::same_bits(&got, want));
    // and a CSV with label columns, nulls as empty fields
    let csvp = tmp.path().join("varied.csv");
    let sel = vec![inferdb_query::parser::parse_matchers("test_varied").unwrap()];
    let mut o = ExportOptions::new(sel, s, e, csvp.clone());
    o.format = ExportFormat::Csv;
    export(&db, &o).unwrap();
    let text = std::fs::read_to_string(&csvp).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("timestamp,value,__name__,gpu,instance,model_name")
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2 * 1200);
    assert!(rows[0].ends_with(",test_varied,GPU-0,10.0.0.0:8000,meta-llama/Llama-3.1-8B"));
    assert!(rows[1200].ends_with(",test_varied,,10.0.0.1:8000,meta-llama/Llama-3.1-8B"));
}

#[test]
fn export_memory_is_bounded_by_row_groups() {
    // Many small row groups: the sink flushes as it goes (checked through the file layout).
    if !python_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let last = build_store(&data, tmp.path());
    let db = cli_util::open_read_only(&data);
    let sel = vec![inferdb_query::parser::parse_matchers(
        "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"}",
    )
    .unwrap()];
    let out: PathBuf = tmp.path().join("out").join("lat.parquet");
    let mut o = ExportOptions::new(sel, START, last, out);
    o.row_group_rows = 333;
    let st = export(&db, &o).unwrap();
    assert_eq!(st.rows, 3 * 1240);
    let got = run_python(tmp.path());
    let f = &got["lat.parquet"];
    assert_eq!(f["rows"], 3 * 1240);
    assert_eq!(f["row_groups"], (3 * 1240usize).div_ceil(333));
    let by = rows_by_series(&f["pa_rows"]);
    assert_eq!(by.len(), 3);
    for l in by.keys() {
        assert_eq!(l.get("le"), Some("+Inf"));
    }
}
