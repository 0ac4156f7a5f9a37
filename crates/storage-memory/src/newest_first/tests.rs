//! The ordered set's two orders, its ranges and its removals.

use super::*;

#[test]
fn keys_come_out_in_either_order_and_after_a_key() {
    let mut set = NewestFirst::default();
    for key in [3, 1, 4, 5, 9, 2, 6] {
        assert!(set.insert(key));
    }
    assert!(!set.insert(4), "a key is held once");
    assert_eq!(set.oldest_first().next(), Some(&1));
    assert_eq!(
        set.oldest_first().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 9]
    );
    assert_eq!(
        set.newest_first().copied().collect::<Vec<_>>(),
        [9, 6, 5, 4, 3, 2, 1]
    );
    assert_eq!(set.after(Some(4)).copied().collect::<Vec<_>>(), [5, 6, 9]);
    assert_eq!(set.after(Some(7)).copied().collect::<Vec<_>>(), [9]);
    assert_eq!(set.after(Some(9)).count(), 0);
    assert!(set.after(None).eq(set.oldest_first()));
}

#[test]
fn removing_the_oldest_or_any_other_key_leaves_the_rest() {
    let mut set = NewestFirst::default();
    for key in 1..=5 {
        set.insert(key);
    }
    set.remove(1);
    set.remove(4);
    set.remove(7);
    assert_eq!(set.oldest_first().copied().collect::<Vec<_>>(), [2, 3, 5]);
    for key in [2, 3, 5] {
        set.remove(key);
    }
    assert!(set.is_empty());
}
