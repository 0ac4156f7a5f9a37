//! The ordered set's two orders, its ranges and its removals, whether keys come in order (the
//! buffer), out of order (the B-tree) or both.

use super::*;

/// The keys oldest first, newest first reversed, and every key after each of `0..=10`,
/// checked against a plain ordered set.
fn assert_holds(set: &TimeIndex<i32>, expected: &BTreeSet<i32>) {
    assert_holds_after(set, expected, 0..=10);
}

/// As [`assert_holds`], with the keys after each of `froms`.
fn assert_holds_after(
    set: &TimeIndex<i32>,
    expected: &BTreeSet<i32>,
    froms: impl Iterator<Item = i32>,
) {
    let keys: Vec<i32> = expected.iter().copied().collect();
    assert_eq!(set.oldest_first().copied().collect::<Vec<_>>(), keys);
    let mut newest: Vec<i32> = set.newest_first().copied().collect();
    newest.reverse();
    assert_eq!(newest, keys);
    for from in froms {
        let after: Vec<i32> = keys.iter().copied().filter(|k| *k > from).collect();
        assert_eq!(set.after(Some(from)).copied().collect::<Vec<_>>(), after);
    }
    assert_eq!(set.is_empty(), keys.is_empty());
    let run: Vec<i32> = set.run.iter().map(|(key, _)| *key).collect();
    assert!(run.windows(2).all(|pair| pair[0] < pair[1]), "{run:?}");
    assert!(set.run.front().is_none_or(|(_, live)| *live));
    assert!(set.run.back().is_none_or(|(_, live)| *live));
    let dead = set.run.iter().filter(|(_, live)| !live).count();
    assert_eq!(set.dead, dead);
    assert!(set.rest.iter().all(|key| !run.contains(key)));
}

#[test]
fn keys_come_out_in_either_order_and_after_a_key() {
    let mut set = TimeIndex::default();
    for key in [3, 1, 4, 5, 9, 2, 6] {
        assert!(set.insert(key));
    }
    assert!(!set.insert(4), "a key is held once");
    assert!(!set.insert(1), "a key is held once");
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
    let mut set = TimeIndex::default();
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

#[test]
fn a_removed_key_of_the_buffer_can_come_back() {
    let mut set = TimeIndex::default();
    let mut expected = BTreeSet::new();
    for key in 1..=8 {
        set.insert(key);
        expected.insert(key);
    }
    set.remove(4);
    set.remove(4);
    expected.remove(&4);
    assert_holds(&set, &expected);
    assert!(set.insert(4));
    assert!(!set.insert(4));
    expected.insert(4);
    assert_holds(&set, &expected);
}

#[test]
fn every_mix_of_inserts_and_removals_holds_what_a_plain_set_holds() {
    let mut set = TimeIndex::default();
    let mut expected = BTreeSet::new();
    // A fixed pseudo-random walk: mostly growing keys, some older ones, removals of the
    // oldest and of any key, sometimes a key that is not there.
    let mut seed = 7u32;
    let (mut out_of_order, mut dead) = (false, false);
    for _ in 0..4000 {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let pick = (seed >> 16) % 10;
        let key = i32::try_from((seed >> 8) % 11).unwrap_or_default();
        match pick {
            0..=3 => {
                let newest = expected.last().map_or(0, |last| last + 1);
                let key = if pick == 0 { key } else { newest.min(10) };
                assert_eq!(set.insert(key), expected.insert(key));
            }
            4 | 5 => remove_from_both(&mut set, &mut expected, None),
            _ => remove_from_both(&mut set, &mut expected, Some(key)),
        }
        assert_holds(&set, &expected);
        out_of_order |= !set.rest.is_empty();
        dead |= set.dead > 0;
    }
    assert!(
        out_of_order && dead,
        "the walk reaches both parts and a dead key"
    );
}

/// Removes `key` from both sets, or their oldest key when `None` (the usual removal).
fn remove_from_both(set: &mut TimeIndex<i32>, expected: &mut BTreeSet<i32>, key: Option<i32>) {
    let Some(key) = key.or_else(|| expected.first().copied()) else {
        return;
    };
    set.remove(key);
    expected.remove(&key);
}

#[test]
fn many_keys_across_chunks_hold_what_a_plain_set_holds() {
    let mut set = TimeIndex::default();
    let mut expected = BTreeSet::new();
    let mut seed = 11u32;
    let mut newest = 0;
    for step in 0..3000 {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let pick = (seed >> 16) % 10;
        let key = i32::try_from((seed >> 4) % 600).unwrap_or_default();
        match pick {
            0..=4 => {
                newest += 1;
                assert_eq!(set.insert(newest), expected.insert(newest));
            }
            5 => _ = (set.insert(key), expected.insert(key)),
            6 | 7 => remove_from_both(&mut set, &mut expected, None),
            _ => remove_from_both(&mut set, &mut expected, Some(key)),
        }
        if step % 50 == 0 {
            assert_holds_after(&set, &expected, (0..1200).step_by(7));
        }
    }
    assert_holds_after(&set, &expected, (0..1200).step_by(7));
}

#[test]
fn a_chunked_queue_indexes_searches_and_keeps_as_a_deque_does() {
    let mut chunked = Chunked::default();
    let mut plain = std::collections::VecDeque::new();
    for value in 0..1300 {
        chunked.push_back(value);
        plain.push_back(value);
    }
    for _ in 0..600 {
        assert_eq!(chunked.pop_front(), plain.pop_front());
    }
    for _ in 0..530 {
        assert_eq!(chunked.pop_back(), plain.pop_back());
    }
    for value in 1300..2000 {
        chunked.push_back(value);
        plain.push_back(value);
    }
    let check = |chunked: &Chunked<i32>, plain: &std::collections::VecDeque<i32>| {
        assert_eq!(chunked.len(), plain.len());
        assert_eq!(chunked.front(), plain.front());
        assert_eq!(chunked.back(), plain.back());
        assert!(chunked.iter().eq(plain.iter()));
        assert!(chunked.iter().rev().eq(plain.iter().rev()));
        for at in 0..=plain.len() + 1 {
            assert_eq!(chunked.get(at), plain.get(at));
            assert!(chunked.iter_from(at).eq(plain.iter().skip(at)));
        }
        for bound in (0..2100).step_by(3) {
            let at = chunked.partition_point(|value| *value < bound);
            assert_eq!(at, plain.partition_point(|value| *value < bound));
        }
    };
    check(&chunked, &plain);
    chunked.retain(|value| value % 3 != 0);
    plain.retain(|value| value % 3 != 0);
    check(&chunked, &plain);
    while let Some(value) = plain.pop_back() {
        assert_eq!(chunked.pop_back(), Some(value));
    }
    assert!(chunked.is_empty());
    assert_eq!(chunked.pop_front(), None);
    for value in 0..600 {
        chunked.push_back(value);
        plain.push_back(value);
    }
    while let Some(value) = plain.pop_front() {
        assert_eq!(chunked.pop_front(), Some(value));
        if value % 97 == 0 {
            check(&chunked, &plain);
        }
    }
    assert!(chunked.is_empty() && chunked.back().is_none());
}

#[test]
fn a_few_far_keys_do_not_keep_the_usual_ones_out_of_the_buffer() {
    let mut set = TimeIndex::default();
    let mut expected = BTreeSet::new();
    for key in [1000, 1001, 1, 2] {
        set.insert(key);
        expected.insert(key);
    }
    for key in 3..300 {
        assert!(set.insert(key));
        expected.insert(key);
    }
    assert!(!set.insert(1000), "a key moved to the B-tree is held once");
    assert_eq!(set.rest.len(), 2, "only the far keys moved");
    assert_holds_after(&set, &expected, (0..1100).step_by(13));
    // Too many far keys to move: the usual ones go to the B-tree instead.
    for key in 2000..2100 {
        set.insert(key);
        expected.insert(key);
    }
    for key in 300..310 {
        assert!(set.insert(key));
        expected.insert(key);
    }
    assert_eq!(set.rest.len(), 12);
    assert_holds_after(&set, &expected, (0..2200).step_by(13));
}
