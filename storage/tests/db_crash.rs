//! Crash test: a child process (this test binary re-executed) appends and commits as fast as
//! it can and records the last committed timestamp after each commit; the parent kills it
//! with SIGKILL at random moments, reopens the database and checks that every committed
//! sample is there, in order, with the right value, that nothing is corrupt and that appends
//! continue. The child also cuts, checkpoints and compacts blocks in the background (small
//! block duration), so kills land in those paths too. Each round writes the WAL with another
//! compression (none, snappy, zstd), so replays read segments and checkpoints of mixed
//! compression.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inferdb_storage::wal::Compression;
use inferdb_storage::{Db, Labels, Matcher, Options};

const ENV: &str = "INFERDB_CRASH_CHILD_DIR";
const ENV_COMPRESSION: &str = "INFERDB_CRASH_CHILD_WAL_COMPRESSION";
const SERIES: usize = 50;
const STEP: i64 = 1000;
const FSYNC: Duration = Duration::from_millis(50);

fn opts(background: bool) -> Options {
    Options {
        wal_fsync_interval: FSYNC,
        block_duration_ms: 60 * STEP,
        retention_ms: None,
        background,
        maintenance_interval: Duration::from_millis(20),
        wal_segment_bytes: 256 << 10,
        ..Options::default()
    }
}

fn labels(i: usize) -> Labels {
    Labels::from_pairs([
        ("__name__", "vllm:generation_tokens_total".to_string()),
        ("model_name", "m".to_string()),
        ("pod", format!("p{i}")),
    ])
}

fn value(i: usize, t: i64) -> f64 {
    (t / STEP) as f64 * 3.0 + i as f64 + 0.125
}

/// The newest timestamp of series 0, if any.
fn last_t(db: &Db) -> Option<i64> {
    let q = db.querier(i64::MIN, i64::MAX).unwrap();
    let s = q.select(&[Matcher::equal("pod", "p0")]).unwrap();
    s.first().and_then(|s| s.iter().last()).map(|x| x.0)
}

fn child(dir: &Path) {
    let compression = std::env::var(ENV_COMPRESSION)
        .ok()
        .and_then(|c| Compression::from_name(&c))
        .unwrap_or_default();
    let db = Db::open(
        dir.join("db"),
        Options {
            wal_compression: compression,
            ..opts(true)
        },
    )
    .unwrap();
    let mark = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("committed"))
        .unwrap();
    let mut t = last_t(&db).map_or(0, |t| t + STEP);
    let mut app = db.appender();
    let refs: Vec<_> = (0..SERIES)
        .map(|i| app.get_ref(&labels(i)).unwrap())
        .collect();
    app.commit().unwrap();
    loop {
        let mut app = db.appender();
        for (i, r) in refs.iter().enumerate() {
            app.append_ref(*r, t, value(i, t)).unwrap();
        }
        app.commit().unwrap();
        // only after commit returned
        mark.write_all_at(&t.to_le_bytes(), 0).unwrap();
        t += STEP;
    }
}

/// Entry point of the child process; does nothing in a normal test run.
#[test]
fn crash_child_entry() {
    if let Ok(d) = std::env::var(ENV) {
        child(Path::new(&d));
    }
}

fn read_mark(dir: &Path) -> Option<i64> {
    let mut b = Vec::new();
    std::fs::File::open(dir.join("committed"))
        .ok()?
        .read_to_end(&mut b)
        .ok()?;
    let a: [u8; 8] = b.get(..8)?.try_into().ok()?;
    Some(i64::from_le_bytes(a))
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sigkill_loses_nothing_committed() {
    let rounds: usize = std::env::var("INFERDB_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let exe = std::env::current_exe().unwrap();
    let mut prev_mark: Option<i64> = None;
    let mut torn = 0;
    for round in 0..rounds {
        let mut c = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV, dir)
            .env(ENV_COMPRESSION, ["snappy", "none", "zstd"][round % 3])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // wait until the child commits past the previous round, then a random while more
        let start = Instant::now();
        loop {
            if read_mark(dir) > prev_mark {
                break;
            }
            if let Ok(Some(st)) = c.try_wait() {
                panic!("child exited early: {st}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "child made no progress"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(rng.next() % 300));
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        let mark = read_mark(dir).unwrap();

        let db = Db::open(dir.join("db"), opts(false)).unwrap();
        let st = db.open_stats();
        assert!(
            st.bad_blocks.is_empty(),
            "round {round}: {:?}",
            st.bad_blocks
        );
        torn += st.wal.corruptions.len();
        for b in db.open_blocks() {
            let errs = b.check().unwrap();
            assert!(
                errs.is_empty(),
                "round {round}: block {:?}: {errs:?}",
                b.dir()
            );
        }
        let q = db.querier(i64::MIN, i64::MAX).unwrap();
        let all = q.select(&[]).unwrap();
        assert_eq!(all.len(), SERIES, "round {round}");
        let mut last = None;
        for s in &all {
            let i: usize = s.labels().get("pod").unwrap()[1..].parse().unwrap();
            let mut want = 0i64;
            let mut it = s.iter();
            for (t, v) in it.by_ref() {
                assert_eq!(t, want, "round {round}: series {i}: gap or duplicate");
                assert_eq!(
                    v.to_bits(),
                    value(i, t).to_bits(),
                    "round {round}: series {i} at {t}"
                );
                want += STEP;
            }
            assert!(it.err().is_none(), "round {round}: {:?}", it.err());
            // everything committed before the kill is there (SIGKILL keeps the page cache;
            // the fsync interval only matters for power loss)
            assert!(
                want - STEP >= mark,
                "round {round}: series {i} ends at {} but {mark} was committed",
                want - STEP
            );
            match last {
                None => last = Some(want - STEP),
                // commits are all-or-nothing: every series ends at the same time
                Some(l) => assert_eq!(l, want - STEP, "round {round}: partial commit"),
            }
        }
        drop(all);
        drop(q);
        let nblocks = db.blocks().len();
        // appends continue
        let t = last.unwrap() + STEP;
        let mut app = db.appender();
        for i in 0..SERIES {
            app.append(&labels(i), t, value(i, t)).unwrap();
        }
        app.commit().unwrap();
        db.close().unwrap();
        prev_mark = Some(t);
        eprintln!(
            "round {round}: committed up to {mark}, recovered {}, {} blocks, wal corruptions so far {torn}",
            last.unwrap(),
            nblocks
        );
    }
}
