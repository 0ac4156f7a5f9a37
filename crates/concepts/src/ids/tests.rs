//! Tests of id parsing: round trips, typed errors for malformed input, no panics.

use super::*;
use proptest::prelude::*;

const ULID: &str = "01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0";

#[test]
fn prefixed_ids_round_trip() {
    let text = format!("E_{ULID}");
    assert_eq!(text.parse::<ExecutionId>().unwrap().to_string(), text);
    for prefix in ["Exr_", "Run_", "Delay_"] {
        let text = format!("{prefix}{ULID}");
        let round_trip = match prefix {
            "Exr_" => text.parse::<ExecutorId>().map(|id| id.to_string()),
            "Run_" => text.parse::<RunId>().map(|id| id.to_string()),
            _ => text.parse::<DelayId>().map(|id| id.to_string()),
        };
        assert_eq!(round_trip.unwrap(), text);
    }
}

#[test]
fn wrong_prefix_is_typed() {
    let err = format!("Run_{ULID}").parse::<ExecutorId>().unwrap_err();
    assert!(
        matches!(
            err,
            IdParseError::WrongPrefix {
                expected: "Exr_",
                ..
            }
        ),
        "{err}"
    );
    let err = ULID.parse::<ExecutionId>().unwrap_err();
    assert!(
        matches!(err, IdParseError::WrongPrefix { expected: "E_", .. }),
        "{err}"
    );
}

#[test]
fn bad_ulid_is_typed() {
    for bad in [
        "E_",
        "E_123",
        "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z",
        "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6ZU",
        "E_01jz8zk3f8g3n9q7v5w2x4y6z0",
        "E_81JZ8ZK3F8G3N9Q7V5W2X4Y6Z0",
        "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Zé",
    ] {
        let err = bad.parse::<ExecutionId>().unwrap_err();
        assert!(matches!(err, IdParseError::BadUlid { .. }), "{bad}: {err}");
    }
}

#[test]
fn derived_ids_parse_and_split() {
    let parent: ExecutionId = format!("E_{ULID}").parse().unwrap();
    let batch: JoinSetId = "n:batch".parse().unwrap();
    let child = parent.next_level(&batch, 1);
    assert_eq!(child.to_string(), format!("E_{ULID}.n:batch_1"));
    let grandchild = child.next_level(&"o:x".parse().unwrap(), 1);
    assert_eq!(grandchild.to_string(), format!("E_{ULID}.n:batch_1.o:x_1"));
    assert_eq!(
        grandchild.as_str().parse::<ExecutionId>().unwrap(),
        grandchild
    );
    assert_eq!(
        grandchild.split_to_parent(),
        Some((child.clone(), "o:x".parse().unwrap()))
    );
    assert_eq!(child.split_to_parent(), Some((parent.clone(), batch)));
    assert_eq!(parent.split_to_parent(), None);
    assert!(parent.is_top_level() && !child.is_top_level());
    assert_eq!(grandchild.top_level().to_string(), parent.to_string());
    // A join set name may itself contain underscores: the index follows the last one.
    let under: ExecutionId = format!("E_{ULID}.n:my_set_12").parse().unwrap();
    assert_eq!(under.split_to_parent().unwrap().1.name(), "my_set");
    // An empty join set name is allowed.
    assert!(format!("E_{ULID}.g:_3").parse::<ExecutionId>().is_ok());
}

#[test]
fn malformed_derived_ids_are_typed() {
    type Check = fn(&IdParseError) -> bool;
    let cases: &[(&str, Check)] = &[
        ("n:batch1", |e| {
            matches!(e, IdParseError::MissingDelimiter { delimiter: '_', .. })
        }),
        ("n:batch_", |e| matches!(e, IdParseError::BadIndex { .. })),
        ("n:batch_x", |e| matches!(e, IdParseError::BadIndex { .. })),
        ("n:batch_0", |e| matches!(e, IdParseError::BadIndex { .. })),
        ("n:batch_01", |e| matches!(e, IdParseError::BadIndex { .. })),
        ("n:batch_-1", |e| matches!(e, IdParseError::BadIndex { .. })),
        ("n:batch_99999999999999999999999", |e| {
            matches!(e, IdParseError::BadIndex { .. })
        }),
        ("x:batch_1", |e| {
            matches!(e, IdParseError::BadJoinSetKind { .. })
        }),
        ("nbatch_1", |e| {
            matches!(e, IdParseError::MissingDelimiter { delimiter: ':', .. })
        }),
        ("n:ba tch_1", |e| {
            matches!(e, IdParseError::IllegalCharacter { character: ' ', .. })
        }),
        ("n:ba:tch_1", |e| {
            matches!(e, IdParseError::IllegalCharacter { character: ':', .. })
        }),
        ("", |e| matches!(e, IdParseError::MissingDelimiter { .. })),
    ];
    for (suffix, expected) in cases {
        let text = format!("E_{ULID}.{suffix}");
        let err = text.parse::<ExecutionId>().unwrap_err();
        assert!(expected(&err), "{text}: unexpected {err:?}");
        assert!(
            err.to_string().contains(&text),
            "the message names the input: {err}"
        );
    }
}

#[test]
fn join_set_ids() {
    let id: JoinSetId = "g:a-b/c_d".parse().unwrap();
    assert_eq!((id.kind(), id.name()), (JoinSetKind::Generated, "a-b/c_d"));
    assert_eq!(id.to_string(), "g:a-b/c_d");
    assert!(matches!(
        "q:x".parse::<JoinSetId>(),
        Err(IdParseError::BadJoinSetKind { .. })
    ));
    assert!(matches!(
        "n".parse::<JoinSetId>(),
        Err(IdParseError::MissingDelimiter { .. })
    ));
    assert!(matches!(
        "n:a.b".parse::<JoinSetId>(),
        Err(IdParseError::IllegalCharacter { character: '.', .. })
    ));
    assert!(matches!(
        JoinSetId::new(JoinSetKind::Named, "é"),
        Err(IdParseError::IllegalCharacter { .. })
    ));
}

#[test]
fn ffqn_splits_at_the_last_dot() {
    let f: FunctionFqn = "ns:pkg/ifc@1.0.0.fn".parse().unwrap();
    assert_eq!(
        (f.ifc_name(), f.function_name()),
        ("ns:pkg/ifc@1.0.0", "fn")
    );
    assert_eq!(f.to_string(), "ns:pkg/ifc@1.0.0.fn");
    assert!(matches!(
        "nodot".parse::<FunctionFqn>(),
        Err(IdParseError::MissingDelimiter { .. })
    ));
    assert!(matches!(
        "ifc.".parse::<FunctionFqn>(),
        Err(IdParseError::Empty {
            part: "function name",
            ..
        })
    ));
    assert!(matches!(
        ".fn".parse::<FunctionFqn>(),
        Err(IdParseError::Empty {
            part: "interface name",
            ..
        })
    ));
    assert!(matches!(
        "if c.fn".parse::<FunctionFqn>(),
        Err(IdParseError::IllegalCharacter { .. })
    ));
    assert!(matches!(
        FunctionFqn::new("ifc", "a.b"),
        Err(IdParseError::IllegalCharacter { character: '.', .. })
    ));
}

#[test]
fn ffqns_order_by_interface_then_function_and_equal_by_text() {
    let parse = |text: &str| text.parse::<FunctionFqn>().unwrap();
    // By the whole text `a-x.c` would come first (`-` sorts before `.`).
    let (short_ifc, long_ifc) = (parse("a.b"), parse("a-x.c"));
    assert!(short_ifc < long_ifc, "the interfaces compare first");
    assert!(parse("a.b") < parse("a.c"));
    let built = FunctionFqn::new("ns:pkg/ifc", "fn").unwrap();
    assert_eq!(
        built,
        parse("ns:pkg/ifc.fn"),
        "equal texts, not one shared allocation"
    );
    assert_eq!(built.as_str(), "ns:pkg/ifc.fn");
    assert_eq!(serde_json::to_string(&built).unwrap(), r#""ns:pkg/ifc.fn""#);
    let state = std::hash::RandomState::new();
    assert_eq!(
        std::hash::BuildHasher::hash_one(&state, &built),
        std::hash::BuildHasher::hash_one(&state, parse("ns:pkg/ifc.fn")),
        "equal names hash alike"
    );
}

#[test]
fn component_ids() {
    let c: ComponentId = "activity:payments".parse().unwrap();
    assert_eq!((c.component_type(), c.name()), ("activity", "payments"));
    assert!(matches!(
        "activity".parse::<ComponentId>(),
        Err(IdParseError::MissingDelimiter { .. })
    ));
    assert!(matches!(
        ":x".parse::<ComponentId>(),
        Err(IdParseError::Empty { .. })
    ));
    assert!(matches!(
        "a:".parse::<ComponentId>(),
        Err(IdParseError::Empty { .. })
    ));
    assert!(matches!(
        "a b:x".parse::<ComponentId>(),
        Err(IdParseError::IllegalCharacter { .. })
    ));
}

#[test]
fn ids_serialize_as_text() {
    let id: ExecutionId = format!("E_{ULID}.n:b_2").parse().unwrap();
    let json = serde_json::to_string(&id).unwrap();
    assert_eq!(json, format!("\"E_{ULID}.n:b_2\""));
    assert_eq!(serde_json::from_str::<ExecutionId>(&json).unwrap(), id);
    assert!(serde_json::from_str::<ExecutionId>("\"E_bad\"").is_err());
}

#[test]
fn two_part_names_serialize_as_their_text_short_and_long() {
    let long = "f".repeat(200);
    for text in ["pkg:ifc/x.fn", &format!("pkg:ifc.{long}")] {
        let ffqn: FunctionFqn = text.parse().unwrap();
        let json = serde_json::to_string(&ffqn).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<FunctionFqn>(&json).unwrap(), ffqn);
    }
    for text in ["workflow:default", &format!("activity:{long}")] {
        let component: ComponentId = text.parse().unwrap();
        let json = serde_json::to_string(&component).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(
            serde_json::from_str::<ComponentId>(&json).unwrap(),
            component
        );
    }
    for text in ["o:1-charge", "n:", &format!("g:{long}")] {
        let join_set: JoinSetId = text.parse().unwrap();
        let json = serde_json::to_string(&join_set).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<JoinSetId>(&json).unwrap(), join_set);
    }
}

#[test]
fn execution_ids_order_by_text() {
    let parent: ExecutionId = format!("E_{ULID}").parse().unwrap();
    let j: JoinSetId = "n:b".parse().unwrap();
    let (c2, c10) = (parent.next_level(&j, 2), parent.next_level(&j, 10));
    assert!(
        parent < c10 && c10 < c2,
        "byte order of the text form, like SQL ORDER BY"
    );
}

#[test]
fn ids_of_one_millisecond_ascend() {
    let at = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let ids: Vec<ExecutionId> = (0..100).map(|_| ExecutionId::generate_at(at)).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
    let millis = |id: &ExecutionId| id.top_level().ulid().timestamp_ms();
    assert!(ids.iter().all(|id| millis(id) == 1_700_000_000_123));
    let next = ExecutionId::generate_at(at + chrono::TimeDelta::milliseconds(1));
    assert_eq!(millis(&next), 1_700_000_000_124);
    let before_epoch = DateTime::from_timestamp_millis(-5).unwrap();
    assert_eq!(millis(&ExecutionId::generate_at(before_epoch)), 0);
}

#[test]
fn equal_ids_hash_alike() {
    use std::hash::BuildHasher;
    let hasher = std::hash::RandomState::new();
    for text in [format!("E_{ULID}"), format!("E_{ULID}.n:b_2")] {
        // Two allocations of one text.
        let (a, b): (ExecutionId, ExecutionId) = (text.parse().unwrap(), text.parse().unwrap());
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b), "{text}");
    }
}

proptest! {
    #[test]
    fn ids_of_one_millisecond_compare_as_their_text(
        ms in 0u64..(1 << 48),
        randoms in prop::array::uniform2(any::<u128>()),
    ) {
        let [a, b] = randoms.map(|random| ExecutionId::from(ExecutionIdTopLevel::from_parts(ms, random)));
        prop_assert_eq!(a.cmp(&b), a.as_str().cmp(b.as_str()));
        let child = b.next_level(&"n:b".parse().unwrap(), 1);
        prop_assert_eq!(a.cmp(&child), a.as_str().cmp(child.as_str()));
    }

    #[test]
    fn parsers_never_panic(s in "\\PC{0,40}") {
        let _ = s.parse::<ExecutionId>();
        let _ = s.parse::<JoinSetId>();
        let _ = s.parse::<FunctionFqn>();
        let _ = s.parse::<ComponentId>();
        let _ = s.parse::<RunId>();
    }

    #[test]
    fn near_valid_ids_never_panic(suffix in "[a-z0-9:_./ -]{0,20}") {
        let _ = format!("E_{ULID}.{suffix}").parse::<ExecutionId>();
        let _ = format!("E_{ULID}{suffix}").parse::<ExecutionId>();
    }

    #[test]
    fn execution_ids_compare_as_their_text(
        ms in prop::sample::select(vec![0u64, 1, 1 << 20, (1 << 48) - 1]),
        randoms in prop::array::uniform2(prop::sample::select(vec![0u128, 1, 1 << 60, 1 << 79, u128::MAX >> 48])),
        children in prop::array::uniform2(prop::option::of((1u64..12, "[ab]{0,2}"))),
    ) {
        let ids: Vec<ExecutionId> = randoms.iter().zip(&children).map(|(random, child)| {
            let top = ExecutionId::from(ExecutionIdTopLevel::from_parts(ms, *random));
            prop_assert_eq!(top.as_str(), format!("E_{}", Ulid::from_parts(ms, *random)));
            Ok(match child {
                Some((idx, name)) => top.next_level(&JoinSetId::new(JoinSetKind::Named, name.as_str()).unwrap(), *idx),
                None => top,
            })
        }).collect::<Result<_, _>>()?;
        let (a, b) = (&ids[0], &ids[1]);
        prop_assert_eq!(a.cmp(b), a.as_str().cmp(b.as_str()));
        prop_assert_eq!(a == b, a.as_str() == b.as_str());
        prop_assert_eq!(a.cmp(&a.clone()), std::cmp::Ordering::Equal);
    }

    #[test]
    fn ids_are_written_as_the_ulid_crate_writes_ulids(value in any::<u128>(), top_bits in 0u32..128) {
        // Every bit, and values with leading zeros (the time of the early ids, a small
        // random part).
        let ulid = Ulid(value >> top_bits);
        prop_assert_eq!(ExecutionId::from(ExecutionIdTopLevel(ulid)).to_string(), format!("E_{ulid}"));
        prop_assert_eq!(DelayId(ulid).to_string(), format!("Delay_{ulid}"));
        prop_assert_eq!(RunId(ulid).to_string(), format!("Run_{ulid}"));
    }

    #[test]
    fn generated_ids_round_trip(ms in 0u64..(1 << 48), random in any::<u128>(), idx in 1u64..u64::MAX, name in "[a-zA-Z0-9_/-]{0,8}") {
        let top = ExecutionId::from(ExecutionIdTopLevel::from_parts(ms, random));
        prop_assert_eq!(top.to_string().parse::<ExecutionId>().unwrap(), top.clone());
        let child = top.next_level(&JoinSetId::new(JoinSetKind::Named, name.as_str()).unwrap(), idx);
        prop_assert_eq!(child.to_string().parse::<ExecutionId>().unwrap(), child.clone());
        let (parent, join_set) = child.split_to_parent().unwrap();
        prop_assert_eq!(parent, top);
        prop_assert_eq!(join_set.name(), name.as_str());
    }
}

#[test]
fn the_crockford_table_is_the_alphabet_and_parses_as_the_ulid_crate() {
    let alphabet = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    for b in 0..=u8::MAX {
        let expected = alphabet.iter().position(|a| *a == b);
        let value = super::CROCKFORD[usize::from(b)];
        assert_eq!(
            (value != super::NOT_CROCKFORD).then_some(usize::from(value)),
            expected,
            "byte {b}"
        );
    }
    for text in [
        ULID,
        "00000000000000000000000000",
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    ] {
        assert_eq!(
            super::parse_ulid(text, text).unwrap(),
            Ulid::from_string(text).unwrap()
        );
    }
    for bad in [
        "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "0000000000000000000000000",
        "0000000000000000000000000I",
        "0000000000000000000000000a",
        "000000000000000000000000000",
    ] {
        assert!(super::parse_ulid(bad, bad).is_err(), "{bad}");
    }
}

#[test]
fn ids_serialize_as_their_text_and_back() {
    let executor = format!("Exr_{ULID}").parse::<ExecutorId>().unwrap();
    let run = format!("Run_{ULID}").parse::<RunId>().unwrap();
    let delay = format!("Delay_{ULID}").parse::<DelayId>().unwrap();
    let execution = format!("E_{ULID}.n:j_1").parse::<ExecutionId>().unwrap();
    assert_eq!(
        serde_json::to_string(&executor).unwrap(),
        format!("\"Exr_{ULID}\"")
    );
    assert_eq!(
        serde_json::to_string(&run).unwrap(),
        format!("\"Run_{ULID}\"")
    );
    assert_eq!(
        serde_json::to_string(&delay).unwrap(),
        format!("\"Delay_{ULID}\"")
    );
    assert_eq!(
        serde_json::to_string(&execution).unwrap(),
        format!("\"{execution}\"")
    );
    let json = serde_json::to_string(&delay).unwrap();
    assert_eq!(serde_json::from_str::<DelayId>(&json).unwrap(), delay);
    assert_eq!(delay.to_string(), format!("Delay_{ULID}"));
}
