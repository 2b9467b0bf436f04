//! Conditions on records: a typed form of ReductStore's conditional query language (`when`).
//!
//! A [`Condition`] is evaluated on what the index holds about a record (its timestamp and
//! labels), so a record that does not match costs no payload read. The JSON form is parsed by
//! the server (`server/src/when.rs`); the engine only sees this tree.
//!
//! Values: a label value (and a string constant) that reads as `true`/`false`, an integer or
//! a float is a number (`true` = 1, `false` = 0); anything else is text. Two numbers compare
//! as numbers, two texts compare byte-wise, a number and a text are never equal and never
//! ordered (`$ne` is true, `$gt`/`$lt`... false). A comparison that names a missing label is
//! false; with `strict` it is an error naming the label instead.
//!
//! The aggregation operators (`$each_n`, `$each_t`, `$limit`) keep state across the records
//! of one query and, like every operator, are evaluated in order and only when reached: in
//! `{"&score": {"$gt": 10}, "$each_n": 5}` every fifth record with a score above 10 matches.

use std::cmp::Ordering;

use crate::record::Labels;

/// A constant of a condition.
#[derive(Debug, Clone)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Text; parsed like a label value when compared (`"10"` is the number 10).
    Str(String),
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Str(a), Value::Str(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

/// What a comparison compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A label's value (`"&name"`).
    Label(String),
    /// The record's timestamp in microseconds (`"$timestamp"`, `"$id"`).
    Timestamp,
    Const(Value),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
}

impl CmpOp {
    /// The operator's name in the JSON language.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "$eq",
            CmpOp::Ne => "$ne",
            CmpOp::Gt => "$gt",
            CmpOp::Gte => "$gte",
            CmpOp::Lt => "$lt",
            CmpOp::Lte => "$lte",
        }
    }
}

/// A condition on a record's timestamp and labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// All hold (`$and`, `$all_of`, and a JSON object with several keys); true when empty.
    And(Vec<Condition>),
    /// At least one holds (`$or`, `$any_of`); false when empty.
    Or(Vec<Condition>),
    /// None holds (`$not`, `$none_of`).
    Not(Vec<Condition>),
    Compare(CmpOp, Operand, Operand),
    /// The operand equals one of the values (`$in`).
    In(Operand, Vec<Operand>),
    /// The operand equals none of the values (`$nin`).
    NotIn(Operand, Vec<Operand>),
    /// Every label exists (`$exists`, `$has`).
    Exists(Vec<String>),
    /// An operand used as a condition: a number is true unless 0, a text unless empty.
    Truthy(Operand),
    /// Every n-th record that reaches it (n ≥ 1).
    EachN(u64),
    /// A record that reaches it at least this many microseconds after the last one it kept
    /// (the first one reaching it sets the clock and is not kept, as in ReductStore).
    EachT(u64),
    /// The first n records that reach it; the query ends at the next one.
    Limit(u64),
}

/// Why evaluation stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A strict condition named a label the record does not have.
    Missing(String),
    /// A `$limit` was reached: the query ends.
    Limit,
}

/// A condition with the state of its aggregation operators, for one query.
#[derive(Debug)]
pub(crate) struct Matcher {
    node: Node,
    strict: bool,
    descending: bool,
}

#[derive(Debug)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Vec<Node>),
    Compare(CmpOp, Arg, Arg),
    In(Arg, Vec<Arg>),
    NotIn(Arg, Vec<Arg>),
    Exists(Vec<String>),
    Truthy(Arg),
    EachN { n: u64, seen: u64 },
    EachT { step: u64, last: Option<u64> },
    Limit { n: u64, seen: u64 },
}

/// An operand with its constant already classified.
#[derive(Debug)]
enum Arg {
    Label(String),
    Timestamp,
    Num(Num),
    Text(String),
}

#[derive(Debug, Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
}

/// A value while comparing: a number or borrowed text.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Num(Num),
    Text(&'a str),
}

fn classify(s: &str) -> Val<'_> {
    match s {
        "true" => Val::Num(Num::I(1)),
        "false" => Val::Num(Num::I(0)),
        _ => {
            let b = s.as_bytes();
            // Only strings that start like a number (or `inf`/`nan`) are tried as one.
            let maybe = matches!(b.first(), Some(c) if c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'i' | b'I' | b'n' | b'N'));
            if !maybe {
                return Val::Text(s);
            }
            if let Ok(i) = s.parse::<i64>() {
                Val::Num(Num::I(i))
            } else if let Ok(f) = s.parse::<f64>() {
                Val::Num(Num::F(f))
            } else {
                Val::Text(s)
            }
        }
    }
}

fn cmp_num(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::I(a), Num::I(b)) => Some(a.cmp(&b)),
        (Num::I(a), Num::F(b)) => (a as f64).partial_cmp(&b),
        (Num::F(a), Num::I(b)) => a.partial_cmp(&(b as f64)),
        (Num::F(a), Num::F(b)) => a.partial_cmp(&b),
    }
}

/// `None`: not comparable (a number against a text, or NaN).
fn compare(a: Val<'_>, b: Val<'_>) -> Option<Ordering> {
    match (a, b) {
        (Val::Num(a), Val::Num(b)) => cmp_num(a, b),
        (Val::Text(a), Val::Text(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

fn holds(op: CmpOp, ord: Option<Ordering>) -> bool {
    use Ordering::*;
    match op {
        CmpOp::Eq => ord == Some(Equal),
        CmpOp::Ne => ord != Some(Equal),
        CmpOp::Gt => ord == Some(Greater),
        CmpOp::Gte => matches!(ord, Some(Greater | Equal)),
        CmpOp::Lt => ord == Some(Less),
        CmpOp::Lte => matches!(ord, Some(Less | Equal)),
    }
}

fn compile_arg(o: &Operand) -> Arg {
    match o {
        Operand::Label(l) => Arg::Label(l.clone()),
        Operand::Timestamp => Arg::Timestamp,
        Operand::Const(Value::Bool(b)) => Arg::Num(Num::I(*b as i64)),
        Operand::Const(Value::Int(i)) => Arg::Num(Num::I(*i)),
        Operand::Const(Value::Float(f)) => Arg::Num(Num::F(*f)),
        Operand::Const(Value::Str(s)) => match classify(s) {
            Val::Num(n) => Arg::Num(n),
            Val::Text(_) => Arg::Text(s.clone()),
        },
    }
}

fn compile(c: &Condition) -> Node {
    let all = |v: &[Condition]| v.iter().map(compile).collect();
    let args = |v: &[Operand]| v.iter().map(compile_arg).collect();
    match c {
        Condition::And(v) => Node::And(all(v)),
        Condition::Or(v) => Node::Or(all(v)),
        Condition::Not(v) => Node::Not(all(v)),
        Condition::Compare(op, a, b) => Node::Compare(*op, compile_arg(a), compile_arg(b)),
        Condition::In(a, v) => Node::In(compile_arg(a), args(v)),
        Condition::NotIn(a, v) => Node::NotIn(compile_arg(a), args(v)),
        Condition::Exists(v) => Node::Exists(v.clone()),
        Condition::Truthy(a) => Node::Truthy(compile_arg(a)),
        Condition::EachN(n) => Node::EachN {
            n: (*n).max(1),
            seen: 0,
        },
        Condition::EachT(step) => Node::EachT {
            step: *step,
            last: None,
        },
        Condition::Limit(n) => Node::Limit { n: *n, seen: 0 },
    }
}

/// A record as a condition sees it.
struct Rec<'a> {
    ts: u64,
    labels: &'a Labels,
}

impl Matcher {
    pub(crate) fn new(c: &Condition, strict: bool, descending: bool) -> Matcher {
        Matcher {
            node: compile(c),
            strict,
            descending,
        }
    }

    /// Whether the record matches; `Err` ends the query.
    pub(crate) fn matches(&mut self, ts: u64, labels: &Labels) -> Result<bool, Stop> {
        let rec = Rec { ts, labels };
        eval(&mut self.node, &rec, self.strict, self.descending)
    }
}

/// An operand's value; `Ok(None)` for a missing label (not strict).
fn value<'a>(a: &'a Arg, rec: &Rec<'a>, strict: bool) -> Result<Option<Val<'a>>, Stop> {
    Ok(Some(match a {
        Arg::Label(l) => match rec.labels.get(l) {
            Some(v) => classify(v),
            None if strict => return Err(Stop::Missing(l.clone())),
            None => return Ok(None),
        },
        Arg::Timestamp => Val::Num(Num::I(rec.ts as i64)),
        Arg::Num(n) => Val::Num(*n),
        Arg::Text(t) => Val::Text(t),
    }))
}

/// Whether `a` equals one of `v`; `None` when a label is missing (not strict).
fn member(a: &Arg, v: &[Arg], rec: &Rec<'_>, strict: bool) -> Result<Option<bool>, Stop> {
    let Some(x) = value(a, rec, strict)? else {
        return Ok(None);
    };
    for item in v {
        let Some(y) = value(item, rec, strict)? else {
            return Ok(None);
        };
        if compare(x, y) == Some(Ordering::Equal) {
            return Ok(Some(true));
        }
    }
    Ok(Some(false))
}

fn eval(n: &mut Node, rec: &Rec<'_>, strict: bool, desc: bool) -> Result<bool, Stop> {
    Ok(match n {
        Node::And(v) => {
            for c in v {
                if !eval(c, rec, strict, desc)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Or(v) => {
            for c in v {
                if eval(c, rec, strict, desc)? {
                    return Ok(true);
                }
            }
            false
        }
        Node::Not(v) => {
            for c in v {
                if eval(c, rec, strict, desc)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Compare(op, a, b) => {
            let (Some(x), Some(y)) = (value(a, rec, strict)?, value(b, rec, strict)?) else {
                return Ok(false);
            };
            holds(*op, compare(x, y))
        }
        Node::In(a, v) => member(a, v, rec, strict)? == Some(true),
        Node::NotIn(a, v) => member(a, v, rec, strict)? == Some(false),
        Node::Exists(v) => v.iter().all(|l| rec.labels.contains_key(l)),
        Node::Truthy(a) => match value(a, rec, strict)? {
            None => false,
            Some(Val::Num(Num::I(i))) => i != 0,
            Some(Val::Num(Num::F(f))) => f != 0.0,
            Some(Val::Text(t)) => !t.is_empty(),
        },
        Node::EachN { n, seen } => {
            *seen += 1;
            *seen % *n == 0
        }
        Node::EachT { step, last } => {
            let anchor = *last.get_or_insert(rec.ts);
            let gone = if desc {
                anchor.checked_sub(rec.ts)
            } else {
                rec.ts.checked_sub(anchor)
            };
            match gone {
                // time went backwards: start again from here
                None => {
                    *last = Some(rec.ts);
                    false
                }
                Some(d) if d >= *step => {
                    *last = Some(rec.ts);
                    true
                }
                Some(_) => false,
            }
        }
        Node::Limit { n, seen } => {
            *seen += 1;
            if *seen > *n {
                return Err(Stop::Limit);
            }
            true
        }
    })
}

#[cfg(test)]
#[path = "when_tests.rs"]
mod tests;
