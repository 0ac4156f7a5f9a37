//! [`Chunked`]: a double-ended queue kept in fixed-size chunks, so that growing it never moves
//! what it holds.

use std::collections::VecDeque;

/// How many values a chunk holds (a power of two: an index's chunk is found by a shift).
const CHUNK: usize = 512;

/// A queue with a deque's ends and indexing whose values are kept in chunks of [`CHUNK`]: a
/// plain deque doubles by copying everything it holds (under the store's lock: megabytes for
/// an index of millions of keys) and keeps its largest room once drained, where this
/// allocates one more chunk and frees each chunk it empties. Every chunk is full but the last,
/// and the first, whose values popped from the front are `None` (chunks are not deques: a
/// push is then a vector's).
#[derive(Debug, Clone)]
pub(super) struct Chunked<T> {
    /// Each holds a value past `head`; kept once empty, when it is the only one.
    chunks: VecDeque<Vec<Option<T>>>,
    /// How many values of the first chunk were popped from its front.
    head: usize,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self {
            chunks: VecDeque::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&T> {
        self.chunks.front()?.get(self.head)?.as_ref()
    }

    #[inline]
    pub(super) fn back(&self) -> Option<&T> {
        self.chunks.back()?.last()?.as_ref()
    }

    #[inline]
    pub(super) fn get(&self, at: usize) -> Option<&T> {
        let (chunk, at) = self.locate(at)?;
        self.chunks.get(chunk)?.get(at)?.as_ref()
    }

    #[inline]
    pub(super) fn get_mut(&mut self, at: usize) -> Option<&mut T> {
        let (chunk, at) = self.locate(at)?;
        self.chunks.get_mut(chunk)?.get_mut(at)?.as_mut()
    }

    // Always: the usual insert is this push, and the compiler's own choice calls it.
    #[inline(always)]
    pub(super) fn push_back(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push(Some(value)),
            _ => {
                // The first chunk grows as a vector does, so that a small index (a function's
                // pending set, made and dropped as it fills and empties) takes little room.
                let room = if self.chunks.is_empty() { 0 } else { CHUNK };
                let mut chunk = Vec::with_capacity(room);
                chunk.push(Some(value));
                self.chunks.push_back(chunk);
            }
        }
        self.len += 1;
    }

    #[inline(always)]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        let first = self.chunks.front_mut()?;
        let value = first.get_mut(self.head)?.take();
        let drained = self.head + 1 == first.len();
        self.head += 1;
        self.len -= 1;
        if drained {
            self.head = 0;
            if self.chunks.len() > 1 {
                self.chunks.pop_front();
            } else {
                self.chunks.iter_mut().for_each(Vec::clear);
            }
        }
        value
    }

    pub(super) fn pop_back(&mut self) -> Option<T> {
        let last = self.chunks.back_mut()?;
        let value = last.pop()?;
        let drained = last.is_empty();
        self.len -= 1;
        if self.len == 0 {
            self.chunks.truncate(1);
            self.chunks.iter_mut().for_each(Vec::clear);
            self.head = 0;
        } else if drained {
            self.chunks.pop_back();
        }
        value
    }

    /// Every value, front to back.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.chunks.iter().flatten().flatten()
    }

    /// The values from index `at` on, front to back.
    pub(super) fn iter_from(&self, at: usize) -> impl Iterator<Item = &T> {
        let (chunk, at) = self.locate(at).unwrap_or((self.chunks.len(), 0));
        self.chunks.range(chunk..).flatten().skip(at).flatten()
    }

    /// The index of the first value for which `pred` is false, all those before it being
    /// true (the values are partitioned by it), by a binary search.
    pub(super) fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let (mut low, mut high) = (0, self.len);
        while low < high {
            let mid = low + (high - low) / 2;
            if self.get(mid).is_some_and(&mut pred) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low
    }

    /// Keeps the values for which `keep` is true, in full chunks again.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let old = std::mem::take(self);
        for value in old.chunks.into_iter().flatten().flatten() {
            if keep(&value) {
                self.push_back(value);
            }
        }
    }

    /// The chunk and the slot in it of the value at `at`, when there is one.
    #[inline]
    fn locate(&self, at: usize) -> Option<(usize, usize)> {
        if at >= self.len {
            return None;
        }
        let slot = self.head + at;
        Some((slot / CHUNK, slot % CHUNK))
    }
}
