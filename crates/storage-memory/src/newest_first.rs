//! [`NewestFirst`]: the ordered set behind the store's time indexes, kept in reverse so that
//! the keys that come most often (the latest) are the cheapest to insert.

use std::{cmp::Reverse, collections::BTreeSet, ops::Bound};

/// An ordered set of keys that lead with a time, stored newest first: a B-tree compares a key
/// with each node's keys from the first, and times mostly grow, so in reverse the usual insert
/// costs one comparison per level, and the usual removal, the oldest key, pops the other end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewestFirst<K: Ord>(BTreeSet<Reverse<K>>);

impl<K: Ord> Default for NewestFirst<K> {
    fn default() -> Self {
        Self(BTreeSet::new())
    }
}

impl<K: Ord> NewestFirst<K> {
    /// Adds `key`; false when it was there already.
    pub(crate) fn insert(&mut self, key: K) -> bool {
        self.0.insert(Reverse(key))
    }

    /// Removes `key`, by popping it when it is the oldest (which compares nothing).
    pub(crate) fn remove(&mut self, key: K) {
        let key = Reverse(key);
        if self.0.last() == Some(&key) {
            self.0.pop_last();
        } else {
            self.0.remove(&key);
        }
    }

    /// Adds `key` (`add`) or removes it.
    pub(crate) fn set(&mut self, key: K, add: bool) {
        if add {
            self.insert(key);
        } else {
            self.remove(key);
        }
    }

    /// True when the set holds no key.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every key, oldest first.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = &K> {
        self.0.iter().rev().map(|key| &key.0)
    }

    /// Every key, newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|key| &key.0)
    }

    /// The keys after `key` (not `key` itself; every key when `None`), oldest first.
    pub(crate) fn after(&self, key: Option<K>) -> impl Iterator<Item = &K> {
        let newer = key.map_or(Bound::Unbounded, |key| Bound::Excluded(Reverse(key)));
        let keys = self.0.range((Bound::Unbounded, newer));
        keys.rev().map(|key| &key.0)
    }
}

#[cfg(test)]
mod tests;
