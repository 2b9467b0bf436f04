use super::*;

fn p(text: &str) -> Condition {
    parse_text(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The message of the error a condition gets (answered 400 `bad_request`: the mapping is
/// pinned by `http::errors`'s `a_when_error_is_a_400_bad_request`).
fn err(text: &str) -> String {
    let e = parse_text(text).expect_err(text);
    assert!(e.message.starts_with("when: "), "{text}: {}", e.message);
    e.message
}

fn label(s: &str) -> Operand {
    Operand::Label(s.into())
}
fn int(i: i64) -> Operand {
    Operand::Const(Value::Int(i))
}
fn text(s: &str) -> Operand {
    Operand::Const(Value::Str(s.into()))
}

#[test]
fn object_array_and_unary_notations() {
    let gt = Condition::Compare(CmpOp::Gt, label("score"), int(10));
    assert_eq!(p(r#"{"&score": {"$gt": 10}}"#), gt);
    assert_eq!(p(r#"{"$gt": ["&score", 10]}"#), gt);
    for (name, op) in [
        ("$eq", CmpOp::Eq),
        ("$ne", CmpOp::Ne),
        ("$gt", CmpOp::Gt),
        ("$gte", CmpOp::Gte),
        ("$lt", CmpOp::Lt),
        ("$lte", CmpOp::Lte),
    ] {
        assert_eq!(
            p(&format!(r#"{{"&a": {{"{name}": "x"}}}}"#)),
            Condition::Compare(op, label("a"), text("x"))
        );
        assert_eq!(op.name(), name);
    }
    assert_eq!(
        p(r#"{"$not": "&flag"}"#),
        Condition::Not(vec![Condition::Truthy(label("flag"))])
    );
    assert_eq!(
        p(r#"{"$not": {"&a": {"$eq": 1}}}"#),
        Condition::Not(vec![Condition::Compare(CmpOp::Eq, label("a"), int(1))])
    );
    assert_eq!(
        p(r#"{"$and": [true, {"$gt": [20, 10]}]}"#),
        Condition::And(vec![
            Condition::Truthy(Operand::Const(Value::Bool(true))),
            Condition::Compare(CmpOp::Gt, int(20), int(10)),
        ])
    );
}

#[test]
fn several_keys_are_anded_in_their_order_a_repeated_key_keeps_its_last_value() {
    assert_eq!(
        p(r#"{"&score": {"$gt": 10}, "$each_n": 5, "&cam": {"$eq": "a"}}"#),
        Condition::And(vec![
            Condition::Compare(CmpOp::Gt, label("score"), int(10)),
            Condition::EachN(5),
            Condition::Compare(CmpOp::Eq, label("cam"), text("a")),
        ])
    );
    assert_eq!(
        p(r#"{"$each_n": 5, "&score": {"$gt": 10}}"#),
        Condition::And(vec![
            Condition::EachN(5),
            Condition::Compare(CmpOp::Gt, label("score"), int(10)),
        ])
    );
    // as in ReductStore (serde_json): the first place, the last value
    assert_eq!(
        p(r#"{"&score": {"$gt": 10}, "$each_n": 5, "&score": {"$lt": 20}}"#),
        Condition::And(vec![
            Condition::Compare(CmpOp::Lt, label("score"), int(20)),
            Condition::EachN(5),
        ])
    );
    assert_eq!(p("{}"), Condition::And(vec![]));
}

#[test]
fn logical_set_and_misc_operators() {
    let a = || Condition::Compare(CmpOp::Eq, label("a"), int(1));
    let b = || Condition::Compare(CmpOp::Eq, label("b"), int(2));
    let two = r#"[{"&a": {"$eq": 1}}, {"&b": {"$eq": 2}}]"#;
    for (op, want) in [
        ("$and", Condition::And(vec![a(), b()])),
        ("$all_of", Condition::And(vec![a(), b()])),
        ("$or", Condition::Or(vec![a(), b()])),
        ("$any_of", Condition::Or(vec![a(), b()])),
        ("$not", Condition::Not(vec![a(), b()])),
        ("$none_of", Condition::Not(vec![a(), b()])),
    ] {
        assert_eq!(p(&format!(r#"{{"{op}": {two}}}"#)), want, "{op}");
    }
    let in_ = Condition::In(label("cam"), vec![text("a"), int(2)]);
    assert_eq!(p(r#"{"$in": ["&cam", "a", 2]}"#), in_);
    assert_eq!(p(r#"{"&cam": {"$in": ["a", 2]}}"#), in_);
    assert_eq!(
        p(r#"{"$nin": ["&cam", "a"]}"#),
        Condition::NotIn(label("cam"), vec![text("a")])
    );
    assert_eq!(
        p(r#"{"&cam": {"$nin": ["a"]}}"#),
        Condition::NotIn(label("cam"), vec![text("a")])
    );
    assert_eq!(
        p(r#"{"$exists": ["cam", "score"]}"#),
        Condition::Exists(vec!["cam".into(), "score".into()])
    );
    assert_eq!(
        p(r#"{"$has": "cam"}"#),
        Condition::Exists(vec!["cam".into()])
    );
    // A computed name (ReductStore's `$has`): the label named by `which`'s value.
    assert_eq!(
        p(r#"{"$has": ["cam", "&which"]}"#),
        Condition::ExistsOf(vec![text("cam"), label("which")])
    );
    let ts = Condition::Compare(CmpOp::Gte, Operand::Timestamp, int(5));
    assert_eq!(p(r#"{"$gte": ["$timestamp", 5]}"#), ts);
    assert_eq!(p(r#"{"$gte": ["$id", 5]}"#), ts);
    assert_eq!(
        p(r#"{"&price": {"$eq": "$$5"}}"#),
        Condition::Compare(CmpOp::Eq, label("price"), text("$5"))
    );
    assert_eq!(
        p(r#"{"&x": {"$lt": 2.5}}"#),
        Condition::Compare(CmpOp::Lt, label("x"), Operand::Const(Value::Float(2.5)))
    );
}

#[test]
fn aggregation_operators_and_durations() {
    assert_eq!(p(r#"{"$each_n": 3}"#), Condition::EachN(3));
    assert_eq!(p(r#"{"$each_n": [3]}"#), Condition::EachN(3));
    assert_eq!(p(r#"{"$limit": 0}"#), Condition::Limit(0));
    assert_eq!(p(r#"{"$each_t": "1s"}"#), Condition::EachT(1_000_000));
    assert_eq!(p(r#"{"$each_t": "100ms"}"#), Condition::EachT(100_000));
    assert_eq!(p(r#"{"$each_t": "250us"}"#), Condition::EachT(250));
    assert_eq!(
        p(r#"{"$each_t": "1h -30m"}"#),
        Condition::EachT(1_800_000_000)
    );
    // a number is seconds, as in ReductStore
    assert_eq!(p(r#"{"$each_t": 0.5}"#), Condition::EachT(500_000));
    assert_eq!(p(r#"{"$each_t": 2}"#), Condition::EachT(2_000_000));
    // a duration elsewhere is microseconds
    assert_eq!(
        p(r#"{"$lt": ["$timestamp", "2s"]}"#),
        Condition::Compare(
            CmpOp::Lt,
            Operand::Timestamp,
            Operand::Const(Value::Duration(2_000_000))
        )
    );
    assert_eq!(duration("5x"), None);
    assert_eq!(duration("s"), None);
    assert_eq!(duration(""), None);
}

#[test]
fn every_error_says_what_and_how() {
    let cases: &[(&str, &str)] = &[
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("null", "must be a JSON object"),
        (r#"{"$abs": [1, 2]}"#, "$abs takes 1 operands, got 2"),
        (r#"{"$cast": ["&a", "number"]}"#, "$cast takes a type name"),
        (
            r##"{"&a": {"#ctx_before": 1}}"##,
            "only allowed at the top level",
        ),
        (r##"{"#nope": 1}"##, "unknown directive"),
        (r#"{"$foo": 1}"#, "unknown operator $foo"),
        (
            r#"{"$gate": "1s"}"#,
            "$gate takes exactly 2 operands, got 1",
        ),
        (r#"{"&a": 10}"#, "needs an operator"),
        (r#"{"a": 10}"#, "neither an operator"),
        (r#"{"&a": {"$gt": 1, "$lt": 5}}"#, "exactly one operator"),
        (r#"{"$gt": ["&a"]}"#, "$gt takes exactly 2 operands, got 1"),
        (
            r#"{"$eq": ["&a", 1, 2]}"#,
            "$eq takes exactly 2 operands, got 3",
        ),
        (
            r#"{"$in": ["&a"]}"#,
            "$in takes a value and at least one candidate",
        ),
        (
            r#"{"$nin": "&a"}"#,
            "$nin takes a value and at least one candidate",
        ),
        (r#"{"$exists": []}"#, "$exists takes label names"),
        (r#"{"$each_n": 0}"#, "at least 1"),
        (r#"{"$each_n": -2}"#, "non-negative integer constant"),
        (r#"{"$each_n": [1, 2]}"#, "exactly one operand, got 2"),
        (r#"{"$limit": 1.5}"#, "non-negative integer constant"),
        (r#"{"$limit": []}"#, "exactly one operand, got 0"),
        (r#"{"$each_t": -1}"#, "$each_t takes a duration"),
        (r#"{"$each_t": []}"#, "exactly one operand, got 0"),
        (r#"{"$timestamp": [1]}"#, "$timestamp takes no operands"),
        (r#"{"&": {"$eq": 1}}"#, "names no label"),
        (r#"{"&a": {"$eq": "$nope"}}"#, "write \"$$nope\""),
        (r#"{"&a": {"$eq": null}}"#, "null is not a value"),
        (
            r#"{"&a": {"$eq": [1]}}"#,
            "an array may only hold the operands",
        ),
    ];
    for (text, want) in cases {
        let got = err(text);
        assert!(got.contains(want), "{text}: {got:?} lacks {want:?}");
        assert!(got.starts_with("when: "), "{got}");
    }
}

/// Regression: `when` errors showed the parser's Rust forms (`got Val(Label("a"))`, `found
/// the condition Cmp(..)`), and `{"$each_n": 1e300}` was taken as `i64::MAX`.
#[test]
fn when_errors_showed_rust_debug_forms_and_each_n_took_1e300() {
    let cases = [
        (r#"{"$each_n": true}"#, "got true"),
        (r#"{"$limit": 1.5}"#, "got 1.5"),
        (r#"{"$limit": "x"}"#, "got the string \"x\""),
        (r#"{"$each_n": 1e300}"#, "non-negative integer constant"),
        (r#"{"$each_n": -1e300}"#, "non-negative integer constant"),
        (r#"{"$each_t": "x"}"#, "got the string \"x\""),
    ];
    for (text, want) in cases {
        let got = err(text);
        assert!(got.contains(want), "{text}: {got:?} lacks {want:?}");
        for debug in ["Val(", "Const(", "Label(", "Cmp(", "Int(", "Float(", "Str("] {
            assert!(!got.contains(debug), "{text}: {got:?} shows {debug}");
        }
    }
    // An exact integer written as a float still counts.
    assert_eq!(p(r#"{"$each_n": 3.0}"#), Condition::EachN(3));
}

/// Regression (issue 28): the form of ReductStore's docs, a bare `true`, non-constant
/// aggregates and ReductStore's other operators were a 400.
#[test]
fn reductstore_forms_and_operators_were_a_400() {
    let ts_gt = Condition::Compare(CmpOp::Gt, Operand::Timestamp, int(5));
    assert_eq!(p(r#"{"$timestamp": {"$gt": 5}}"#), ts_gt);
    assert_eq!(p(r#"{"$id": {"$gt": 5}}"#), ts_gt);
    assert_eq!(
        p("true"),
        Condition::Truthy(Operand::Const(Value::Bool(true)))
    );
    assert_eq!(p(r#""&flag""#), Condition::Truthy(label("flag")));
    assert_eq!(
        p(r#"{"$gate": ["5s", "&on"]}"#),
        Condition::Gate(Operand::Const(Value::Duration(5_000_000)), label("on"))
    );
    assert_eq!(
        p(r#"{"$each_n": "&n"}"#),
        Condition::Aggregate(Agg::EachN, label("n"))
    );
    assert_eq!(
        p(r#"{"$limit": {"$add": ["&n", 1]}}"#),
        Condition::Aggregate(
            Agg::Limit,
            Operand::Func(Func::Add, vec![label("n"), int(1)])
        )
    );
    assert_eq!(
        p(r#"{"$each_t": "&step"}"#),
        Condition::Aggregate(Agg::EachT, label("step"))
    );
    assert_eq!(
        p(r#"{"$xor": [true, false]}"#),
        Condition::Xor(vec![
            Condition::Truthy(Operand::Const(Value::Bool(true))),
            Condition::Truthy(Operand::Const(Value::Bool(false))),
        ])
    );
    assert_eq!(
        p(r#"{"&cam": {"$starts_with": "fr"}}"#),
        Condition::Str(StrOp::StartsWith, label("cam"), text("fr"))
    );
    assert_eq!(
        p(r#"{"$gt": [{"$mult": ["&a", 2]}, {"$abs": "&b"}]}"#),
        Condition::Compare(
            CmpOp::Gt,
            Operand::Func(Func::Mult, vec![label("a"), int(2)]),
            Operand::Func(Func::Abs, vec![label("b")])
        )
    );
    assert_eq!(
        p(r#"{"$eq": [{"$hour": ["$timestamp", "UTC"]}, 3]}"#),
        Condition::Compare(
            CmpOp::Eq,
            Operand::Func(Func::Hour, vec![Operand::Timestamp, text("UTC")]),
            int(3)
        )
    );
    assert_eq!(
        p(r#"{"$eq": ["&a", {"&b": {"$eq": 1}}]}"#),
        Condition::Compare(
            CmpOp::Eq,
            label("a"),
            Operand::Cond(Box::new(Condition::Compare(CmpOp::Eq, label("b"), int(1))))
        )
    );
    assert_eq!(
        p(r#"{"&a": {"$eq": "@b"}}"#),
        Condition::Compare(CmpOp::Eq, label("a"), Operand::Computed("b".into()))
    );
    // execution hints are accepted and ignored
    assert_eq!(
        p(r##"{"#batch_size": 10, "&a": {"$eq": 1}}"##),
        Condition::Compare(CmpOp::Eq, label("a"), int(1))
    );
    // directives tsblob cannot evaluate are a 422 naming them
    for d in ["#ctx_before", "#ctx_after", "#select_labels", "#ext"] {
        let e = parse_text(&format!(r#"{{"{d}": 1, "&a": {{"$eq": 1}}}}"#)).expect_err(d);
        assert_eq!(e.code, "unsupported_directive", "{d}");
        assert!(e.message.contains(d), "{}", e.message);
    }
    let e = parse_text(r#"{"$eq": [{"$hour": ["$timestamp", "Europe/Berlin"]}, 3]}"#)
        .expect_err("time zone");
    assert_eq!(e.code, "unsupported_time_zone");
}

/// Bug "huge condition": a `{"$in": [...]}` of 520,000 numbers fits a 1 MiB body, cost
/// every record it was evaluated on 520,000 comparisons (integer compares do no text
/// work, so no other bound stopped them) and was copied into each entry's cursor. A
/// condition of more than `MAX_CONDITION_PARTS` parts is now a 422 `invalid_condition`.
#[test]
fn a_condition_of_520000_operands_was_evaluated_on_every_record() {
    let values = |n: usize| vec!["0"; n].join(",");
    // `$in` (1), its label (1) and 4,094 values: at the limit.
    let at = format!(r#"{{"&x": {{"$in": [{}]}}}}"#, values(4094));
    assert_eq!(p(&at).parts(), tsblob_storage::MAX_CONDITION_PARTS);
    let over = format!(r#"{{"&x": {{"$in": [{}]}}}}"#, values(520_000));
    let e = parse_text(&over).expect_err("a 520,000-operand condition was accepted");
    assert_eq!(e.code, "invalid_condition");
    assert!(
        e.message.contains("520002 parts") && e.message.contains("limit of 4096"),
        "{}",
        e.message
    );
}

/// Bug (docs walkthrough of 2026-11-29): a `when` sent as JSON text inside a string
/// (`"when": "{\"&n\": {\"$gt\": 100}}"`) was a bare text value, true for any text: a query
/// selected every record, and a label update, a removal or a lifecycle rule acted on all.
#[test]
fn a_condition_in_a_string_selected_every_record() {
    for s in [r#""{\"&n\": {\"$gt\": 100}}""#, r#""junk text""#, r#""""#] {
        let m = err(s);
        assert!(m.contains("JSON object"), "{s}: {m}");
    }
    // References stay: a label, a computed label, the timestamp.
    assert_eq!(p(r#""&flag""#), Condition::Truthy(label("flag")));
    p(r#""@x""#);
    p(r#""$timestamp""#);
}

/// Bug (hostile probe of 2026-11-29): an object under a logical operator was read as its
/// keys ANDed: `{"$and": {}}` and `{"$not": {}}` were true, so a removal by query built from
/// an empty filter removed every record (ReductStore refuses: 422), and
/// `{"$or": {"&a": ..., "&b": ...}}` ANDed its two conditions. Only `$not` of one condition
/// (a documented superset) stays.
#[test]
fn an_empty_object_under_and_selected_every_record() {
    for s in [
        r#"{"$and": {}}"#,
        r#"{"$all_of": {}}"#,
        r#"{"$or": {}}"#,
        r#"{"$not": {}}"#,
        r#"{"$none_of": {}}"#,
        r#"{"$xor": {}}"#,
        r#"{"$or": {"&a": {"$eq": 1}, "&b": {"$eq": 2}}}"#,
        r#"{"$and": {"&a": {"$eq": 1}}}"#,
        r#"{"$not": {"&a": {"$eq": 1}, "&b": {"$eq": 2}}}"#,
    ] {
        let m = err(s);
        assert!(m.contains("takes a list of conditions"), "{s}: {m}");
    }
    assert_eq!(
        p(r#"{"$not": {"&a": {"$eq": 1}}}"#),
        Condition::Not(vec![Condition::Compare(CmpOp::Eq, label("a"), int(1))])
    );
    // Lists stay as they were (an empty one is ReductStore's too).
    p(r#"{"$and": []}"#);
    p(r#"{"$and": [{}]}"#);
}
