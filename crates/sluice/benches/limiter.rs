//! One reservation on each limiter cell next to governor's `check()`, in the
//! same group: uncontended, and two threads on one cell.
//!
//! `cargo bench -p sluice --bench limiter`
//!
//! Every variant reads the clock and takes the cell's lock, as a real call
//! does (governor's cell is a lock-free atomic; ours sit behind a mutex).
//! Limits are high enough that every decision is "go now".
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use sluice::clock::{Clock, TscClock};
use sluice::limiter::{LimiterCell, micros};

/// A cell behind a lock, with the clock read each time: what a scope does.
struct Cell {
    origin: Instant,
    cell: Mutex<LimiterCell>,
}

impl Cell {
    fn new(cell: LimiterCell) -> Self {
        Cell {
            origin: Instant::now(),
            cell: Mutex::new(cell),
        }
    }

    fn reserve(&self) -> bool {
        let now = micros(self.origin.elapsed());
        self.cell.lock().unwrap().reserve(now, now, 0).is_ok()
    }
}

/// What a scope does in a production build: the engine's clock
/// (`sluice::clock::TscClock`, microseconds from the engine's origin on the
/// counter itself) and the scope's `parking_lot` lock.
struct EngineCell {
    origin: u64,
    cell: parking_lot::Mutex<LimiterCell>,
}

impl EngineCell {
    fn new(cell: LimiterCell) -> Self {
        EngineCell {
            origin: TscClock::origin(),
            cell: parking_lot::Mutex::new(cell),
        }
    }

    fn reserve(&self) -> bool {
        let now = TscClock::micros_since(self.origin);
        self.cell.lock().reserve(now, now, 0).is_ok()
    }
}

fn sliding_cell() -> LimiterCell {
    // A million per millisecond: never full, the log stays short.
    LimiterCell::new("1000000/1ms".parse().unwrap(), None)
}

/// A bucket whose every decision is "go now", as governor's is at
/// `u32::MAX` per second. The cell counts whole microseconds, so its
/// fastest rate is one start a microsecond; a call takes a few dozen
/// nanoseconds, so the bucket falls behind by most of a microsecond a
/// call, and only a burst this deep (4,295 s of starts) keeps it from
/// saying "not yet" within a benchmark's seconds.
fn gcra_cell() -> LimiterCell {
    LimiterCell::new("1000000/1s".parse().unwrap(), NonZeroU32::new(u32::MAX))
}

fn sliding() -> Cell {
    Cell::new(sliding_cell())
}

fn gcra() -> Cell {
    Cell::new(gcra_cell())
}

fn governor_limiter() -> governor::DefaultDirectRateLimiter {
    RateLimiter::direct(Quota::per_second(NonZeroU32::MAX))
}

/// `threads` threads each doing `iters / threads` decisions on one shared cell.
fn contended(threads: u64, iters: u64, decide: Arc<dyn Fn() -> bool + Send + Sync>) -> Duration {
    let per_thread = iters.div_ceil(threads);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let decide = decide.clone();
            std::thread::spawn(move || {
                for _ in 0..per_thread {
                    black_box(decide());
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    start.elapsed()
}

fn reservation(c: &mut Criterion) {
    let mut group = c.benchmark_group("reservation/uncontended");
    let cell = sliding();
    group.bench_function("sluice sliding window", |b| {
        b.iter(|| black_box(cell.reserve()))
    });
    let cell = gcra();
    group.bench_function("sluice gcra", |b| b.iter(|| black_box(cell.reserve())));
    assert!(cell.reserve(), "the bench measured denials");
    let cell = EngineCell::new(gcra_cell());
    group.bench_function("sluice gcra, engine clock", |b| {
        b.iter(|| black_box(cell.reserve()))
    });
    assert!(cell.reserve(), "the bench measured denials");
    let cell = EngineCell::new(sliding_cell());
    group.bench_function("sluice sliding window, engine clock", |b| {
        b.iter(|| black_box(cell.reserve()))
    });
    let limiter = governor_limiter();
    group.bench_function("governor check", |b| {
        b.iter(|| black_box(limiter.check().is_ok()))
    });
    // The same clock as ours (std's monotonic Instant) instead of governor's TSC clock.
    let limiter = RateLimiter::direct_with_clock(
        Quota::per_second(NonZeroU32::MAX),
        governor::clock::MonotonicClock,
    );
    group.bench_function("governor check, std clock", |b| {
        b.iter(|| black_box(limiter.check().is_ok()))
    });
    group.finish();

    // Where the time goes: the parts of a reservation on their own.
    let mut group = c.benchmark_group("reservation/parts");
    let origin = Instant::now();
    group.bench_function("clock read", |b| {
        b.iter(|| black_box(micros(origin.elapsed())))
    });
    let tsc_origin = TscClock::origin();
    group.bench_function("engine clock read (TSC)", |b| {
        b.iter(|| black_box(TscClock::micros_since(tsc_origin)))
    });
    let tsc_instant = TscClock::now();
    group.bench_function("engine clock read (TSC), as an instant", |b| {
        b.iter(|| {
            black_box(micros(
                TscClock::now().saturating_duration_since(tsc_instant),
            ))
        })
    });
    let lock = Mutex::new(0u64);
    group.bench_function("uncontended lock", |b| {
        b.iter(|| *black_box(&lock).lock().unwrap() += 1)
    });
    let mut cell = LimiterCell::new("1000000/1ms".parse().unwrap(), None);
    let mut now = 0;
    group.bench_function("sliding window cell alone", |b| {
        b.iter(|| {
            now += 1;
            black_box(cell.reserve(now, now, 0).is_ok())
        })
    });
    let mut cell = gcra_cell();
    group.bench_function("gcra cell alone", |b| {
        b.iter(|| {
            now += 1;
            black_box(cell.reserve(now, now, 0).is_ok())
        })
    });
    group.finish();

    let mut group = c.benchmark_group("reservation/2 threads, one cell");
    let cell = Arc::new(sliding());
    group.bench_function("sluice sliding window", |b| {
        let cell = cell.clone();
        b.iter_custom(|iters| {
            let cell = cell.clone();
            contended(2, iters, Arc::new(move || cell.reserve()))
        })
    });
    let cell = Arc::new(gcra());
    group.bench_function("sluice gcra", |b| {
        let cell = cell.clone();
        b.iter_custom(|iters| {
            let cell = cell.clone();
            contended(2, iters, Arc::new(move || cell.reserve()))
        })
    });
    let limiter = Arc::new(governor_limiter());
    group.bench_function("governor check", |b| {
        let limiter = limiter.clone();
        b.iter_custom(|iters| {
            let limiter = limiter.clone();
            contended(2, iters, Arc::new(move || limiter.check().is_ok()))
        })
    });
    group.finish();
}

criterion_group!(benches, reservation);
criterion_main!(benches);
