//! [`TimeIndex`]: the ordered set behind the store's time indexes, where the usual insert
//! appends and the usual removal pops.

mod chunked;

use chunked::Chunked;
use std::{cmp::Ordering, collections::BTreeSet, ops::Bound};

/// At most how many newer keys at the end of the buffer move to the B-tree to let an older key
/// be appended after them.
const MOVED_OUT_OF_ORDER: usize = 64;

/// An ordered set of keys that lead with a time. Times mostly grow, so most keys come in
/// order (a new execution due now, a lease ending after the others, an execution finishing
/// last): those are appended to a sorted buffer (a deque in chunks), and the usual removal,
/// the oldest key (a lock takes the first due, runs mostly finish in lock order), pops its
/// other end; neither compares its way down a B-tree, shifts a node's keys or splits a node.
/// A key that comes out of order goes to a B-tree instead. A removal from the middle of the
/// buffer (found by a binary search) marks its key dead rather than shifting the keys after
/// it, until the dead are half the buffer, which is then compacted (amortized O(1) a
/// removal). A key older than only a few at the end of the buffer moves those to the B-tree
/// and is appended, so that one far time does not send every later key there. Reads merge
/// both parts, in either order.
#[derive(Debug, Clone)]
pub(crate) struct TimeIndex<K: Ord> {
    /// Ascending, each key with whether it is still in the set; the first and the last are.
    run: Chunked<(K, bool)>,
    /// How many keys of `run` are dead.
    dead: usize,
    /// The keys that were not the newest when they came (none of them is in `run`, dead or
    /// alive).
    rest: BTreeSet<K>,
}

impl<K: Ord> Default for TimeIndex<K> {
    fn default() -> Self {
        Self {
            run: Chunked::default(),
            dead: 0,
            rest: BTreeSet::new(),
        }
    }
}

/// Equal when they hold the same keys, however each has them split.
impl<K: Ord> PartialEq for TimeIndex<K> {
    fn eq(&self, other: &Self) -> bool {
        self.oldest_first().eq(other.oldest_first())
    }
}

impl<K: Ord> Eq for TimeIndex<K> {}

impl<K: Ord> TimeIndex<K> {
    /// Adds `key`; false when it was there already.
    pub(crate) fn insert(&mut self, key: K) -> bool {
        if self.run.back().is_none_or(|(last, _)| *last < key) {
            // A key of the B-tree may be newer still (one the next case moved there).
            if self.rest.last().is_some_and(|last| key <= *last) && self.rest.contains(&key) {
                return false;
            }
            self.run.push_back((key, true));
            return true;
        }
        self.insert_not_newest(key)
    }

    /// Adds `key`, older than the last of `run`; false when it was there already. Out of line:
    /// the usual insert, the newest key, stays small enough to inline its push.
    #[inline(never)]
    fn insert_not_newest(&mut self, key: K) -> bool {
        let at = self.run.partition_point(|(k, _)| *k < key);
        if let Some((k, live)) = self.run.get_mut(at)
            && *k == key
        {
            if *live {
                return false;
            }
            *live = true;
            self.dead -= 1;
            return true;
        }
        if self.rest.contains(&key) {
            return false;
        }
        // A few newer keys at the end of the buffer (a far timer among leases, an execution
        // scheduled for later among those due now) move to the B-tree, so that the usual keys,
        // this one and the next, are appended again. A key moves once: amortized, that is a
        // B-tree insert of its own.
        if self.run.len() - at <= MOVED_OUT_OF_ORDER {
            while self.run.len() > at {
                match self.run.pop_back() {
                    Some((newer, true)) => _ = self.rest.insert(newer),
                    Some((_, false)) => self.dead -= 1,
                    None => break,
                }
            }
            self.run.push_back((key, true));
            return true;
        }
        self.rest.insert(key)
    }

    /// Removes `key`, by popping it when it is the oldest (which compares one key).
    pub(crate) fn remove(&mut self, key: K) {
        if !self.pop_first_if(|first| *first == key) {
            self.remove_not_first(key);
        }
    }

    /// Removes the key that `key` builds and that `is` tells from any other: the oldest key
    /// in order, the usual one, is popped without building it.
    pub(crate) fn remove_with(&mut self, is: impl FnOnce(&K) -> bool, key: impl FnOnce() -> K) {
        if !self.pop_first_if(is) {
            self.remove_not_first(key());
        }
    }

    /// Pops the first key of `run` when `is` picks it.
    fn pop_first_if(&mut self, is: impl FnOnce(&K) -> bool) -> bool {
        if !self.run.front().is_some_and(|(first, _)| is(first)) {
            return false;
        }
        self.run.pop_front();
        // Without a dead key, the next one is alive: no call to look.
        if self.dead > 0 {
            self.trim();
        }
        true
    }

    /// Removes `key`, which is not the first of `run`.
    fn remove_not_first(&mut self, key: K) {
        let Some(at) = self.find(&key) else {
            self.rest.remove(&key);
            return;
        };
        let Some((_, live)) = self.run.get_mut(at) else {
            return;
        };
        if !*live {
            return;
        }
        *live = false;
        self.dead += 1;
        self.trim();
        if self.dead * 2 > self.run.len() {
            self.run.retain(|(_, live)| *live);
            self.dead = 0;
        }
    }

    /// True when the set holds no key.
    pub(crate) fn is_empty(&self) -> bool {
        self.run.is_empty() && self.rest.is_empty()
    }

    /// Every key, oldest first.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = &K> {
        merge(live(self.run.iter()), self.rest.iter(), Ordering::Less)
    }

    /// Every key, newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &K> {
        let run = live(self.run.iter().rev());
        merge(run, self.rest.iter().rev(), Ordering::Greater)
    }

    /// The keys after `key` (not `key` itself; every key when `None`), oldest first.
    pub(crate) fn after(&self, key: Option<K>) -> impl Iterator<Item = &K> {
        let (from, rest) = match &key {
            None => (0, self.rest.range(..)),
            Some(key) => (
                self.run.partition_point(|(k, _)| k <= key),
                (self.rest).range((Bound::Excluded(key), Bound::Unbounded)),
            ),
        };
        merge(live(self.run.iter_from(from)), rest, Ordering::Less)
    }

    /// Where `key` is in `run`, dead or alive.
    fn find(&self, key: &K) -> Option<usize> {
        let (first, last) = (self.run.front()?, self.run.back()?);
        if *key < first.0 || *key > last.0 {
            return None;
        }
        let at = self.run.partition_point(|(k, _)| k < key);
        (self.run.get(at)).and_then(|(k, _)| (k == key).then_some(at))
    }

    /// Pops the dead keys at either end of `run`, so that its ends are keys of the set.
    fn trim(&mut self) {
        while self.run.front().is_some_and(|(_, live)| !live) {
            self.run.pop_front();
            self.dead -= 1;
        }
        while self.run.back().is_some_and(|(_, live)| !live) {
            self.run.pop_back();
            self.dead -= 1;
        }
    }
}

/// The live keys of a stretch of the buffer.
fn live<'a, K: 'a>(run: impl Iterator<Item = &'a (K, bool)>) -> impl Iterator<Item = &'a K> {
    run.filter(|(_, live)| *live).map(|(key, _)| key)
}

/// The keys of two ordered iterators (ascending for `Less`, descending for `Greater`), which
/// hold no key in common, in that order.
fn merge<'a, K: Ord + 'a>(
    run: impl Iterator<Item = &'a K>,
    rest: impl Iterator<Item = &'a K>,
    first: Ordering,
) -> impl Iterator<Item = &'a K> {
    let (mut run, mut rest) = (run.peekable(), rest.peekable());
    std::iter::from_fn(move || {
        let from_run = match (run.peek(), rest.peek()) {
            (Some(a), Some(b)) => a.cmp(b) == first,
            (a, _) => a.is_some(),
        };
        if from_run { run.next() } else { rest.next() }
    })
}

#[cfg(test)]
mod tests;
