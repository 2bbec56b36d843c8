use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::registry::Registry;
use proptest::prelude::*;
use tokio::time::{Instant, advance};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn queue() -> WorkQueue<&'static str> {
    WorkQueue::new("test", QueueConfig::default(), None)
}

fn depth(high: usize, low: usize, scheduled: usize, processing: usize) -> Depth {
    Depth {
        high,
        low,
        scheduled,
        processing,
    }
}

/// Advances paused time and lets woken tasks run.
async fn tick(d: Duration) {
    advance(d).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn handle_is_clone_send_sync() {
    fn assert<T: Clone + Send + Sync + 'static>() {}
    assert::<WorkQueue<String>>();
    assert::<QueueMetrics>();
}

#[test]
fn default_config_matches_spec() {
    let c = QueueConfig::default();
    assert_eq!(c.base_backoff, ms(5));
    assert_eq!(c.max_backoff, Duration::from_secs(1000));
    assert_eq!(c.rate_per_sec, 10.0);
    assert_eq!(c.burst, 100);
    assert_eq!(c.low_per_minute, 300);
}

// ---------------------------------------------------------------- dedup

#[tokio::test(start_paused = true)]
async fn dedup_key_queued_twice_is_queued_once() {
    let q = queue();
    q.add("a", Priority::High);
    q.add("a", Priority::High);
    q.add("b", Priority::High);
    assert_eq!(q.depth(), depth(2, 0, 0, 0));
    assert_eq!(q.try_next().unwrap().key, "a");
    assert_eq!(q.try_next().unwrap().key, "b");
    assert!(q.try_next().is_none());
}

#[tokio::test(start_paused = true)]
async fn readd_keeps_higher_priority() {
    let q = queue();
    q.add("up", Priority::Low);
    q.add("up", Priority::High);
    q.add("down", Priority::High);
    q.add("down", Priority::Low);
    assert_eq!(q.depth(), depth(2, 0, 0, 0));
    let a = q.try_next().unwrap();
    let b = q.try_next().unwrap();
    assert_eq!((a.key, a.priority), ("up", Priority::High));
    assert_eq!((b.key, b.priority), ("down", Priority::High));
}

#[tokio::test(start_paused = true)]
async fn scheduled_key_readded_ready_becomes_ready_now() {
    let q = queue();
    q.add_after("a", Duration::from_secs(10));
    assert_eq!(q.depth(), depth(0, 0, 1, 0));
    assert!(q.try_next().is_none());
    q.add("a", Priority::High);
    assert_eq!(q.depth(), depth(1, 0, 0, 0));
    assert_eq!(q.try_next().unwrap().key, "a");
    // The stale schedule entry must not bring it back.
    tick(Duration::from_secs(11)).await;
    assert_eq!(q.depth(), depth(0, 0, 0, 1));
    assert!(q.try_next().is_none());
}

#[tokio::test(start_paused = true)]
async fn ready_key_add_after_stays_ready() {
    let q = queue();
    q.add("a", Priority::High);
    q.add_after("a", Duration::from_secs(10));
    q.add_rate_limited("a");
    q.add_soon("a");
    assert_eq!(q.depth(), depth(1, 0, 0, 0));
    assert_eq!(q.try_next().unwrap().key, "a");
    assert!(q.try_next().is_none());
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_earlier_time() {
    let q = queue();
    q.add_after("late-first", Duration::from_secs(10));
    q.add_after("late-first", Duration::from_secs(2));
    q.add_after("early-first", Duration::from_secs(2));
    q.add_after("early-first", Duration::from_secs(10));
    assert_eq!(q.depth(), depth(0, 0, 2, 0));
    tick(Duration::from_millis(1999)).await;
    assert!(q.try_next().is_none());
    tick(ms(1)).await;
    let mut got = vec![q.try_next().unwrap().key, q.try_next().unwrap().key];
    got.sort();
    assert_eq!(got, ["early-first", "late-first"]);
    tick(Duration::from_secs(20)).await;
    assert!(
        q.try_next().is_none(),
        "stale later schedules must not fire"
    );
    assert_eq!(q.depth(), depth(0, 0, 0, 2));
}

// ------------------------------------------------------------ processing

#[tokio::test(start_paused = true)]
async fn add_after_beyond_the_clock_waits_forever_without_panicking() {
    let q = queue();
    q.add_after("never", Duration::MAX);
    q.add_after("u64-ms", Duration::from_millis(u64::MAX));
    q.add("now", Priority::High);
    assert_eq!(q.depth(), depth(1, 0, 2, 0));
    assert_eq!(q.try_next().unwrap().key, "now");
    tick(Duration::from_secs(86400 * 365)).await;
    assert!(q.try_next().is_none());
}

#[tokio::test(start_paused = true)]
async fn processing_key_readded_waits_for_done_then_queued_once() {
    let q = queue();
    q.add("a", Priority::Low);
    let item = q.try_next().unwrap();
    assert_eq!(item.priority, Priority::Low);
    q.add("a", Priority::Low);
    q.add("a", Priority::High);
    q.add("a", Priority::High);
    assert_eq!(
        q.depth(),
        depth(0, 0, 0, 1),
        "dirty key counts as processing only"
    );
    assert!(q.try_next().is_none(), "never handed out twice at once");
    q.done(&"a");
    assert_eq!(q.depth(), depth(1, 0, 0, 0));
    let again = q.try_next().unwrap();
    assert_eq!(
        (again.key, again.priority),
        ("a", Priority::High),
        "priority it was re-added with"
    );
    assert!(q.try_next().is_none(), "queued once");
    q.done(&"a");
    assert_eq!(q.depth(), Depth::default());
}

#[tokio::test(start_paused = true)]
async fn processing_key_scheduled_again_keeps_its_time_after_done() {
    let q = queue();
    q.add("a", Priority::High);
    q.try_next().unwrap();
    q.add_after("a", Duration::from_secs(5));
    tick(Duration::from_secs(1)).await;
    q.done(&"a");
    assert_eq!(q.depth(), depth(0, 0, 1, 0));
    tick(Duration::from_millis(3999)).await;
    assert!(q.try_next().is_none());
    tick(ms(1)).await;
    assert_eq!(q.try_next().unwrap().key, "a");
}

#[tokio::test(start_paused = true)]
async fn done_of_unknown_key_is_ignored() {
    let q = queue();
    q.done(&"nope");
    q.add("a", Priority::High);
    q.done(&"a"); // queued, not processing: must stay queued
    assert_eq!(q.depth(), depth(1, 0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_two_workers_on_the_same_key() {
    use std::sync::atomic::AtomicUsize;
    let q: WorkQueue<u32> = WorkQueue::new("conc", QueueConfig::default(), None);
    let in_flight: Arc<Mutex<HashSet<u32>>> = Default::default();
    let handled = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (q, in_flight, handled) = (q.clone(), in_flight.clone(), handled.clone());
        workers.push(tokio::spawn(async move {
            while let Some(item) = q.next().await {
                assert!(
                    in_flight.lock().unwrap().insert(item.key),
                    "{} handed out twice",
                    item.key
                );
                tokio::task::yield_now().await;
                assert!(in_flight.lock().unwrap().remove(&item.key));
                handled.fetch_add(1, Ordering::Relaxed);
                q.done(&item.key);
            }
        }));
    }
    for i in 0..5000u32 {
        q.add(
            i % 7,
            if i % 3 == 0 {
                Priority::High
            } else {
                Priority::Low
            },
        );
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Wait for the high lane to empty (low items drain at 300/min; the
    // dedup keeps at most 7 keys queued).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while q.depth().high > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(ms(1)).await;
    }
    q.shutdown();
    for w in workers {
        w.await.unwrap();
    }
    assert!(handled.load(Ordering::Relaxed) > 0);
}

// ------------------------------------------------------------- priority

#[tokio::test(start_paused = true)]
async fn high_never_waits_behind_low() {
    let q: WorkQueue<String> = queue_with(QueueConfig::default());
    for i in 0..1000u32 {
        q.add(format!("low-{i}"), Priority::Low);
    }
    q.add("new".to_string(), Priority::High);
    let first = q.next().await.unwrap();
    assert_eq!(
        (first.key.as_str(), first.priority),
        ("new", Priority::High)
    );
    // Later high adds still jump the low backlog.
    q.done(&first.key);
    tick(Duration::from_secs(30)).await;
    q.add("newer".to_string(), Priority::High);
    let mut seen = 0;
    loop {
        let it = q.try_next().unwrap();
        seen += 1;
        if it.key == "newer" {
            break;
        }
        assert_eq!(it.priority, Priority::Low);
    }
    assert!(seen <= 2, "at most the low bucket's burst precedes it");
}

fn queue_with<K: super::Tenant + Clone + Eq + Hash + Debug + Send + Sync + 'static>(
    c: QueueConfig,
) -> WorkQueue<K> {
    WorkQueue::new("test", c, None)
}

#[tokio::test(start_paused = true)]
async fn low_items_drain_at_the_configured_rate() {
    // 300/min = one every 200 ms, burst 1.
    let q: WorkQueue<u32> = queue_with(QueueConfig::default());
    for i in 0..100 {
        q.add(i, Priority::Low);
    }
    assert_eq!(
        q.depth(),
        depth(1, 99, 0, 0),
        "the bucket starts with its burst"
    );
    let start = Instant::now();
    let mut got = Vec::new();
    for _ in 0..11 {
        let it = q.next().await.unwrap();
        assert_eq!(it.priority, Priority::Low);
        got.push(it.key);
        q.done(&it.key);
    }
    assert_eq!(got, (0..11).collect::<Vec<_>>(), "FIFO within the low lane");
    assert_eq!(
        Instant::now() - start,
        Duration::from_secs(2),
        "10 tokens at 5/s"
    );
    // Nothing more than the rate allows.
    tick(ms(199)).await;
    assert!(q.try_next().is_none());
    tick(ms(1)).await;
    assert_eq!(q.try_next().unwrap().key, 11);
}

#[tokio::test(start_paused = true)]
async fn idle_workers_take_low_items_beyond_the_rate() {
    // One low item a minute, but a single idle worker takes them all now.
    let q: WorkQueue<u32> = queue_with(QueueConfig {
        low_per_minute: 1,
        idle_low: 1,
        ..Default::default()
    });
    for i in 0..50 {
        q.add(i, Priority::Low);
    }
    let start = Instant::now();
    let mut got = Vec::new();
    while let Some(it) = q.try_next() {
        assert_eq!(it.priority, Priority::Low);
        got.push(it.key);
        q.done(&it.key);
    }
    assert_eq!(got, (0..50).collect::<Vec<_>>(), "FIFO within the low lane");
    assert_eq!(Instant::now(), start, "no waiting for tokens");
    assert_eq!(q.depth(), depth(0, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn idle_low_keeps_a_worker_for_high_work() {
    // Three workers, `idle_low` 2: the third never takes a low item beyond
    // the rate, so a high item that arrives finds it free.
    let q: WorkQueue<&str> = queue_with(QueueConfig {
        low_per_minute: 1,
        idle_low: 2,
        ..Default::default()
    });
    for k in ["a", "b", "c", "d"] {
        q.add(k, Priority::Low);
    }
    assert_eq!(q.try_next().unwrap().key, "a", "the bucket's one token");
    assert_eq!(q.try_next().unwrap().key, "b", "an idle worker");
    assert!(
        q.try_next().is_none(),
        "two processing: the last worker waits"
    );
    q.add("h", Priority::High);
    let h = q.try_next().unwrap();
    assert_eq!((h.key, h.priority), ("h", Priority::High));
    q.done(&"h");
    assert!(q.try_next().is_none(), "still two low items processing");
    q.done(&"b");
    assert_eq!(q.try_next().unwrap().key, "c");
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_wakes_a_waiting_worker_for_low_work() {
    let q: WorkQueue<&str> = queue_with(QueueConfig {
        low_per_minute: 1,
        idle_low: 1,
        ..Default::default()
    });
    q.add("a", Priority::Low);
    q.add("b", Priority::Low);
    let a = q.try_next().unwrap();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.next().await.map(|it| (it.key, Instant::now())) }
    });
    tick(ms(10)).await;
    assert!(!waiter.is_finished(), "one processing: no idle slot");
    let freed = Instant::now();
    q.done(&a.key);
    let (key, at) = waiter.await.unwrap().unwrap();
    assert_eq!(key, "b");
    assert_eq!(
        at, freed,
        "woken by done, not by the next token a minute later"
    );
}

#[tokio::test(start_paused = true)]
async fn low_readded_as_high_is_high_immediately() {
    let q: WorkQueue<u32> = queue_with(QueueConfig::default());
    for i in 0..10 {
        q.add(i, Priority::Low);
    }
    assert_eq!(q.try_next().unwrap().key, 0); // the burst token
    assert!(q.try_next().is_none());
    q.add(7, Priority::High);
    assert_eq!(q.depth(), depth(1, 8, 0, 1));
    let it = q.try_next().unwrap();
    assert_eq!((it.key, it.priority), (7, Priority::High));
    // Its stale low entry must not hand it out again nor cost a token.
    q.done(&7);
    tick(ms(200)).await;
    assert_eq!(q.try_next().unwrap().key, 1);
    for _ in 0..7 {
        tick(ms(200)).await;
        let k = q.try_next().unwrap().key;
        assert_ne!(k, 7);
    }
    tick(Duration::from_secs(10)).await;
    assert!(q.try_next().is_none());
    assert_eq!(q.depth(), depth(0, 0, 0, 9));
}

#[tokio::test(start_paused = true)]
async fn drained_low_item_readded_high_gets_high_priority() {
    let q = queue();
    q.add("a", Priority::Low);
    q.add("b", Priority::High);
    assert_eq!(q.depth(), depth(2, 0, 0, 0)); // "a" drained with the burst token
    q.add("a", Priority::High);
    assert_eq!(q.depth(), depth(2, 0, 0, 0), "no duplicate");
    assert_eq!(q.try_next().unwrap().key, "b");
    let a = q.try_next().unwrap();
    assert_eq!(
        (a.key, a.priority),
        ("a", Priority::High),
        "keeps its place, takes the priority"
    );
    assert!(q.try_next().is_none());
}

#[tokio::test(start_paused = true)]
async fn zero_low_rate_means_unlimited() {
    let c = QueueConfig {
        low_per_minute: 0,
        ..QueueConfig::default()
    };
    let q: WorkQueue<u32> = queue_with(c);
    for i in 0..50 {
        q.add(i, Priority::Low);
    }
    for i in 0..50 {
        assert_eq!(q.try_next().unwrap().key, i);
    }
}

// ------------------------------------------------------------ scheduled

#[tokio::test(start_paused = true)]
async fn next_wakes_for_scheduled_item_without_busy_looping() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(5));
    // Paused time auto-advances only when every task waits on a timer, so
    // this also shows next() sleeps rather than spins.
    let it = q.next().await.unwrap();
    assert_eq!(it.key, "a");
    assert_eq!(Instant::now() - start, Duration::from_secs(5));
    assert_eq!(
        it.queued_for,
        Duration::ZERO,
        "time scheduled is not queue time"
    );
    assert!(q.inner.wakeups.load(Ordering::Relaxed) <= 3);
}

#[tokio::test(start_paused = true)]
async fn waiting_next_sees_earlier_schedule_added_later() {
    let q = queue();
    q.add_after("late", Duration::from_secs(100));
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { (q.next().await.unwrap().key, Instant::now()) }
    });
    tokio::task::yield_now().await;
    let start = Instant::now();
    q.add_after("soon", Duration::from_secs(1));
    let (key, at) = waiter.await.unwrap();
    assert_eq!(key, "soon");
    assert_eq!(at - start, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn scheduled_items_join_their_priority_class() {
    let c = QueueConfig {
        low_per_minute: 1,
        ..QueueConfig::default()
    };
    let q = queue_with(c);
    q.add("low", Priority::Low);
    let it = q.try_next().unwrap(); // spends the low token
    assert_eq!(it.priority, Priority::Low);
    q.add_after("low", Duration::from_secs(5)); // keeps Low
    q.done(&"low");
    q.add_after("high", Duration::from_secs(5)); // unknown → High
    tick(Duration::from_secs(5)).await;
    assert_eq!(q.depth(), depth(1, 1, 0, 0));
    let h = q.try_next().unwrap();
    assert_eq!((h.key, h.priority), ("high", Priority::High));
    assert!(q.try_next().is_none(), "low waits for its drain token");
    tick(Duration::from_secs(60)).await;
    let l = q.try_next().unwrap();
    assert_eq!((l.key, l.priority), ("low", Priority::Low));
}

#[tokio::test(start_paused = true)]
async fn queued_for_measures_ready_time() {
    let q = queue();
    q.add("a", Priority::High);
    tick(ms(1500)).await;
    let it = q.try_next().unwrap();
    assert_eq!(it.queued_for, ms(1500));
}

// -------------------------------------------------------------- shutdown

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_waiter() {
    let q = queue();
    q.add_after("far", Duration::from_secs(3600));
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        })
        .collect();
    tokio::task::yield_now().await;
    q.shutdown();
    for w in waiters {
        assert!(w.await.unwrap().is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_does_not_drain_and_ignores_adds() {
    let q = queue();
    q.add("a", Priority::High);
    q.add("b", Priority::High);
    let a = q.try_next().unwrap();
    q.shutdown();
    assert!(q.is_shutdown());
    assert!(q.next().await.is_none());
    assert!(q.try_next().is_none());
    q.add("c", Priority::High);
    q.add_rate_limited("c");
    assert_eq!(q.depth(), depth(1, 0, 0, 1));
    q.done(&a.key);
    assert_eq!(q.depth(), depth(1, 0, 0, 0));
}

// --------------------------------------------------------------- back-off

/// Requeues `key` rate-limited and returns how long until it is ready.
async fn rate_limited_delay(q: &WorkQueue<&'static str>, key: &'static str) -> Duration {
    let start = Instant::now();
    q.add_rate_limited(key);
    let it = q.next().await.unwrap();
    q.done(&it.key);
    Instant::now() - start
}

#[tokio::test(start_paused = true)]
async fn backoff_grows_exponentially_to_the_cap_and_forget_resets() {
    let c = QueueConfig {
        max_backoff: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    let q = queue_with(c);
    let mut delays = Vec::new();
    for _ in 0..10 {
        delays.push(rate_limited_delay(&q, "a").await);
    }
    let expect: Vec<_> = [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]
        .iter()
        .map(|&n| ms(n))
        .collect();
    assert_eq!(delays, expect);
    assert_eq!(q.retries(&"a"), 10);
    assert_eq!(q.retries(&"b"), 0);
    q.forget(&"a");
    assert_eq!(q.retries(&"a"), 0);
    assert_eq!(rate_limited_delay(&q, "a").await, ms(5));
    // Huge failure counts do not overflow.
    q.inner
        .state
        .lock()
        .unwrap()
        .keys
        .get_mut(&"a")
        .unwrap()
        .failures = u32::MAX - 1;
    assert_eq!(rate_limited_delay(&q, "a").await, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn overall_token_bucket_limits_rate_limited_adds() {
    let q: WorkQueue<u32> = queue_with(QueueConfig::default()); // 10/s, burst 100
    for i in 0..102 {
        q.add_rate_limited(i);
    }
    assert_eq!(q.depth(), depth(0, 0, 102, 0));
    tick(ms(5)).await; // per-key back-off of the first 100
    for _ in 0..100 {
        q.try_next().unwrap();
    }
    assert!(q.try_next().is_none());
    tick(ms(94)).await;
    assert!(q.try_next().is_none());
    tick(ms(1)).await; // 100 ms: the 101st token
    assert_eq!(q.try_next().unwrap().key, 100);
    assert!(q.try_next().is_none());
    tick(ms(100)).await;
    assert_eq!(q.try_next().unwrap().key, 101);
}

#[tokio::test(start_paused = true)]
async fn rate_limited_keeps_priority() {
    let q = queue();
    q.add("a", Priority::Low);
    let it = q.try_next().unwrap();
    assert_eq!(it.priority, Priority::Low);
    q.add_rate_limited("a");
    q.done(&"a");
    tick(Duration::from_secs(1)).await;
    let again = q.try_next().unwrap();
    assert_eq!(again.priority, Priority::Low);
}

#[tokio::test(start_paused = true)]
async fn add_soon_is_short_fixed_and_does_not_grow_retries() {
    let q = queue();
    for _ in 0..8 {
        let start = Instant::now();
        q.add_soon("a");
        let it = q.next().await.unwrap();
        let waited = Instant::now() - start;
        assert!(waited >= ms(100) && waited <= ms(151), "{waited:?}");
        q.done(&it.key);
    }
    assert_eq!(q.retries(&"a"), 0);
    // And it leaves no state behind.
    assert!(q.inner.state.lock().unwrap().keys.is_empty());
}

#[tokio::test(start_paused = true)]
async fn key_state_is_released_when_idle() {
    let q = queue();
    q.add("a", Priority::High);
    q.add_rate_limited("b");
    let a = q.try_next().unwrap();
    q.done(&a.key);
    tick(Duration::from_secs(1)).await;
    let b = q.try_next().unwrap();
    q.done(&b.key);
    assert_eq!(
        q.inner.state.lock().unwrap().keys.len(),
        1,
        "b keeps its failure count"
    );
    q.forget(&"b");
    assert!(q.inner.state.lock().unwrap().keys.is_empty());
}

#[tokio::test(start_paused = true)]
async fn stale_entries_are_compacted() {
    let q: WorkQueue<u32> = queue_with(QueueConfig::default());
    // Each earlier add_after leaves a stale heap entry behind.
    for d in (1..20_000u64).rev() {
        q.add_after(1, ms(d + 1000));
    }
    let len = q.inner.state.lock().unwrap().scheduled.len();
    assert!(len < 2_100, "heap not compacted: {len}");
    assert_eq!(q.depth(), depth(0, 0, 1, 0));
}

// ---------------------------------------------------------------- metrics

fn encode(reg: &Registry) -> String {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, reg).unwrap();
    s
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn metrics_use_controller_runtime_names() {
    let mut reg = Registry::default();
    let m = QueueMetrics::new(&mut reg);
    let q: WorkQueue<&str> = WorkQueue::new("plug", QueueConfig::default(), Some(&m));
    let other: WorkQueue<&str> = WorkQueue::new("other", QueueConfig::default(), Some(&m.clone()));
    q.add("a", Priority::High);
    q.add("a", Priority::High); // dedup: one add
    q.add("b", Priority::Low);
    q.add("c", Priority::Low);
    q.add_after("d", Duration::from_secs(60));
    other.add("x", Priority::High);
    tick(ms(250)).await;
    let a = q.try_next().unwrap();
    let b = q.try_next().unwrap(); // drained low
    tick(Duration::from_secs(3)).await;
    q.done(&b.key);
    q.add_rate_limited("e");
    q.add_soon("f");
    tick(Duration::from_secs(2)).await;
    m.refresh_gauges();
    let t = encode(&reg);
    // Per lane: a, d, e, f high (a key the queue does not know is high);
    // b and c low. Summed over `priority`, client-go's counter.
    assert_eq!(
        sample(&t, r#"workqueue_adds_total{name="plug",priority="high"}"#),
        4.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_adds_total{name="plug",priority="low"}"#),
        2.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_adds_total{name="other",priority="high"}"#),
        1.0
    );
    assert_eq!(sample(&t, r#"workqueue_retries_total{name="plug"}"#), 2.0);
    // After refresh: c drained to high (tokens refilled), e and f due.
    assert_eq!(q.depth(), depth(3, 0, 1, 1));
    assert_eq!(
        sample(&t, r#"workqueue_depth{name="plug",priority="high"}"#),
        3.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_depth{name="plug",priority="low"}"#),
        0.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_depth{name="plug",priority="scheduled"}"#),
        1.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_depth{name="other",priority="high"}"#),
        1.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_queue_duration_seconds_count{name="plug"}"#),
        2.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_queue_duration_seconds_sum{name="plug"}"#),
        0.5
    );
    assert_eq!(
        sample(&t, r#"workqueue_work_duration_seconds_count{name="plug"}"#),
        1.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_work_duration_seconds_sum{name="plug"}"#),
        3.0
    );
    assert_eq!(
        sample(&t, r#"workqueue_unfinished_work_seconds{name="plug"}"#),
        5.0
    );
    assert_eq!(
        sample(
            &t,
            r#"workqueue_longest_running_processor_seconds{name="plug"}"#
        ),
        5.0
    );
    assert_eq!(
        sample(
            &t,
            r#"workqueue_queue_duration_seconds_bucket{le="0.1",name="plug"}"#
        ),
        0.0
    );
    assert_eq!(
        sample(
            &t,
            r#"workqueue_queue_duration_seconds_bucket{le="1.0",name="plug"}"#
        ),
        2.0
    );
    assert_eq!(
        sample(
            &t,
            r#"workqueue_work_duration_seconds_bucket{le="1e-8",name="plug"}"#
        ),
        0.0
    );
    assert_eq!(
        sample(
            &t,
            r#"workqueue_work_duration_seconds_bucket{le="1000.0",name="plug"}"#
        ),
        1.0
    );
    q.done(&a.key);
    m.refresh_gauges();
    let t = encode(&reg);
    assert_eq!(
        sample(&t, r#"workqueue_unfinished_work_seconds{name="plug"}"#),
        0.0
    );
    // Dropped queues are forgotten by refresh.
    drop(other);
    m.refresh_gauges();
    assert_eq!(m.queues.lock().unwrap().len(), 1);
}

// ------------------------------------------------------- property test

#[derive(Clone, Debug)]
enum Op {
    Add(u8, Priority),
    AddAfter(u8, u64),
    AddRateLimited(u8),
    AddSoon(u8),
    Next,
    Done(usize),
    Forget(u8),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    let prio = prop_oneof![Just(Priority::High), Just(Priority::Low)];
    prop_oneof![
        3 => (key.clone(), prio).prop_map(|(k, p)| Op::Add(k, p)),
        2 => (key.clone(), 0u64..500).prop_map(|(k, d)| Op::AddAfter(k, d)),
        2 => key.clone().prop_map(Op::AddRateLimited),
        1 => key.clone().prop_map(Op::AddSoon),
        4 => Just(Op::Next),
        3 => (0usize..8).prop_map(Op::Done),
        1 => key.prop_map(Op::Forget),
        2 => (0u64..300).prop_map(Op::Advance),
    ]
}

fn run_ops(ops: Vec<Op>, idle_low: usize) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let c = QueueConfig {
            base_backoff: ms(5),
            max_backoff: ms(200),
            rate_per_sec: 50.0,
            burst: 3,
            low_per_minute: 600,
            low_burst: 1,
            idle_low,
            retry_soon: ms(100),
        };
        let q: WorkQueue<u8> = WorkQueue::new("prop", c, None);
        // Keys added since they were last handed out.
        let mut outstanding: HashSet<u8> = HashSet::new();
        // Keys explicitly added ready-now as High since last handed out.
        let mut ready_high: HashSet<u8> = HashSet::new();
        let mut held: Vec<u8> = Vec::new();

        let check = |q: &WorkQueue<u8>,
                     outstanding: &HashSet<u8>,
                     ready_high: &HashSet<u8>,
                     held: &Vec<u8>| {
            let d = q.depth();
            prop_assert_eq!(d.processing, held.len());
            let waiting = outstanding.iter().filter(|k| !held.contains(k)).count();
            prop_assert_eq!(d.high + d.low + d.scheduled, waiting, "{:?}", d);
            if ready_high.iter().any(|k| !held.contains(k)) {
                prop_assert!(
                    d.high >= 1,
                    "a ready High key is not in the high lane: {:?}",
                    d
                );
            }
            Ok(())
        };

        for op in ops {
            match op {
                Op::Add(k, p) => {
                    q.add(k, p);
                    outstanding.insert(k);
                    if p == Priority::High {
                        ready_high.insert(k);
                    }
                }
                Op::AddAfter(k, d) => {
                    q.add_after(k, ms(d));
                    outstanding.insert(k);
                }
                Op::AddRateLimited(k) => {
                    q.add_rate_limited(k);
                    outstanding.insert(k);
                }
                Op::AddSoon(k) => {
                    q.add_soon(k);
                    outstanding.insert(k);
                }
                Op::Next => {
                    if let Some(item) = q.try_next() {
                        prop_assert!(
                            !held.contains(&item.key),
                            "{} handed out twice at once",
                            item.key
                        );
                        prop_assert!(
                            outstanding.remove(&item.key),
                            "{} handed out but not added",
                            item.key
                        );
                        if ready_high.remove(&item.key) {
                            prop_assert_eq!(item.priority, Priority::High);
                        }
                        held.push(item.key);
                    }
                }
                Op::Done(i) => {
                    if !held.is_empty() {
                        let k = held.swap_remove(i % held.len());
                        q.done(&k);
                    }
                }
                Op::Forget(k) => q.forget(&k),
                Op::Advance(d) => advance(ms(d)).await,
            }
            check(&q, &outstanding, &ready_high, &held)?;
        }

        // Liveness: finish everything, then every added key comes out.
        for k in held.drain(..) {
            q.done(&k);
        }
        for _ in 0..20 {
            advance(Duration::from_secs(1)).await;
            while let Some(item) = q.try_next() {
                prop_assert!(
                    outstanding.remove(&item.key),
                    "{} handed out but not added",
                    item.key
                );
                q.done(&item.key);
                q.forget(&item.key);
            }
            if outstanding.is_empty() {
                break;
            }
        }
        prop_assert!(
            outstanding.is_empty(),
            "never handed out: {:?}",
            outstanding
        );
        for k in 0..6 {
            q.forget(&k);
        }
        prop_assert_eq!(q.depth(), Depth::default());
        prop_assert!(
            q.inner.state.lock().unwrap().keys.is_empty(),
            "key state leaked"
        );
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn invariants_hold_for_random_operation_sequences(
        ops in proptest::collection::vec(op(), 0..80),
        idle_low in 0usize..4,
    ) {
        run_ops(ops, idle_low)?;
    }
}

#[test]
fn priority_orders_high_above_low() {
    assert!(Priority::High > Priority::Low);
    assert_eq!(Priority::Low.max(Priority::High), Priority::High);
    assert_eq!(Priority::default(), Priority::High);
}
