//! Root-only: a prefix far larger than one gRPC reply (50 MiB: values near etcd's request
//! limit and thousands of small keys) read against a real etcd in a throwaway namespace —
//! whole, and consistent at one revision while another client keeps writing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni_etcd::etcd_client::{Txn, TxnOp};
use cni_etcd::{Access, Connection, EtcdError, EtcdOptions, Probe};
use cni_testkit::{etcd::Etcd, Sandbox};

const PREFIX: &str = "/paged/";
/// etcd's default request limit is 1.5 MiB: a value just below it.
const BIG_VALUE: usize = 1_500_000;
const BIG_KEYS: usize = 30;
const SMALL_KEYS: usize = 9_000;

type Model = BTreeMap<String, Vec<u8>>;

/// One write of the concurrent writer: its revision, the key, the value (`None`: deleted).
type Write = (i64, String, Option<Vec<u8>>);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(url: &str) -> Connection {
    let access = Access::new(&EtcdOptions {
        endpoints: vec![url.to_string()],
        ..EtcdOptions::default()
    })
    .unwrap();
    let probe = Probe {
        read: PREFIX.into(),
        write: None,
    };
    Connection::connect(&access, &probe).await.unwrap()
}

fn big_key(i: usize) -> String {
    format!("{PREFIX}big/{i:02}")
}

fn small_key(i: usize) -> String {
    format!("{PREFIX}small/{i:05}")
}

/// Writes the prefix (30 values of 1.5 MB, 9,000 of 1 KiB: 54 MB) and returns it.
async fn fill(conn: &mut Connection) -> Model {
    let mut model = Model::new();
    for i in 0..BIG_KEYS {
        let value: Vec<u8> = (0..BIG_VALUE).map(|b| (b * 31 + i) as u8).collect();
        conn.put(&big_key(i), &value, None).await.unwrap();
        model.insert(big_key(i), value);
    }
    let small: Vec<(String, Vec<u8>)> = (0..SMALL_KEYS)
        .map(|i| (small_key(i), format!("{i:01024}").into_bytes()))
        .collect();
    for chunk in small.chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None))
            .collect();
        conn.txn("fill", &Txn::new().and_then(ops)).await.unwrap();
    }
    model.extend(small);
    let bytes: usize = model.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(bytes > 50 * 1024 * 1024, "{bytes} bytes");
    model
}

/// The writes with a revision up to `revision`, applied to `model` in order.
fn at_revision(mut model: Model, writes: &[Write], revision: i64) -> Model {
    for (rev, key, value) in writes {
        if *rev > revision {
            continue;
        }
        match value {
            Some(v) => model.insert(key.clone(), v.clone()),
            None => model.remove(key),
        };
    }
    model
}

fn as_model(entries: Vec<cni_etcd::Entry>) -> Model {
    let n = entries.len();
    let keys_in_order = entries.windows(2).all(|w| w[0].key < w[1].key);
    assert!(keys_in_order, "entries in key order, each once");
    let model: Model = entries.into_iter().map(|e| (e.key, e.value)).collect();
    assert_eq!(model.len(), n);
    model
}

/// Keeps overwriting, adding and deleting keys of the prefix until `stop`, recording each
/// write's revision and when it was made.
async fn write_until(url: String, stop: Arc<AtomicBool>, log: Arc<Mutex<Vec<(Instant, Write)>>>) {
    let mut conn = connect(&url).await;
    let mut i = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let (key, value) = match i % 3 {
            0 => (
                small_key(i * 7 % SMALL_KEYS),
                Some(format!("w{i}").into_bytes()),
            ),
            1 => (format!("{PREFIX}new/{i:06}"), Some(vec![b'n'; 900])),
            _ => (small_key(i * 13 % SMALL_KEYS), None),
        };
        let revision = match &value {
            Some(v) => conn
                .call("put", async |c| c.put(key.as_str(), v.clone(), None).await)
                .await
                .unwrap()
                .header()
                .unwrap()
                .revision(),
            None => conn
                .call("delete", async |c| c.delete(key.as_str(), None).await)
                .await
                .unwrap()
                .header()
                .unwrap()
                .revision(),
        };
        log.lock()
            .unwrap()
            .push((Instant::now(), (revision, key, value)));
        i += 1;
    }
}

#[test]
fn a_prefix_of_50_mib_is_read_whole_at_one_revision_while_writes_go_on() {
    if !cni_testkit::is_root() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let sb = Sandbox::new().unwrap();
    let etcd = Etcd::start(sb.host(), sb.dir()).unwrap();
    let url = etcd.url.clone();
    cni_testkit::run_in(&sb.host().name, || {
        let rt = runtime();
        let mut conn = rt.block_on(connect(&url));
        let model = rt.block_on(fill(&mut conn));

        // Page by page, with writes between the pages: the later pages still show the
        // revision of the first one.
        let (paged, pages) = rt.block_on(pages_across_writes(&mut conn, &url, &model));
        assert_eq!(paged, model, "the pages are the prefix at their revision");
        eprintln!("{} pages: {pages:?}", pages.len());
        for (keys, bytes) in &pages {
            assert!(
                *keys == 1 || *bytes <= 2 * cni_etcd::PAGE_BYTES,
                "a page of {keys} keys and {bytes} bytes"
            );
        }

        // The whole prefix in one call, while another client writes all along.
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (url, stop, log) = (url.clone(), stop.clone(), log.clone());
            // A thread started here inherits this thread's network namespace.
            std::thread::spawn(move || runtime().block_on(write_until(url, stop, log)))
        };
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let listing = rt.block_on(conn.get_prefix(PREFIX)).unwrap();
        let ended = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        let log = log.lock().unwrap().clone();
        eprintln!(
            "read {} entries at revision {} in {:?} ({} writes meanwhile)",
            listing.entries.len(),
            listing.revision,
            ended - started,
            log.len()
        );
        let during_read_not_in_it = log
            .iter()
            .filter(|(at, (rev, _, _))| *at > started && *at < ended && *rev > listing.revision)
            .count();
        assert!(
            during_read_not_in_it > 0,
            "writes went on during the read and are not in it"
        );
        let writes: Vec<Write> = log.into_iter().map(|(_, w)| w).collect();
        let want = at_revision(model.clone(), &writes, listing.revision);

        // etcdctl (no reply limit) lists the same keys at that revision.
        let out = etcd
            .etcdctl(&[
                "get",
                "--prefix",
                "--keys-only",
                &format!("--rev={}", listing.revision),
                PREFIX,
            ])
            .unwrap();
        assert_eq!(out.status, 0, "{out:?}");
        let keys: Vec<&str> = out.stdout.lines().filter(|l| !l.is_empty()).collect();
        let want_keys: Vec<&str> = want.keys().map(String::as_str).collect();
        assert_eq!(keys, want_keys);
        assert_eq!(as_model(listing.entries), want);

        rt.block_on(compaction_during_a_read(&mut conn, &url));
        Ok(())
    })
    .unwrap();
}

/// Reads the first page, then changes keys before and after it on another client, then
/// reads the rest: the entries, and the keys and bytes of each page.
async fn pages_across_writes(
    conn: &mut Connection,
    url: &str,
    model: &Model,
) -> (Model, Vec<(usize, usize)>) {
    let size = |page: &[cni_etcd::Entry]| {
        let bytes = page.iter().map(|e| e.key.len() + e.value.len()).sum();
        (page.len(), bytes)
    };
    let mut other = connect(url).await;
    let mut pages = conn.pages(PREFIX);
    let mut entries = pages.next().await.unwrap().expect("a first page");
    let mut sizes = vec![size(&entries)];
    let revision = pages.revision();
    assert!(revision > 0);
    assert!(!model.contains_key(&format!("{PREFIX}zzz")));
    other.put(&big_key(0), b"changed", None).await.unwrap();
    other
        .put(&small_key(SMALL_KEYS - 1), b"changed", None)
        .await
        .unwrap();
    other.delete(&small_key(SMALL_KEYS - 2)).await.unwrap();
    other
        .put(&format!("{PREFIX}zzz"), b"new", None)
        .await
        .unwrap();
    while let Some(page) = pages.next().await.unwrap() {
        sizes.push(size(&page));
        entries.extend(page);
    }
    assert_eq!(pages.revision(), revision);
    assert!(pages.next().await.unwrap().is_none(), "done stays done");
    // Put the prefix back as it was for the next part.
    let big0 = model[&big_key(0)].clone();
    other.put(&big_key(0), &big0, None).await.unwrap();
    let last = &small_key(SMALL_KEYS - 1);
    other.put(last, &model[last], None).await.unwrap();
    let deleted = &small_key(SMALL_KEYS - 2);
    other.put(deleted, &model[deleted], None).await.unwrap();
    other.delete(&format!("{PREFIX}zzz")).await.unwrap();
    (as_model(entries), sizes)
}

/// A revision compacted away between two pages ends that read with `Compacted`; a new read
/// (as `get_prefix` starts one) works.
async fn compaction_during_a_read(conn: &mut Connection, url: &str) {
    let mut other = connect(url).await;
    let mut pages = conn.pages(PREFIX);
    pages.next().await.unwrap().expect("a first page");
    let revision = pages.revision();
    other
        .put(&format!("{PREFIX}zzz"), b"x", None)
        .await
        .unwrap();
    let now = other
        .get(&format!("{PREFIX}zzz"))
        .await
        .unwrap()
        .unwrap()
        .mod_revision;
    other
        .call("compact", async |c| c.compact(now, None).await)
        .await
        .unwrap();
    match pages.next().await {
        Err(EtcdError::Compacted { revision: r, .. }) => assert_eq!(r, revision),
        other => panic!(
            "expected Compacted, got {:?}",
            other.map(|p| p.map(|e| e.len()))
        ),
    }
    let listing = conn.get_prefix(PREFIX).await.unwrap();
    assert!(listing.revision >= now);
    assert!(listing.entries.iter().any(|e| e.key.ends_with("zzz")));
}
