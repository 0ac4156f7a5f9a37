//! The sets of several functions: each keeps its own keys while another's is removed and its
//! place taken.

use super::*;
use crate::state::At;
use concepts::{ExecutionId, ExecutionIdTopLevel};

fn key(id: &ExecutionId) -> TimeKey {
    (At::new(chrono::DateTime::UNIX_EPOCH, id), id.clone())
}

fn keys(sets: &PendingSets, ffqn: &FunctionFqn) -> Vec<ExecutionId> {
    let set = sets.get(ffqn).into_iter().flat_map(TimeIndex::oldest_first);
    set.map(|(_, id)| id.clone()).collect()
}

fn remove(sets: &mut PendingSets, ffqn: &FunctionFqn, id: &ExecutionId) {
    sets.remove(ffqn, |k| k.1 == *id, || key(id));
}

#[test]
fn removing_a_function_s_last_key_leaves_the_others_sets_findable() {
    let ffqns: Vec<FunctionFqn> = ["ns:pkg/ifc.a", "ns:pkg/ifc.b", "ns:pkg/ifc.c"]
        .iter()
        .map(|name| name.parse().unwrap())
        .collect();
    let ids: Vec<ExecutionId> = (0..6)
        .map(|i| ExecutionId::from(ExecutionIdTopLevel::from_parts(1, i)))
        .collect();
    let mut sets = PendingSets::default();
    for (i, id) in ids.iter().enumerate() {
        sets.insert(&ffqns[i % 3], key(id));
    }
    // `a`'s set goes, and `c`'s takes its place.
    remove(&mut sets, &ffqns[0], &ids[0]);
    remove(&mut sets, &ffqns[0], &ids[3]);
    assert!(sets.get(&ffqns[0]).is_none());
    assert_eq!(keys(&sets, &ffqns[1]), [ids[1].clone(), ids[4].clone()]);
    assert_eq!(keys(&sets, &ffqns[2]), [ids[2].clone(), ids[5].clone()]);
    remove(&mut sets, &ffqns[2], &ids[2]);
    sets.insert(&ffqns[0], key(&ids[0]));
    assert_eq!(keys(&sets, &ffqns[0]), [ids[0].clone()]);
    assert_eq!(keys(&sets, &ffqns[2]), [ids[5].clone()]);
    assert_eq!(sets.iter().count(), 3);
    let mut other = PendingSets::default();
    for (ffqn, id) in [(1, 1), (0, 0), (2, 5), (1, 4)] {
        other.insert(&ffqns[ffqn], key(&ids[id]));
    }
    assert_eq!(sets, other, "equal whatever the order of their sets");
}
