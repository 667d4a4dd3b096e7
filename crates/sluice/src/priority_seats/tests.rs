//! The seats' swaps and takes, on spends that count their give-backs.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A spend by name; giving it back counts.
struct Spend(&'static str, Arc<AtomicUsize>);

impl Seated for Spend {
    fn same_spend(&self, other: &Spend) -> bool {
        self.0 == other.0
    }

    /// A longer name spends more: "aa" covers "a".
    fn covers(&self, other: &Spend) -> bool {
        self.0.starts_with(other.0)
    }

    fn give_back(self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

fn start_of(sitting: &Sitting<'_, u64, Spend>) -> Option<u64> {
    sitting.look(|_| ()).map(|(start, ())| start)
}

/// A high caller holding 30 takes the earliest start among the calls it
/// outranks that spend the same (10); they move one start later each
/// (10 → 20, 20 → 30); a call that spends otherwise keeps its start.
#[test]
fn a_swap_moves_the_outranked_calls_of_the_same_spend_one_start_later() {
    let given = Arc::new(AtomicUsize::new(0));
    let spend = |name| Spend(name, given.clone());
    let seats = Seats::default();
    let first = seats.sit(Priority::Low, 10, spend("a"));
    let other = seats.sit(Priority::Normal, 15, spend("b"));
    let second = seats.sit(Priority::Low, 20, spend("a"));
    let mut mine = spend("a");
    assert_eq!(seats.swap(Priority::High, 30, &mut mine), 10);
    assert_eq!(start_of(&first), Some(20));
    assert_eq!(start_of(&second), Some(30));
    assert_eq!(start_of(&other), Some(15));
    // Nothing moves for an equal priority, nor for a start before theirs.
    assert_eq!(seats.swap(Priority::Low, 40, &mut spend("a")), 40);
    assert_eq!(seats.swap(Priority::High, 5, &mut spend("a")), 5);
    assert!(matches!(first.stand(19), Stood::Later(20)));
    assert!(matches!(first.stand(20), Stood::Ready(_)));
    assert_eq!(given.load(Ordering::SeqCst), 0);
    // A seat dropped with its spend still in it gives the spend back;
    // one that stood up with it does not.
    drop(first);
    drop(second);
    assert_eq!(given.load(Ordering::SeqCst), 1);
    seats.outrank(Priority::High, 16);
    assert!(matches!(other.stand(100), Stood::Taken));
    assert_eq!(given.load(Ordering::SeqCst), 2);
}

/// A high caller holding 30 for "a" takes what the earliest outranked
/// call that covers it holds ("aa" at 10, not "b" at 5, nor the normal
/// call's "aa" at 8, which ranks as high as a normal caller): that call
/// finds it taken, and the caller has its own spend to give back.
#[test]
fn a_covering_take_takes_the_earliest_outranked_spend_that_covers() {
    let given = Arc::new(AtomicUsize::new(0));
    let spend = |name| Spend(name, given.clone());
    let seats = Seats::default();
    let other = seats.sit(Priority::Low, 5, spend("b"));
    let normal = seats.sit(Priority::Normal, 8, spend("aa"));
    let first = seats.sit(Priority::Low, 10, spend("aa"));
    let later = seats.sit(Priority::Low, 20, spend("aaa"));
    let mut mine = spend("a");
    let (start, old) = seats
        .take_covering(Priority::Normal, 30, &mut mine)
        .expect("a covering seat");
    assert_eq!((start, mine.0, old.0), (10, "aa", "a"));
    assert!(matches!(first.stand(100), Stood::Taken));
    assert_eq!(start_of(&later), Some(20));
    assert_eq!(start_of(&normal), Some(8));
    assert_eq!(start_of(&other), Some(5));
    // Nothing earlier than its start covers it: it keeps what it holds.
    let mut mine = spend("a");
    assert!(seats.take_covering(Priority::High, 6, &mut mine).is_none());
    assert_eq!(mine.0, "a");
    // Nothing was given back: the taken spend is the caller's now.
    assert_eq!(given.load(Ordering::SeqCst), 0);
}

/// A re-plan hands the waiting calls their turns highest priority first,
/// in arrival order within a priority, each once the one before has
/// asked (dropped its turn) or left; a call whose start came gives its
/// turn up.
#[tokio::test(start_paused = true)]
async fn a_replan_hands_out_turns_in_priority_and_arrival_order() {
    use std::time::Duration;

    let given = Arc::new(AtomicUsize::new(0));
    let spend = |name| Spend(name, given.clone());
    let seats = Seats::default();
    let low = seats.sit(Priority::Low, 10, spend("a"));
    let first = seats.sit(Priority::Normal, 30, spend("a"));
    let second = seats.sit(Priority::Normal, 20, spend("a"));
    let ready = seats.sit(Priority::Normal, 5, spend("a"));
    seats.replan();
    let turn = |sitting: &Sitting<'_, u64, Spend>| match sitting.stand(6) {
        Stood::Replan(turn) => turn,
        _ => panic!("no turn"),
    };
    // Its start came: it stands up, its turn dropped with it.
    assert!(matches!(ready.stand(6), Stood::Ready(_)));
    let (mut first, second, low) = (turn(&first), turn(&second), turn(&low));
    // The first normal call's turn has come at once.
    first.come().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let waits = [("second", second), ("low", low)].map(|(name, mut turn)| {
        let order = order.clone();
        tokio::spawn(async move {
            turn.come().await;
            order.lock().push(name);
            drop(turn);
        })
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(order.lock().is_empty(), "they wait for the first to ask");
    drop(first);
    for wait in waits {
        wait.await.unwrap();
    }
    assert_eq!(*order.lock(), ["second", "low"]);
    assert_eq!(given.load(Ordering::SeqCst), 0);
}
