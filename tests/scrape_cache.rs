//! The scrape loop's series cache against a model: pages whose series come and go, change
//! order, repeat, carry bad values or switch their family's type must store exactly what a
//! loop without history would store, plus staleness markers for the series that left. Also
//! a store that loses its series while the loop has released their labels.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use inferdb::config::Config;
use inferdb::model::exposition::{self, Entry, Format};
use inferdb::model::sink::{AppendStats, SinkError, SinkSample};
use inferdb::model::sink::{MemorySink, SampleSink};
use inferdb::scrape::target::{discover, Auth, ScrapeLoop, ScrapeOptions};
use inferdb_storage::db::{Db, Options};
use inferdb_storage::{is_stale_nan, Labels, Matcher};

fn make_loop(sink: Arc<dyn SampleSink>) -> ScrapeLoop {
    let cfg = Config::parse(
        "scrape_configs: [{job_name: j, static_configs: [{targets: ['127.0.0.1:9']}]}]",
    )
    .unwrap();
    let sc = &cfg.scrape_configs[0];
    let (targets, _) = discover(&cfg, sc);
    ScrapeLoop::new(
        targets[0].clone(),
        ScrapeOptions::from_config(&cfg, sc),
        inferdb::scrape::target::build_client(sc).unwrap(),
        Auth::None,
        sink,
    )
}

/// A deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The series lines a page may hold (series text, then the value is appended).
fn pool() -> Vec<String> {
    let mut v = vec![];
    for i in 0..12 {
        v.push(format!("a_total{{k=\"{i}\"}}"));
    }
    for le in ["0.1", "1", "+Inf"] {
        v.push(format!("h_bucket{{le=\"{le}\"}}"));
    }
    v.push("b".into());
    v.push("bb".into());
    v.push("c{x=\"q\\\"uote\",y=\"\"}".into());
    v
}

/// What one page must store: labels (as a fresh parse gives them, target labels added) to
/// value, in page order, first occurrence of a series only.
fn expected(page: &str) -> Vec<(Labels, f64)> {
    let mut seen = BTreeSet::new();
    let mut out = vec![];
    for e in exposition::parse(page, Format::PromText) {
        let Ok(Entry::Sample(s)) = e else { continue };
        let mut l = vec![("__name__".to_string(), s.name.to_string())];
        for (n, v) in s.labels.iter() {
            l.push((n.into_owned(), v.into_owned()));
        }
        l.push(("instance".into(), "127.0.0.1:9".into()));
        l.push(("job".into(), "j".into()));
        let l = Labels::from_pairs(l);
        if seen.insert(l.clone()) {
            out.push((l, s.value));
        }
    }
    out
}

#[test]
fn cached_pages_store_what_fresh_parses_give() {
    let pool = pool();
    let sink = Arc::new(MemorySink::new());
    let mut lp = make_loop(sink.clone());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut want: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
    let mut live: BTreeSet<Labels> = BTreeSet::new();
    for round in 0..300 {
        let t = 1_000_000 + round * 1000;
        // mostly the same page; sometimes series leave, come back, swap places or repeat
        let mut idx: Vec<usize> = (0..pool.len()).collect();
        match rng.below(6) {
            0 => idx.retain(|_| rng.below(4) != 0),
            1 => {
                let (a, b) = (rng.below(idx.len() as u64), rng.below(idx.len() as u64));
                idx.swap(a as usize, b as usize);
            }
            2 => {
                let d = idx[rng.below(idx.len() as u64) as usize];
                idx.insert(rng.below(idx.len() as u64) as usize, d);
            }
            _ => {}
        }
        let mut page = String::from("# TYPE h histogram\n");
        for &i in &idx {
            let v = if rng.below(40) == 0 {
                "bad".to_string()
            } else {
                format!("{}", rng.below(1000) as f64 / 8.0)
            };
            page.push_str(&format!("{} {v}\n", pool[i]));
        }
        let r = lp.scrape_page(&page, Format::PromText, t);
        assert!(r.up, "{:?}", r.error);
        let now = expected(&page);
        let now_set: BTreeSet<Labels> = now.iter().map(|(l, _)| l.clone()).collect();
        for (l, v) in &now {
            want.entry(l.clone()).or_default().push((t, *v));
        }
        for gone in live.difference(&now_set) {
            want.entry(gone.clone())
                .or_default()
                .push((t, f64::from_bits(0x7ff0_0000_0000_0002)));
        }
        live = now_set;
    }
    let got = sink.snapshot();
    for (l, w) in &want {
        let g = got
            .get(l)
            .unwrap_or_else(|| panic!("series {l} not stored"));
        assert_eq!(g.len(), w.len(), "{l}");
        for (a, b) in g.iter().zip(w) {
            assert_eq!(a.0, b.0, "{l}");
            if is_stale_nan(b.1) {
                assert!(is_stale_nan(a.1), "{l} at {}: {}", a.0, a.1);
            } else {
                assert_eq!(a.1.to_bits(), b.1.to_bits(), "{l} at {}", a.0);
            }
        }
    }
}

/// A store whose series vanish after every scrape (as after a head truncation): the loop,
/// which dropped its label copies, gives them back and nothing is lost.
struct Forgetful {
    db: Db,
    dir: tempfile::TempDir,
}

impl SampleSink for Forgetful {
    fn append_batch(&self, batch: &[SinkSample<'_>]) -> Result<AppendStats, SinkError> {
        for s in batch {
            if s.series.cached_ref().is_some() && s.t % 2000 == 0 {
                // a reference the store no longer knows
                s.series.set_cached_ref(u64::MAX >> 8);
            }
        }
        let _ = &self.dir;
        self.db.append_batch(batch)
    }
}

#[test]
fn released_labels_come_back_when_the_store_lost_the_series() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            background: false,
            ..Default::default()
        },
    )
    .unwrap();
    let sink = Arc::new(Forgetful { db, dir });
    let mut lp = make_loop(sink.clone());
    for i in 0..5i64 {
        let page = format!("x{{a=\"1\"}} {i}\ny {}\n", i * 2);
        let r = lp.scrape_page(&page, Format::PromText, 1000 + i * 1000);
        assert!(r.up);
        assert_eq!(r.rejected, 0, "scrape {i}");
    }
    let q = sink.db.querier(0, i64::MAX / 2).unwrap();
    let got = q.select(&[Matcher::equal("__name__", "x")]).unwrap();
    assert_eq!(got.len(), 1);
    let vals: Vec<(i64, f64)> = got[0].iter().collect();
    assert_eq!(
        vals,
        vec![
            (1000, 0.0),
            (2000, 1.0),
            (3000, 2.0),
            (4000, 3.0),
            (5000, 4.0)
        ]
    );
    assert_eq!(got.len(), 1, "no second series for x");
}

/// Metadata lines written as on the last page are skipped without lexing: the target's
/// metadata stays as it was (not rebuilt), a cached `TYPE` line still sets how the family's
/// new series are read (`le` normalised in a histogram), and a changed or missing line
/// rebuilds the metadata.
#[test]
fn metadata_lines_cached_and_rebuilt_when_changed() {
    let sink = Arc::new(MemorySink::new());
    let mut lp = make_loop(sink.clone());
    let state = lp.state();
    let head = "# HELP a_total Help one.\n# TYPE a_total counter\na_total 1\n# HELP h A histogram.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n";
    assert!(lp.scrape_page(head, Format::PromText, 1000).up);
    let m1 = state.lock().metadata.clone();
    assert_eq!(m1["a_total"].help, "Help one.");
    assert_eq!(m1["h"].kind, "histogram");
    // the same metadata lines, a new histogram series: read under the cached TYPE line
    let page = format!("{head}h_bucket{{le=\"5\"}} 2\n");
    let r = lp.scrape_page(&page, Format::PromText, 2000);
    assert!(r.up);
    assert_eq!(r.series_added, 1);
    assert!(Arc::ptr_eq(&m1, &state.lock().metadata), "rebuilt");
    let h5 = sink.find(&[("__name__", "h_bucket"), ("le", "5.0")]);
    assert_eq!(h5.len(), 1, "{:?}", sink.find(&[("__name__", "h_bucket")]));
    assert_eq!(h5[0].1, vec![(2000, 2.0)]);
    // a changed HELP text
    let page2 = page.replace("Help one.", "Help two.");
    assert!(lp.scrape_page(&page2, Format::PromText, 3000).up);
    assert_eq!(state.lock().metadata["a_total"].help, "Help two.");
    // a line gone
    let page3 = page2.replace("# HELP h A histogram.\n", "");
    assert!(lp.scrape_page(&page3, Format::PromText, 4000).up);
    let m = state.lock().metadata.clone();
    assert_eq!(m["h"].help, "");
    assert_eq!(m["h"].kind, "histogram");
    // the type changes: new series of the family are no longer normalised
    let page4 = page3.replace("# TYPE h histogram", "# TYPE h gauge") + "h_bucket{le=\"7\"} 3\n";
    assert!(lp.scrape_page(&page4, Format::PromText, 5000).up);
    assert_eq!(state.lock().metadata["h"].kind, "gauge");
    assert_eq!(sink.find(&[("__name__", "h_bucket"), ("le", "7")]).len(), 1);
}
