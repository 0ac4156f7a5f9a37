//! [`Records`]: the execution records, each in a slot of a chunk, found by id.

use concepts::{ExecutionId, kernel::FastHash};
use std::collections::HashMap;

/// Slots per chunk. A chunk is allocated when the one before it is full and never moves.
const CHUNK: usize = 1024;

/// The store's records. A new record takes a free slot (the last one a deletion freed, else
/// the next one of the last chunk) instead of an allocation of its own, one per execution,
/// which the allocator's per-thread cache cannot serve when hundreds are created at once; the
/// table of ids maps to slots, so growing it moves numbers, not records.
#[derive(Debug)]
pub(crate) struct Records<R> {
    slots: HashMap<ExecutionId, usize, FastHash>,
    /// Full but the last; a slot is `None` once its record was deleted, until it is reused.
    chunks: Vec<Vec<Option<R>>>,
    /// The slots deletions freed.
    free: Vec<usize>,
}

impl<R> Default for Records<R> {
    fn default() -> Self {
        Self {
            slots: HashMap::default(),
            chunks: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<R> Records<R> {
    /// The record of `execution_id`.
    pub(crate) fn get(&self, execution_id: &ExecutionId) -> Option<&R> {
        let slot = *self.slots.get(execution_id)?;
        self.chunks.get(slot / CHUNK)?.get(slot % CHUNK)?.as_ref()
    }

    /// The record of `execution_id`, to change.
    pub(crate) fn get_mut(&mut self, execution_id: &ExecutionId) -> Option<&mut R> {
        let slot = *self.slots.get(execution_id)?;
        (self.chunks.get_mut(slot / CHUNK)?.get_mut(slot % CHUNK)?).as_mut()
    }

    /// True when `execution_id` has a record.
    pub(crate) fn contains_key(&self, execution_id: &ExecutionId) -> bool {
        self.slots.contains_key(execution_id)
    }

    /// Room for `additional` more ids in the table, grown once for a batch.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.slots.reserve(additional);
    }

    /// Stores `record` as the record of `execution_id`, which has none.
    pub(crate) fn insert(&mut self, execution_id: ExecutionId, record: R) -> &mut R {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                if self.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
                    self.chunks.push(Vec::with_capacity(CHUNK));
                }
                let slot = (self.chunks.len() - 1) * CHUNK;
                let last = self
                    .chunks
                    .last_mut()
                    .expect("a chunk with room, pushed above");
                last.push(None);
                slot + last.len() - 1
            }
        };
        let previous = self.slots.insert(execution_id, slot);
        debug_assert!(previous.is_none(), "a second record of one execution");
        let place = &mut self.chunks[slot / CHUNK][slot % CHUNK];
        place.insert(record)
    }

    /// Takes the record of `execution_id` out; its slot is reused by a later insert.
    pub(crate) fn remove(&mut self, execution_id: &ExecutionId) -> Option<R> {
        let slot = self.slots.remove(execution_id)?;
        let record = self
            .chunks
            .get_mut(slot / CHUNK)?
            .get_mut(slot % CHUNK)?
            .take();
        self.free.push(slot);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::{CHUNK, Records};
    use chrono::DateTime;
    use concepts::ExecutionId;

    fn id(i: usize) -> ExecutionId {
        let secs = i64::try_from(i).unwrap();
        ExecutionId::generate_at(DateTime::from_timestamp(secs, 0).unwrap())
    }

    #[test]
    fn records_are_found_by_id_across_chunks_and_freed_slots_are_reused() {
        let mut records = Records::default();
        let ids: Vec<_> = (0..CHUNK + 10).map(id).collect();
        for (i, execution_id) in ids.iter().enumerate() {
            assert_eq!(*records.insert(execution_id.clone(), i), i);
        }
        for (i, execution_id) in ids.iter().enumerate() {
            assert_eq!(records.get(execution_id), Some(&i));
        }
        assert_eq!(records.remove(&ids[3]), Some(3));
        assert!(records.get(&ids[3]).is_none() && !records.contains_key(&ids[3]));
        assert_eq!(records.remove(&ids[3]), None);
        // The freed slot is taken by the next record, and no other record moved.
        let new = id(CHUNK + 10);
        records.insert(new.clone(), CHUNK + 10);
        assert_eq!(
            records.chunks.iter().map(Vec::len).sum::<usize>(),
            CHUNK + 10
        );
        for (i, execution_id) in ids.iter().enumerate().filter(|(i, _)| *i != 3) {
            assert_eq!(records.get_mut(execution_id), Some(&mut { i }));
        }
        assert_eq!(records.get(&new), Some(&(CHUNK + 10)));
    }
}
