use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn labels(kv: &[(&str, &str)]) -> Labels {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn l(name: &str) -> Operand {
    Operand::Label(name.into())
}
fn int(i: i64) -> Operand {
    Operand::Const(Value::Int(i))
}
fn text(s: &str) -> Operand {
    Operand::Const(Value::Str(s.into()))
}
fn cmp(op: CmpOp, a: Operand, b: Operand) -> Condition {
    Condition::Compare(op, a, b)
}

fn run(c: &Condition, strict: bool, ts: u64, kv: &[(&str, &str)]) -> Result<bool, Stop> {
    Matcher::new(c, strict, false).matches(ts, &labels(kv))
}

fn yes(c: &Condition, kv: &[(&str, &str)]) -> bool {
    run(c, false, 0, kv).unwrap()
}

#[test]
fn comparisons_are_numeric_when_both_sides_are_numbers() {
    let score = |op, v| cmp(op, l("score"), v);
    // as text "10" < "9"; as numbers 10 > 9
    assert!(yes(&score(CmpOp::Gt, int(9)), &[("score", "10")]));
    assert!(yes(&score(CmpOp::Gte, int(10)), &[("score", "10")]));
    assert!(!yes(&score(CmpOp::Gt, int(10)), &[("score", "10")]));
    assert!(yes(
        &score(CmpOp::Lt, Operand::Const(Value::Float(10.5))),
        &[("score", "10")]
    ));
    assert!(yes(&score(CmpOp::Lte, int(10)), &[("score", "10.0")]));
    assert!(yes(&score(CmpOp::Eq, int(10)), &[("score", "10.0")]));
    assert!(yes(&score(CmpOp::Ne, int(11)), &[("score", "10")]));
    assert!(yes(&score(CmpOp::Eq, int(-3)), &[("score", "-3")]));
    // booleans are 1 and 0
    assert!(yes(
        &score(CmpOp::Eq, Operand::Const(Value::Bool(true))),
        &[("score", "true")]
    ));
    assert!(yes(&score(CmpOp::Eq, int(0)), &[("score", "false")]));
}

#[test]
fn comparisons_are_textual_otherwise_and_mixed_never_equal() {
    let cam = |op, v| cmp(op, l("cam"), v);
    assert!(yes(&cam(CmpOp::Eq, text("front")), &[("cam", "front")]));
    assert!(!yes(&cam(CmpOp::Eq, text("Front")), &[("cam", "front")]));
    assert!(yes(&cam(CmpOp::Gt, text("back")), &[("cam", "front")]));
    assert!(yes(&cam(CmpOp::Lt, text("rear")), &[("cam", "front")]));
    assert!(yes(&cam(CmpOp::Ne, text("rear")), &[("cam", "front")]));
    // a number and a text: not equal, not ordered
    for op in [CmpOp::Eq, CmpOp::Gt, CmpOp::Gte, CmpOp::Lt, CmpOp::Lte] {
        assert!(!yes(&cam(op, int(1)), &[("cam", "front")]), "{op:?}");
    }
    assert!(yes(&cam(CmpOp::Ne, int(1)), &[("cam", "front")]));
    // NaN is a number equal to nothing
    assert!(!yes(&cam(CmpOp::Eq, text("NaN")), &[("cam", "NaN")]));
}

#[test]
fn a_string_constant_was_read_as_a_number() {
    // ReductStore: a constant keeps its JSON type; the label "10" is the integer 10, the
    // constant "10" text, and a text never equals nor orders against a number
    let n = |op, v| cmp(op, l("n"), v);
    assert!(!yes(&n(CmpOp::Eq, text("10")), &[("n", "10")]));
    assert!(yes(&n(CmpOp::Ne, text("10")), &[("n", "10")]));
    assert!(!yes(&n(CmpOp::Gt, text("9")), &[("n", "10")]));
    assert!(!yes(&n(CmpOp::Eq, text("true")), &[("n", "true")]));
    assert!(yes(&n(CmpOp::Eq, text("x")), &[("n", "x")]));
    // a duration literal compares as its microseconds
    assert!(yes(
        &n(CmpOp::Eq, Operand::Const(Value::Duration(5_000_000))),
        &[("n", "5000000")]
    ));
}

#[test]
fn a_missing_label_failed_only_its_comparison_so_not_and_or_disagreed_with_reductstore() {
    let c = cmp(CmpOp::Ne, l("gone"), int(1));
    assert!(!yes(&c, &[("cam", "a")]));
    assert_eq!(
        run(&c, true, 7, &[("cam", "a")]),
        Err(Stop::Missing("gone".into()))
    );
    // the whole condition fails, as in ReductStore: $not of it is false, $or does not
    // go on to the next operand, $nin is false
    assert!(!yes(&Condition::Not(vec![c.clone()]), &[]));
    assert!(!yes(
        &Condition::Not(vec![Condition::Truthy(l("opt"))]),
        &[]
    ));
    assert!(!yes(
        &Condition::Or(vec![c.clone(), cmp(CmpOp::Eq, l("cam"), text("a"))]),
        &[("cam", "a")]
    ));
    // ...but an $or that is already true before reaching it holds
    assert!(yes(
        &Condition::Or(vec![cmp(CmpOp::Eq, l("cam"), text("a")), c.clone()]),
        &[("cam", "a")]
    ));
    assert!(!yes(&Condition::In(l("gone"), vec![int(1)]), &[]));
    assert!(!yes(&Condition::NotIn(l("gone"), vec![int(1)]), &[]));
    assert!(!yes(&Condition::Truthy(l("gone")), &[]));
    assert_eq!(
        run(&Condition::Truthy(l("gone")), true, 0, &[]),
        Err(Stop::Missing("gone".into()))
    );
    // a strict condition never reaching the label does not fail
    let and = Condition::And(vec![cmp(CmpOp::Eq, int(1), int(2)), c]);
    assert_eq!(run(&and, true, 0, &[]), Ok(false));
}

/// Found by scripts/when_diff.py against ReductStore 1.21.5: `{"$add": ["&opt", "&cam"]}`
/// on two text labels was an error (the record failed), where ReductStore joins the texts.
#[test]
fn add_of_two_texts_failed_the_record_where_reductstore_joins_them() {
    let f = |v: Vec<Operand>| Operand::Func(Func::Add, v);
    let kv = [("a", "x"), ("b", "y"), ("n", "3")];
    let eq = |x: Operand, y: Operand| yes(&cmp(CmpOp::Eq, x, y), &kv);
    assert!(eq(f(vec![l("a"), l("b")]), text("xy")));
    assert!(eq(f(vec![l("a"), text("-"), l("b")]), text("x-y")));
    // text and a number still fail the record, in either order
    assert!(!yes(&Condition::Truthy(f(vec![l("a"), l("n")])), &kv));
    assert!(!yes(&Condition::Truthy(f(vec![l("n"), l("a")])), &kv));
    // other arithmetic on texts fails too
    let sub = Operand::Func(Func::Sub, vec![l("a"), l("b")]);
    assert!(!yes(&Condition::Not(vec![Condition::Truthy(sub)]), &kv));
}

#[test]
fn arithmetic_string_cast_ref_date_and_xor_operators() {
    let f = |f, v: Vec<Operand>| Operand::Func(f, v);
    let kv = [("a", "7"), ("b", "2"), ("s", "front-cam"), ("name", "a")];
    let eq = |x: Operand, y: Operand| yes(&cmp(CmpOp::Eq, x, y), &kv);
    assert!(eq(f(Func::Add, vec![l("a"), l("b"), int(1)]), int(10)));
    assert!(eq(f(Func::Add, vec![]), int(0)));
    assert!(eq(f(Func::Sub, vec![l("a"), l("b")]), int(5)));
    assert!(eq(f(Func::Mult, vec![l("a"), l("b")]), int(14)));
    assert!(eq(
        f(Func::Div, vec![l("a"), l("b")]),
        Operand::Const(Value::Float(3.5))
    ));
    assert!(eq(f(Func::DivNum, vec![l("a"), l("b")]), int(3)));
    assert!(eq(f(Func::Rem, vec![l("a"), l("b")]), int(1)));
    assert!(eq(f(Func::Abs, vec![int(-4)]), int(4)));
    assert!(eq(f(Func::Cast, vec![l("a"), text("string")]), text("7")));
    assert!(eq(f(Func::Ref, vec![l("name")]), int(7)));
    // 2024-02-29T13:14:15Z, a Thursday
    let ts = Operand::Const(Value::Int(1_709_212_455_000_000));
    for (func, want) in [
        (Func::Year, 2024),
        (Func::Month, 2),
        (Func::Day, 29),
        (Func::Hour, 13),
        (Func::Minute, 14),
        (Func::Second, 15),
        (Func::Weekday, 3),
    ] {
        assert!(eq(f(func, vec![ts.clone()]), int(want)), "{func:?}");
    }
    // a division by zero or text in arithmetic fails the record
    assert!(!yes(
        &Condition::Not(vec![cmp(
            CmpOp::Eq,
            f(Func::Div, vec![l("a"), int(0)]),
            int(1)
        )]),
        &kv
    ));
    assert_eq!(
        run(
            &Condition::Truthy(f(Func::Add, vec![l("s"), int(1)])),
            true,
            0,
            &kv
        ),
        Err(Stop::Invalid("$add takes numbers, not text".into()))
    );
    let s = |op, x: &str| yes(&Condition::Str(op, l("s"), text(x)), &kv);
    assert!(s(StrOp::Contains, "nt-c") && !s(StrOp::Contains, "x"));
    assert!(s(StrOp::StartsWith, "front") && !s(StrOp::StartsWith, "cam"));
    assert!(s(StrOp::EndsWith, "cam") && !s(StrOp::EndsWith, "front"));
    let t = cmp(CmpOp::Eq, int(1), int(1));
    let n = cmp(CmpOp::Eq, int(1), int(2));
    assert!(yes(&Condition::Xor(vec![n.clone(), t.clone()]), &[]));
    assert!(!yes(&Condition::Xor(vec![t.clone(), t.clone()]), &[]));
    assert!(!yes(&Condition::Xor(vec![]), &[]));
}

#[test]
fn each_t_lost_a_microsecond_through_float_seconds() {
    // ReductStore turns "1001us" into 0.001001 s and back into 1000 µs; the docs say
    // 1001 µs: on a 1 ms grid every second record, not every one
    let mut m = Matcher::new(&Condition::EachT(1001), false, false);
    let kept = (0..60u64)
        .filter(|i| m.matches(i * 1000, &Labels::new()) == Ok(true))
        .count();
    assert_eq!(kept, 29);
    let mut m = Matcher::new(
        &Condition::Aggregate(Agg::EachT, Operand::Const(Value::Duration(1001))),
        false,
        false,
    );
    let kept = (0..60u64)
        .filter(|i| m.matches(i * 1000, &Labels::new()) == Ok(true))
        .count();
    assert_eq!(kept, 29);
}

/// `$gate` (ReductStore 1.19+) was a 400 "not supported": it opens on the input's rising
/// edge for its duration, then stays shut until the input falls and rises again.
#[test]
fn gate_was_refused_and_now_opens_on_a_rising_edge_for_its_duration() {
    let gate = Condition::Gate(Operand::Const(Value::Duration(3)), l("on"));
    // (ts, input) -> kept
    let steps = [
        (0, "false", false),
        (1, "true", true),   // rising edge: open until 4
        (2, "false", false), // open but the input is false
        (3, "true", true),   // still open (no new window)
        (4, "true", false),  // the window has passed: shut until the input falls
        (5, "true", false),
        (6, "false", false), // fell: re-armed
        (7, "true", true),   // rises: a new window until 10
        (9, "true", true),
        (10, "true", false),
    ];
    for desc in [false, true] {
        let mut m = Matcher::new(&gate, false, desc);
        for (ts, on, want) in steps {
            let ts = if desc { 100 - ts } else { ts };
            let got = m.matches(ts, &labels(&[("on", on)]));
            assert_eq!(got, Ok(want), "desc {desc} at {ts}");
        }
    }
    // seconds as a number; time running backwards starts over; a missing input fails
    let mut m = Matcher::new(
        &Condition::Gate(Operand::Const(Value::Float(0.000002)), l("on")),
        false,
        false,
    );
    let on = labels(&[("on", "1")]);
    assert_eq!(m.matches(10, &on), Ok(true));
    assert_eq!(m.matches(12, &on), Ok(false));
    assert_eq!(m.matches(5, &on), Ok(true));
    assert_eq!(m.matches(6, &Labels::new()), Ok(false));
}

#[test]
fn aggregates_take_a_computed_operand() {
    let kv = labels(&[("n", "2")]);
    let mut m = Matcher::new(&Condition::Aggregate(Agg::EachN, l("n")), false, false);
    let got: Vec<_> = (0..6).map(|i| m.matches(i, &kv)).collect();
    assert_eq!(
        got,
        [
            Ok(false),
            Ok(true),
            Ok(false),
            Ok(true),
            Ok(false),
            Ok(true)
        ]
    );
    let mut m = Matcher::new(&Condition::Aggregate(Agg::Limit, l("n")), false, false);
    let got: Vec<_> = (0..3).map(|i| m.matches(i, &kv)).collect();
    assert_eq!(got, [Ok(true), Ok(true), Err(Stop::Limit)]);
    // a step of 0 fails the record, as in ReductStore
    let mut m = Matcher::new(&Condition::Aggregate(Agg::EachN, int(0)), false, false);
    assert_eq!(m.matches(0, &kv), Ok(false));
}

#[test]
fn logical_operators() {
    let t = cmp(CmpOp::Eq, int(1), int(1));
    let f = cmp(CmpOp::Eq, int(1), int(2));
    let and = |v: Vec<Condition>| yes(&Condition::And(v), &[]);
    let or = |v: Vec<Condition>| yes(&Condition::Or(v), &[]);
    let not = |v: Vec<Condition>| yes(&Condition::Not(v), &[]);
    assert!(and(vec![]) && and(vec![t.clone(), t.clone()]) && !and(vec![t.clone(), f.clone()]));
    assert!(!or(vec![]) && or(vec![f.clone(), t.clone()]) && !or(vec![f.clone(), f.clone()]));
    assert!(not(vec![f.clone()]) && !not(vec![t.clone()]) && !not(vec![f.clone(), t.clone()]));
}

#[test]
fn in_nin_exists_truthy_and_timestamp() {
    let kv = [("cam", "front"), ("n", "3")];
    assert!(yes(
        &Condition::In(l("cam"), vec![text("back"), text("front")]),
        &kv
    ));
    assert!(!yes(&Condition::In(l("cam"), vec![text("back")]), &kv));
    assert!(yes(&Condition::In(l("n"), vec![text("1"), int(3)]), &kv));
    assert!(yes(&Condition::NotIn(l("cam"), vec![text("back")]), &kv));
    assert!(!yes(
        &Condition::NotIn(l("n"), vec![Operand::Const(Value::Float(3.0))]),
        &kv
    ));
    assert!(yes(&Condition::Exists(vec!["cam".into(), "n".into()]), &kv));
    // `$has` with a computed name (ReductStore's): the label named by `which`'s value.
    let has_which = Condition::ExistsOf(vec![l("which")]);
    assert!(yes(&has_which, &[("which", "cam"), ("cam", "a")]));
    assert!(!yes(&has_which, &[("which", "zzz"), ("cam", "a")]));
    // `which` missing: the record fails as a whole, `$not` included.
    assert!(!yes(&has_which, &[("cam", "a")]));
    assert!(!yes(
        &Condition::Not(vec![has_which.clone()]),
        &[("cam", "a")]
    ));
    assert!(yes(
        &Condition::Not(vec![has_which]),
        &[("which", "zzz"), ("cam", "a")]
    ));
    // a computed label (`@x`) is always missing in tsblob: the record fails
    assert!(!yes(
        &Condition::ExistsOf(vec![Operand::Computed("x".into())]),
        &[("x", "x")]
    ));
    assert!(!yes(
        &Condition::Exists(vec!["cam".into(), "x".into()]),
        &kv
    ));
    assert!(yes(&Condition::Truthy(l("cam")), &kv));
    assert!(!yes(&Condition::Truthy(l("z")), &[("z", "0")]));
    assert!(!yes(&Condition::Truthy(l("z")), &[("z", "")]));
    assert!(!yes(&Condition::Truthy(l("z")), &[("z", "false")]));
    let after = cmp(CmpOp::Gte, Operand::Timestamp, int(100));
    assert_eq!(run(&after, false, 100, &[]), Ok(true));
    assert_eq!(run(&after, false, 99, &[]), Ok(false));
}

fn over(c: &Condition, desc: bool, ts: &[u64]) -> Vec<u64> {
    let mut m = Matcher::new(c, false, desc);
    let mut out = Vec::new();
    for &t in ts {
        match m.matches(t, &Labels::new()) {
            Ok(true) => out.push(t),
            Ok(false) => {}
            Err(Stop::Limit) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    out
}

#[test]
fn each_n_keeps_every_nth_record_that_reaches_it() {
    let ts: Vec<u64> = (0..10).collect();
    assert_eq!(over(&Condition::EachN(3), false, &ts), [2, 5, 8]);
    assert_eq!(over(&Condition::EachN(1), false, &ts), ts);
    // after a filter: every second even record
    let even_then_each = Condition::And(vec![
        Condition::In(
            Operand::Timestamp,
            vec![int(0), int(2), int(4), int(6), int(8)],
        ),
        Condition::EachN(2),
    ]);
    assert_eq!(over(&even_then_each, false, &ts), [2, 6]);
}

#[test]
fn each_t_keeps_one_record_per_step_as_reductstore_does() {
    let ts: Vec<u64> = (0..10).map(|i| i * 40).collect(); // 0, 40, ..., 360
                                                          // the first record sets the clock; then one at least 100 µs after the last kept
    assert_eq!(over(&Condition::EachT(100), false, &ts), [120, 240, 360]);
    assert_eq!(over(&Condition::EachT(0), false, &ts), ts);
    let rev: Vec<u64> = ts.iter().rev().copied().collect();
    assert_eq!(over(&Condition::EachT(100), true, &rev), [240, 120, 0]);
    // time going backwards restarts the clock
    assert_eq!(
        over(&Condition::EachT(100), false, &[500, 100, 150, 200]),
        [200]
    );
}

#[test]
fn limit_ends_the_query_after_n_records_that_reach_it() {
    let ts: Vec<u64> = (0..10).collect();
    assert_eq!(over(&Condition::Limit(3), false, &ts), [0, 1, 2]);
    assert_eq!(over(&Condition::Limit(0), false, &ts), [] as [u64; 0]);
    let odd_limited = Condition::And(vec![
        Condition::In(Operand::Timestamp, vec![int(1), int(3), int(5), int(7)]),
        Condition::Limit(2),
    ]);
    assert_eq!(over(&odd_limited, false, &ts), [1, 3]);
}

// ---- a property test against a plain reference evaluator ----

const KEYS: [&str; 4] = ["a", "b", "c", "d"];
const VALUES: [&str; 15] = [
    "0", "1", "2", "10", "-3", "2.5", "1e1", "abc", "b", "", "true", "false", "x y", "B", "a",
];

fn random_operand(r: &mut StdRng, depth: u32) -> Operand {
    match r.random_range(0..if depth == 0 { 7 } else { 9 }) {
        0 | 1 => l(KEYS[r.random_range(0..KEYS.len())]),
        2 => int(r.random_range(-4..12)),
        3 => Operand::Const(Value::Float(r.random_range(-8..24) as f64 / 2.0)),
        4 => Operand::Const(Value::Bool(r.random())),
        5 => text(VALUES[r.random_range(0..VALUES.len())]),
        6 => Operand::Const(Value::Duration(r.random_range(0..3))),
        7 => {
            let f = [
                Func::Add,
                Func::Sub,
                Func::Mult,
                Func::Div,
                Func::DivNum,
                Func::Rem,
                Func::Abs,
                Func::Cast,
                Func::Ref,
            ][r.random_range(0..9)];
            let args = match f {
                Func::Abs => vec![random_operand(r, depth - 1)],
                Func::Ref => vec![text(KEYS[r.random_range(0..KEYS.len())])],
                Func::Cast => vec![
                    random_operand(r, depth - 1),
                    text(["bool", "int", "float", "string", "duration"][r.random_range(0..5)]),
                ],
                Func::Add | Func::Mult => (0..r.random_range(0..4))
                    .map(|_| random_operand(r, depth - 1))
                    .collect(),
                _ => vec![random_operand(r, depth - 1), random_operand(r, depth - 1)],
            };
            Operand::Func(f, args)
        }
        _ => Operand::Cond(Box::new(random_condition(r, depth - 1))),
    }
}

fn random_condition(r: &mut StdRng, depth: u32) -> Condition {
    let leaf = depth == 0 || r.random_range(0..3) == 0;
    if leaf {
        let d = depth.min(1);
        return match r.random_range(0..6) {
            0 | 1 => {
                let op = [
                    CmpOp::Eq,
                    CmpOp::Ne,
                    CmpOp::Gt,
                    CmpOp::Gte,
                    CmpOp::Lt,
                    CmpOp::Lte,
                ][r.random_range(0..6)];
                cmp(op, random_operand(r, d), random_operand(r, d))
            }
            2 => {
                let items = (0..r.random_range(1..4))
                    .map(|_| random_operand(r, d))
                    .collect();
                if r.random() {
                    Condition::In(random_operand(r, d), items)
                } else {
                    Condition::NotIn(random_operand(r, d), items)
                }
            }
            3 if r.random() => Condition::ExistsOf(vec![random_operand(r, d)]),
            3 => Condition::Exists(vec![KEYS[r.random_range(0..KEYS.len())].into()]),
            4 => Condition::Str(
                [StrOp::Contains, StrOp::StartsWith, StrOp::EndsWith][r.random_range(0..3)],
                random_operand(r, d),
                random_operand(r, d),
            ),
            _ => Condition::Truthy(random_operand(r, d)),
        };
    }
    let kids = (0..r.random_range(0..4))
        .map(|_| random_condition(r, depth - 1))
        .collect();
    match r.random_range(0..4) {
        0 => Condition::And(kids),
        1 => Condition::Or(kids),
        2 => Condition::Xor(kids),
        _ => Condition::Not(kids),
    }
}

/// The reference, written from ReductStore's documented rules: a label value is a boolean,
/// else an integer, else a float, else text; a constant keeps its type; any failure (a
/// missing label, text in arithmetic, a division by zero) fails the whole record (`Err`).
#[derive(Debug, Clone, PartialEq)]
enum Ref {
    B(bool),
    I(i64),
    F(f64),
    /// A duration, in µs.
    D(i64),
    S(String),
}

/// A failure: the missing label's name, or `!` and what went wrong.
type RefResult<T> = std::result::Result<T, String>;

fn ref_parse(s: &str) -> Ref {
    if let Ok(b) = s.parse::<bool>() {
        Ref::B(b)
    } else if let Ok(i) = s.parse::<i64>() {
        Ref::I(i)
    } else if let Ok(f) = s.parse::<f64>() {
        Ref::F(f)
    } else {
        Ref::S(s.to_string())
    }
}

fn ref_f(v: &Ref) -> Option<f64> {
    match v {
        Ref::B(b) => Some(if *b { 1.0 } else { 0.0 }),
        Ref::I(i) | Ref::D(i) => Some(*i as f64),
        Ref::F(f) => Some(*f),
        Ref::S(_) => None,
    }
}

fn ref_text(v: &Ref) -> String {
    match v {
        Ref::B(b) => b.to_string(),
        Ref::I(i) => i.to_string(),
        Ref::F(f) => f.to_string(),
        Ref::D(d) => fmt_duration(*d),
        Ref::S(s) => s.clone(),
    }
}

fn ref_int(v: &Ref) -> RefResult<i64> {
    match v {
        Ref::B(b) => Ok(*b as i64),
        Ref::I(i) | Ref::D(i) => Ok(*i),
        Ref::F(f) => Ok(*f as i64),
        Ref::S(s) => s.parse().map_err(|_| "!not an int".to_string()),
    }
}

fn ref_float(v: &Ref) -> RefResult<f64> {
    match v {
        Ref::S(s) => s.parse().map_err(|_| "!not a float".to_string()),
        v => Ok(ref_f(v).unwrap_or(0.0)),
    }
}

fn is_int(v: &Ref) -> bool {
    matches!(v, Ref::B(_) | Ref::I(_) | Ref::D(_))
}

fn ref_arith(f: Func, a: &Ref, b: &Ref) -> RefResult<Ref> {
    if let (Func::Add, Ref::S(x), Ref::S(y)) = (f, a, b) {
        return Ok(Ref::S(format!("{x}{y}")));
    }
    if matches!(a, Ref::S(_)) || matches!(b, Ref::S(_)) {
        return Err("!text in arithmetic".into());
    }
    let (x, y) = (ref_f(a).unwrap_or(0.0), ref_f(b).unwrap_or(0.0));
    let ints = is_int(a) && is_int(b);
    let (i, j) = (ref_int(a)?, ref_int(b)?);
    Ok(match f {
        Func::Add if ints => Ref::I(i + j),
        Func::Sub if ints => Ref::I(i - j),
        Func::Mult if ints => Ref::I(i * j),
        Func::Rem if ints && j == 0 => return Err("!rem by 0".into()),
        Func::Rem if ints => Ref::I(i % j),
        Func::Add => Ref::F(x + y),
        Func::Sub => Ref::F(x - y),
        Func::Mult => Ref::F(x * y),
        Func::Rem => Ref::F(x % y),
        Func::Div if y == 0.0 => return Err("!div by 0".into()),
        Func::Div => Ref::F(x / y),
        Func::DivNum if j == 0 => return Err("!div by 0".into()),
        Func::DivNum => Ref::I(i / j),
        _ => unreachable!(),
    })
}

fn ref_value(o: &Operand, ts: u64, kv: &Labels) -> RefResult<Ref> {
    Ok(match o {
        Operand::Label(name) => ref_parse(kv.get(name).ok_or_else(|| name.clone())?),
        Operand::Computed(name) => return Err(format!("@{name}")),
        Operand::Timestamp => Ref::I(ts as i64),
        Operand::Const(Value::Bool(b)) => Ref::B(*b),
        Operand::Const(Value::Int(i)) => Ref::I(*i),
        Operand::Const(Value::Float(f)) => Ref::F(*f),
        Operand::Const(Value::Duration(d)) => Ref::D(*d),
        Operand::Const(Value::Str(s)) => Ref::S(s.clone()),
        Operand::Cond(c) => Ref::B(reference(c, ts, kv)?),
        Operand::Func(f, args) => {
            let mut vals = Vec::new();
            match f {
                Func::Add | Func::Mult => {
                    let mut acc: Option<Ref> = None;
                    for a in args {
                        let v = ref_value(a, ts, kv)?;
                        acc = Some(match acc {
                            None => v,
                            Some(x) => ref_arith(*f, &x, &v)?,
                        });
                    }
                    return Ok(acc.unwrap_or(Ref::I((*f == Func::Mult) as i64)));
                }
                _ => {
                    for a in args {
                        vals.push(ref_value(a, ts, kv)?);
                    }
                }
            }
            match f {
                Func::Abs => match &vals[0] {
                    Ref::S(_) => return Err("!abs of text".into()),
                    Ref::F(x) => Ref::F(x.abs()),
                    v => Ref::I(ref_int(v)?.abs()),
                },
                Func::Ref => ref_parse(
                    kv.get(&ref_text(&vals[0]))
                        .ok_or_else(|| ref_text(&vals[0]))?,
                ),
                Func::Cast => match ref_text(&vals[1]).as_str() {
                    "bool" => Ref::B(match &vals[0] {
                        Ref::S(s) => !s.is_empty(),
                        v => ref_f(v) != Some(0.0),
                    }),
                    "int" => Ref::I(ref_int(&vals[0])?),
                    "float" => Ref::F(ref_float(&vals[0])?),
                    "string" => Ref::S(ref_text(&vals[0])),
                    _ => Ref::D(ref_int(&vals[0])?),
                },
                _ => ref_arith(*f, &vals[0], &vals[1])?,
            }
        }
    })
}

fn ref_cmp(op: CmpOp, a: &Ref, b: &Ref) -> bool {
    let ord = match (a, b) {
        (Ref::S(x), Ref::S(y)) => Some(x.cmp(y)),
        (Ref::S(_), _) | (_, Ref::S(_)) => None,
        (x, y) => ref_f(x).and_then(|x| ref_f(y).and_then(|y| x.partial_cmp(&y))),
    };
    match op {
        CmpOp::Eq => ord == Some(Ordering::Equal),
        CmpOp::Ne => ord != Some(Ordering::Equal),
        CmpOp::Gt => ord == Some(Ordering::Greater),
        CmpOp::Gte => ord == Some(Ordering::Greater) || ord == Some(Ordering::Equal),
        CmpOp::Lt => ord == Some(Ordering::Less),
        CmpOp::Lte => ord == Some(Ordering::Less) || ord == Some(Ordering::Equal),
    }
}

fn truthy(v: &Ref) -> bool {
    match v {
        Ref::S(s) => !s.is_empty(),
        v => ref_f(v) != Some(0.0),
    }
}

fn reference(c: &Condition, ts: u64, kv: &Labels) -> RefResult<bool> {
    match c {
        Condition::And(v) => {
            for k in v {
                if !reference(k, ts, kv)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Or(v) => {
            for k in v {
                if reference(k, ts, kv)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Condition::Not(v) => {
            for k in v {
                if reference(k, ts, kv)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Xor(v) => {
            let mut n = 0;
            for k in v {
                n += reference(k, ts, kv)? as u32;
            }
            Ok(n == 1)
        }
        Condition::Compare(op, a, b) => {
            let x = ref_value(a, ts, kv)?;
            let y = ref_value(b, ts, kv)?;
            Ok(ref_cmp(*op, &x, &y))
        }
        Condition::In(a, items) | Condition::NotIn(a, items) => {
            let x = ref_value(a, ts, kv)?;
            let mut found = false;
            for i in items {
                if ref_cmp(CmpOp::Eq, &x, &ref_value(i, ts, kv)?) {
                    found = true;
                    break;
                }
            }
            Ok(found == matches!(c, Condition::In(..)))
        }
        Condition::Exists(v) => Ok(v.iter().all(|k| kv.contains_key(k))),
        Condition::ExistsOf(v) => {
            for a in v {
                if !kv.contains_key(&ref_text(&ref_value(a, ts, kv)?)) {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Str(op, a, b) => {
            let x = ref_text(&ref_value(a, ts, kv)?);
            let y = ref_text(&ref_value(b, ts, kv)?);
            Ok(match op {
                StrOp::Contains => x.contains(&y),
                StrOp::StartsWith => x.starts_with(&y),
                StrOp::EndsWith => x.ends_with(&y),
            })
        }
        Condition::Truthy(a) => Ok(truthy(&ref_value(a, ts, kv)?)),
        Condition::EachN(_)
        | Condition::EachT(_)
        | Condition::Limit(_)
        | Condition::Gate(..)
        | Condition::Aggregate(..) => {
            unreachable!("not generated")
        }
    }
}

#[test]
fn matches_the_reference_evaluator_on_random_conditions_and_labels() {
    let mut r = StdRng::seed_from_u64(0x007a_b10b);
    let mut outcomes = [0usize; 3];
    for _ in 0..20_000 {
        let c = random_condition(&mut r, 4);
        for _ in 0..8 {
            let mut kv = Labels::new();
            for k in KEYS {
                if r.random_range(0..4) != 0 {
                    kv.insert(k.into(), VALUES[r.random_range(0..VALUES.len())].into());
                }
            }
            let ts = r.random_range(0..20);
            let strict: bool = r.random();
            let want = match reference(&c, ts, &kv) {
                Err(_) if !strict => Ok(false),
                Err(e) if e.starts_with('!') => Err("!".to_string()),
                w => w,
            };
            let got = Matcher::new(&c, strict, false).matches(ts, &kv);
            let got = got.map_err(|e| match e {
                Stop::Missing(l) => l,
                Stop::Invalid(_) => "!".to_string(),
                Stop::Limit => unreachable!(),
            });
            assert_eq!(
                got, want,
                "condition {c:?}\nlabels {kv:?} ts {ts} strict {strict}"
            );
            outcomes[match want {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(_) => 2,
            }] += 1;
        }
    }
    // the generator covers every outcome often
    assert!(outcomes.iter().all(|&n| n > 5_000), "{outcomes:?}");
}

/// F3 (a tester's finding): `$add` over texts re-copied the whole join at every operand, so
/// 2000 operands naming one 4000-byte label cost ~1.9 s of CPU per record (O(N²) bytes
/// copied), and nothing bounded the text a condition could build. A computed text is now
/// at most 64 KiB: past it the record fails (no match; with `strict` the query's
/// `invalid_condition`).
#[test]
fn an_add_producing_more_than_the_cap_is_refused() {
    let long = "x".repeat(4000);
    let kv = [("a", long.as_str())];
    let join = |n: usize| Operand::Func(Func::Add, vec![l("a"); n]);
    // 16 × 4000 = 64,000 bytes: under the cap, joined as before
    let under = cmp(CmpOp::Eq, join(16), text(&long.repeat(16)));
    assert_eq!(run(&under, true, 0, &kv), Ok(true));
    // 17 × 4000 = 68,000 bytes: over 64 KiB, refused however it is used
    let over = cmp(CmpOp::Eq, join(17), text(&long.repeat(17)));
    assert_eq!(run(&over, false, 0, &kv), Ok(false));
    match run(&over, true, 0, &kv) {
        Err(Stop::Invalid(m)) => assert!(m.contains("65536"), "{m}"),
        other => panic!("a join over the cap must fail the record: {other:?}"),
    }
    // the tester's case: 2000 operands fail at the cap instead of building 8 MB
    let tester = cmp(CmpOp::Eq, join(2000), text("y"));
    assert!(matches!(run(&tester, true, 0, &kv), Err(Stop::Invalid(_))));
    // nesting does not get around it: a join of joins is one computed text too
    let nested = Operand::Func(Func::Add, vec![join(9), join(9)]);
    assert!(matches!(
        run(&Condition::Truthy(nested), true, 0, &kv),
        Err(Stop::Invalid(_))
    ));
}

/// The cap alone bounds one value, not a condition that builds or compares many of them:
/// 2000 comparisons of a 4000-byte label with itself, or 400 joins just under the cap, are
/// 8 MB and 25 MB of text work on every record. One record's evaluation may do at most
/// 4 MiB of it (joins, casts, comparisons and searches of texts); past it the record fails.
#[test]
fn a_condition_doing_more_text_work_than_the_budget_is_refused() {
    let long = "x".repeat(4000);
    let kv = [("a", long.as_str())];
    let same = cmp(CmpOp::Eq, l("a"), l("a"));
    assert_eq!(
        run(&Condition::And(vec![same.clone(); 100]), true, 0, &kv),
        Ok(true)
    );
    let many = Condition::And(vec![same; 2000]);
    assert_eq!(run(&many, false, 0, &kv), Ok(false));
    assert!(matches!(run(&many, true, 0, &kv), Err(Stop::Invalid(_))));
    let joins = Condition::And(vec![
        Condition::Truthy(Operand::Func(
            Func::Add,
            vec![l("a"); 16]
        ));
        400
    ]);
    assert!(matches!(run(&joins, true, 0, &kv), Err(Stop::Invalid(_))));
    let contains = Condition::And(vec![Condition::Str(StrOp::Contains, l("a"), l("a")); 2000]);
    assert!(matches!(
        run(&contains, true, 0, &kv),
        Err(Stop::Invalid(_))
    ));
    // `$in` over a list: each candidate is compared in turn
    let near = format!("{}y", "x".repeat(3999));
    let kv2 = [("a", long.as_str()), ("b", near.as_str())];
    let listed = Condition::In(l("a"), vec![l("b"); 2000]);
    assert!(matches!(run(&listed, true, 0, &kv2), Err(Stop::Invalid(_))));
    // short candidates cost little, however many
    let mut short = vec![text("no"); 1999];
    short.push(l("a"));
    assert_eq!(run(&Condition::In(l("a"), short), true, 0, &kv), Ok(true));
}

/// F3: the join copied the whole text so far at every operand (O(N²) bytes for N operands).
/// Counted by the text work of the record: a join of N texts copies each once.
#[test]
fn add_over_long_text_is_linear_not_quadratic() {
    let long = "x".repeat(4000);
    let kv = labels(&[("a", long.as_str())]);
    let work = |c: Condition| {
        let mut m = Matcher::new(&c, true, false);
        assert_eq!(m.matches(0, &kv), Ok(true), "{c:?}");
        m.last_work
    };
    let join = |n: usize| Operand::Func(Func::Add, vec![l("a"); n]);
    // 16 operands: 64,000 bytes copied (re-copying the join at each step was 540,000)
    assert_eq!(work(Condition::Truthy(join(16))), 16 * 4000);
    assert_eq!(work(Condition::Truthy(join(2))), 2 * 4000);
    // a join of a join grows the inner one in place
    let nested = Operand::Func(Func::Add, vec![join(8), l("a"), l("a")]);
    assert_eq!(work(Condition::Truthy(nested)), 10 * 4000);
    // one operand, or `$cast` of a text to `string`, copies nothing
    assert_eq!(work(Condition::Truthy(join(1))), 0);
    let cast = Operand::Func(Func::Cast, vec![l("a"), text("string")]);
    assert_eq!(work(Condition::Truthy(cast)), 0);
    // a constant is read where it is, not copied per record
    let eq_const = cmp(CmpOp::Eq, text("abc"), text("abc"));
    assert_eq!(work(eq_const), 3);
}

/// The texts a matcher holds: label names and text constants, in tree order.
fn texts(m: &Matcher) -> Vec<Arc<str>> {
    fn arg(a: &Arg, out: &mut Vec<Arc<str>>) {
        match a {
            Arg::Label(t) | Arg::Computed(t) | Arg::Text(t) => out.push(t.clone()),
            Arg::Func(_, args) => args.iter().for_each(|a| arg(a, out)),
            Arg::Cond(n) => node(n, out),
            Arg::Timestamp | Arg::Const(_) => {}
        }
    }
    fn node(n: &Node, out: &mut Vec<Arc<str>>) {
        match n {
            Node::And(v) | Node::Or(v) | Node::Not(v) | Node::Xor(v) => {
                v.iter().for_each(|n| node(n, out))
            }
            Node::Compare(_, a, b) | Node::Str(_, a, b) => {
                arg(a, out);
                arg(b, out);
            }
            Node::In(a, v) | Node::NotIn(a, v) => {
                arg(a, out);
                v.iter().for_each(|a| arg(a, out));
            }
            Node::Exists(v) => out.extend(v.iter().cloned()),
            Node::ExistsOf(v) => v.iter().for_each(|a| arg(a, out)),
            Node::Truthy(a) => arg(a, out),
            Node::EachN { n: a, .. } | Node::EachT { step: a, .. } | Node::Limit { n: a, .. } => {
                arg(a, out)
            }
            Node::Gate(g) => {
                arg(&g.duration, out);
                arg(&g.input, out);
            }
        }
    }
    let mut out = Vec::new();
    node(&m.node, &mut out);
    out
}

/// Bug "a large condition copied per entry" (hostile probe of 2026-11-30): each entry's
/// cursor compiled its own copy of the condition, texts included, so a 1 MB condition of
/// 33 parts over 1,000 entries held 1 GB per query (5 GB for five ReductStore sessions left
/// unread). A query compiles once and each entry takes a clone, which shares the texts.
#[test]
fn a_clone_of_a_matcher_shares_its_texts() {
    let big = "A".repeat(100_000);
    let c = Condition::And(vec![
        cmp(CmpOp::Eq, l("k"), text(&big)),
        Condition::Str(StrOp::Contains, l("other"), text(&big)),
        Condition::Exists(vec!["present".into()]),
        Condition::Aggregate(Agg::EachN, l("n")),
    ]);
    let m = Matcher::new(&c, false, false);
    let copy = m.clone();
    let (a, b) = (texts(&m), texts(&copy));
    assert_eq!(a.len(), 6, "{a:?}");
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!(Arc::ptr_eq(x, y), "{x:?} was copied");
    }
    // Each clone keeps its own aggregation state: each entry counts its own records.
    let proto = Matcher::new(&Condition::EachN(2), false, false);
    let (mut x, mut y) = (proto.clone(), proto.clone());
    let first = x.matches(1, &labels(&[])).unwrap();
    assert_ne!(x.matches(2, &labels(&[])).unwrap(), first);
    assert_eq!(
        y.matches(1, &labels(&[])).unwrap(),
        first,
        "the clones share a count"
    );
}
