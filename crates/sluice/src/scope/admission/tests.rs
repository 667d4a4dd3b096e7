//! Admission on tokio's paused clock: the cap, the queue's bound, priorities and the drain estimate.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{Admission, Refused};
use crate::config::Priority;
use crate::deadline::Deadline;

fn far() -> Deadline {
    Deadline::new(Instant::now(), Duration::from_secs(60)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn lowering_the_cap_takes_permits_back_as_they_return() {
    let admission = Admission::new(3, 10);
    let a = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    let b = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    admission.set_cap(1);
    // One idle permit left at once; two are out, one of which is owed.
    drop(a);
    assert_eq!(admission.available(), 0);
    drop(b);
    assert_eq!(admission.available(), 1);
    admission.set_cap(4);
    assert_eq!(admission.available(), 4);
    assert_eq!(admission.cap(), 4);
}

#[tokio::test(start_paused = true)]
async fn raising_the_cap_pays_the_debt_first() {
    let admission = Admission::new(2, 10);
    let a = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    let b = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    admission.set_cap(1);
    admission.set_cap(2);
    drop((a, b));
    assert_eq!(admission.available(), 2);
}

/// Issue 14: waiting callers are served highest priority first, in
/// order of arrival within a priority.
#[tokio::test(start_paused = true)]
async fn waiters_are_served_by_priority_then_arrival() {
    let admission = std::sync::Arc::new(Admission::new(1, 10));
    let held = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (name, priority) in [
        ("low1", Priority::Low),
        ("normal1", Priority::Normal),
        ("low2", Priority::Low),
        ("high1", Priority::High),
        ("normal2", Priority::Normal),
    ] {
        let (admission, order) = (admission.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = admission
                .admit_as(priority, &far(), (Instant::now(), Duration::MAX), |_| {
                    Duration::ZERO
                })
                .await
                .unwrap();
            order.lock().push(name);
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(permit);
        }));
        // Each arrives after the previous one queued.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(held);
    for task in tasks {
        task.await.unwrap();
    }
    // low1 arrived first and was already the head when the others came.
    assert_eq!(
        *order.lock(),
        ["low1", "high1", "normal1", "normal2", "low2"]
    );
}

/// Issue 18: an uncontended scope never makes its queue; the first
/// call that has to wait does, and it is served as before.
#[tokio::test(start_paused = true)]
async fn the_queue_is_made_by_the_first_call_that_waits() {
    let admission = std::sync::Arc::new(Admission::new(1, 1));
    let held = admission.try_admit().unwrap();
    assert!(admission.waiters.get().is_none());
    let waiting = {
        let admission = admission.clone();
        tokio::spawn(async move {
            admission
                .admit(&far(), Instant::now(), |_| Duration::ZERO)
                .await
                .is_ok()
        })
    };
    tokio::task::yield_now().await;
    assert!(admission.waiters.get().is_some());
    assert_eq!(admission.queued(), 1);
    drop(held);
    assert!(waiting.await.unwrap());
    assert!(admission.is_idle());
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_sheds_with_the_estimate() {
    let admission = Admission::new(1, 0);
    let _held = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    let refused = admission
        .admit(&far(), Instant::now(), |ahead| {
            Duration::from_secs(ahead as u64 + 1)
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        (Refused::Shed { running: 1 }, Duration::from_secs(1))
    );
}

/// Issue 14: a full queue of low-priority waiters does not shed a high
/// one; the newest low waiter is shed in its place, and the high call
/// is served first.
#[tokio::test(start_paused = true)]
async fn a_full_queue_sheds_its_least_urgent_waiter_for_a_more_urgent_call() {
    let admission = std::sync::Arc::new(Admission::new(1, 3));
    let held = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (name, priority) in [
        ("low1", Priority::Low),
        ("low2", Priority::Low),
        ("low3", Priority::Low),
        ("high", Priority::High),
    ] {
        let (admission, order) = (admission.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let result = admission
                .admit_as(priority, &far(), (Instant::now(), Duration::MAX), |ahead| {
                    Duration::from_secs(ahead as u64)
                })
                .await;
            let verdict = match &result {
                Ok(_) => "served".to_owned(),
                Err((refused, drain)) => format!("{refused:?} {drain:?}"),
            };
            order.lock().push(format!("{name} {verdict}"));
            drop(result);
        }));
        tokio::task::yield_now().await;
    }
    tokio::task::yield_now().await;
    // The queue (3) was full of lows: the newest low is shed, and the high waits
    // behind only low1, which already contends for the next permit.
    assert_eq!(order.lock().clone(), ["low3 Shed { running: 1 } 2s"]);
    drop(held);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        order.lock().clone(),
        [
            "low3 Shed { running: 1 } 2s",
            "low1 served",
            "high served",
            "low2 served"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_equal_priority_arrival_is_still_shed_by_a_full_queue() {
    let admission = std::sync::Arc::new(Admission::new(1, 1));
    let _held = admission
        .admit(&far(), Instant::now(), |_| Duration::ZERO)
        .await
        .unwrap();
    let waiting = {
        let admission = admission.clone();
        tokio::spawn(async move {
            admission
                .admit_as(
                    Priority::Low,
                    &far(),
                    (Instant::now(), Duration::MAX),
                    |_| Duration::ZERO,
                )
                .await
                .is_ok()
        })
    };
    tokio::task::yield_now().await;
    let refused = admission
        .admit_as(
            Priority::Low,
            &far(),
            (Instant::now(), Duration::MAX),
            |_| Duration::ZERO,
        )
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.0, Refused::Shed { running: 1 });
    waiting.abort();
}
