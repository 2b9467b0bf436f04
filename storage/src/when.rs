//! Conditions on records: a typed form of ReductStore's conditional query language (`when`),
//! with ReductStore 1.21's semantics.
//!
//! A [`Condition`] is evaluated on what the index holds about a record (its timestamp and
//! labels), so a record that does not match costs no payload read. The JSON form is parsed by
//! the server (`server/src/when.rs`); the engine only sees this tree.
//!
//! Values, as in ReductStore: a label value is read as a boolean (`true`/`false`), else an
//! integer, else a float, else text; a constant keeps its JSON type (the string `"10"` is
//! text, the number `10` an integer; a duration literal such as `"5s"` is a duration, an
//! integer of microseconds). Numbers, booleans (1 and 0) and durations compare as numbers,
//! two texts byte-wise; a text and a non-text are never equal and never ordered (`$ne` is
//! true, `$gt`/`$lt`... false).
//!
//! Errors: a condition that names a label the record does not have (or `$ref`s one, or
//! divides by zero, adds a text to a number...) fails *as a whole* for that record: the
//! record does not match, whatever `$not`/`$or` surround the failing part. With `strict` the
//! failure is an error of the query instead.
//!
//! Bounds: a text an operator computes (`$add` of texts, `$cast` to `string`) is at most
//! [`MAX_TEXT`] bytes, and one evaluation of a condition on one record does at most
//! [`MAX_TEXT_WORK`] bytes of text work (texts built, compared, searched or parsed as
//! numbers). Past either the record fails like a division by zero. With them the cost of a
//! record is linear in the condition's size plus a bounded amount of text work, whatever
//! the condition: a `$add` of 2000 copies of a 4000-byte label used to cost seconds of CPU
//! per record (each step re-copied the join so far), and nothing ended it.
//!
//! The aggregation operators (`$each_n`, `$each_t`, `$limit`) keep state across the records
//! of one query and, like every operator, are evaluated in order and only when reached: in
//! `{"&score": {"$gt": 10}, "$each_n": 5}` every fifth record with a score above 10 matches.

use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Ordering;
use std::sync::Arc;

use crate::record::Labels;

/// The longest text an operator may compute (`$add` of texts, `$cast` to `string`), in
/// bytes: 64 KiB, all the label bytes a record may carry (`MAX_LABELS_BYTES`), so a join
/// of every label of a record fits. A longer one fails the record (with `strict`, the
/// query's `QueryError::Invalid`).
pub const MAX_TEXT: usize = 64 << 10;

/// The most text work one evaluation of a condition on one record may do, in bytes: texts
/// copied into a computed text, compared, searched or parsed as numbers. The cap on one
/// text does not bound a condition that builds or compares many (a 1 MiB condition naming a
/// 4 KiB label 150,000 times); this does. 4 MiB is four times the largest condition the
/// server reads (a 1 MiB query body), so a condition only reaches it by re-reading long
/// labels or building texts over and over, and it keeps one record's text work to around
/// a millisecond. Past it the record fails, as past [`MAX_TEXT`].
pub const MAX_TEXT_WORK: usize = 4 << 20;

/// A constant of a condition.
#[derive(Debug, Clone)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Text, compared as text (`"10"` is not the number 10).
    Str(String),
    /// A duration literal (`"5s"`), in microseconds: compares as an integer.
    Duration(i64),
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Duration(a), Value::Duration(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Str(a), Value::Str(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

/// An operator computing a value from operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// The sum of the operands (`$add`; 0 for none).
    Add,
    /// `$sub`: the first minus the second.
    Sub,
    /// The product of the operands (`$mult`; 1 for none).
    Mult,
    /// `$div`: float division.
    Div,
    /// `$div_num`: integer division.
    DivNum,
    /// `$rem`: the remainder.
    Rem,
    /// `$abs`.
    Abs,
    /// `$cast`: the first operand as the type the second names (`bool`, `int`, `float`,
    /// `string`, `duration`).
    Cast,
    /// `$ref`: the label whose name is the operand's value.
    Ref,
    /// Calendar fields of a timestamp in microseconds (UTC): `$second`...`$weekday`
    /// (Monday = 0).
    Second,
    Minute,
    Hour,
    Day,
    Month,
    Year,
    Weekday,
}

impl Func {
    /// The operator's name in the JSON language.
    pub fn name(self) -> &'static str {
        match self {
            Func::Add => "$add",
            Func::Sub => "$sub",
            Func::Mult => "$mult",
            Func::Div => "$div",
            Func::DivNum => "$div_num",
            Func::Rem => "$rem",
            Func::Abs => "$abs",
            Func::Cast => "$cast",
            Func::Ref => "$ref",
            Func::Second => "$second",
            Func::Minute => "$minute",
            Func::Hour => "$hour",
            Func::Day => "$day",
            Func::Month => "$month",
            Func::Year => "$year",
            Func::Weekday => "$weekday",
        }
    }
}

/// What a comparison compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A label's value (`"&name"`).
    Label(String),
    /// A computed label (`"@name"`), set by ReductStore extensions; tsblob has none, so it
    /// is always missing.
    Computed(String),
    /// The record's timestamp in microseconds (`"$timestamp"`, `"$id"`).
    Timestamp,
    Const(Value),
    /// A computed value (`{"$add": ["&a", 1]}`).
    Func(Func, Vec<Operand>),
    /// A condition used as a value: a boolean.
    Cond(Box<Condition>),
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

/// A string operator: both operands are compared as their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrOp {
    Contains,
    StartsWith,
    EndsWith,
}

/// An aggregation operator whose operand is computed per record (`{"$each_n": "&n"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    EachN,
    EachT,
    Limit,
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
    /// Exactly one holds (`$xor`, `$one_of`); every operand is evaluated.
    Xor(Vec<Condition>),
    Compare(CmpOp, Operand, Operand),
    /// The operand equals one of the values (`$in`).
    In(Operand, Vec<Operand>),
    /// The operand equals none of the values (`$nin`).
    NotIn(Operand, Vec<Operand>),
    /// Every label exists (`$exists`, `$has`).
    Exists(Vec<String>),
    /// Every label named by these operands' values (as text) exists: `$has` with a computed
    /// name (`{"$has": ["&which"]}`, as in ReductStore). Operands are evaluated in order and
    /// the first name missing makes it false; an operand that fails fails the record.
    ExistsOf(Vec<Operand>),
    /// `$contains`, `$starts_with`, `$ends_with` on the operands' text.
    Str(StrOp, Operand, Operand),
    /// An operand used as a condition: a number is true unless 0, a text unless empty.
    Truthy(Operand),
    /// Every n-th record that reaches it (n ≥ 1).
    EachN(u64),
    /// A record that reaches it at least this many microseconds after the last one it kept
    /// (the first one reaching it sets the clock and is not kept, as in ReductStore).
    EachT(u64),
    /// The first n records that reach it; the query ends at the next one.
    Limit(u64),
    /// `$gate`: an edge-triggered window. A record whose input (the second operand, read as
    /// a boolean) turns true after being false opens the gate for the duration (the first
    /// operand: a duration, or a number of seconds); while open, a record matches when its
    /// input is true. Once the window has passed, no record matches until the input has
    /// been false again and turns true (which opens a new window). Time running backwards
    /// (against the query's order) starts over.
    Gate(Operand, Operand),
    /// An aggregation operator with a computed operand (`$each_n`/`$limit`: an integer,
    /// `$each_t`: a duration, or a number of seconds); a record whose operand is invalid
    /// (0 for `$each_n`, a text) fails.
    Aggregate(Agg, Operand),
}

/// The most parts (operators, operands, label names) a condition may have: what one
/// record's evaluation may walk, and what each entry of a query holds a copy of. A
/// `{"$in": [...]}` of 520,000 numbers fits a 1 MiB body; evaluated on every record it
/// cost each record 520,000 comparisons, and each entry of the query held ~16 MB of it.
pub const MAX_CONDITION_PARTS: usize = 4096;

/// The most condition parts a query may hold over all its entries (each entry's cursor has
/// its own copy, with its own aggregation state): ≈ 64 MB.
pub const MAX_QUERY_CONDITION_PARTS: usize = 1 << 20;

impl Condition {
    /// Its operators, operands and label names, counted one each (see
    /// [`MAX_CONDITION_PARTS`]).
    pub fn parts(&self) -> usize {
        fn all(cs: &[Condition]) -> usize {
            cs.iter().map(Condition::parts).sum()
        }
        1 + match self {
            Condition::And(cs) | Condition::Or(cs) | Condition::Not(cs) | Condition::Xor(cs) => {
                all(cs)
            }
            Condition::Compare(_, a, b) | Condition::Str(_, a, b) | Condition::Gate(a, b) => {
                a.parts() + b.parts()
            }
            Condition::In(o, list) | Condition::NotIn(o, list) => {
                o.parts() + list.iter().map(Operand::parts).sum::<usize>()
            }
            Condition::Exists(names) => names.len(),
            Condition::ExistsOf(os) => os.iter().map(Operand::parts).sum(),
            Condition::Truthy(o) | Condition::Aggregate(_, o) => o.parts(),
            Condition::EachN(_) | Condition::EachT(_) | Condition::Limit(_) => 0,
        }
    }
}

impl Operand {
    /// Itself and what it is computed from, one each.
    pub fn parts(&self) -> usize {
        1 + match self {
            Operand::Func(_, args) => args.iter().map(Operand::parts).sum(),
            Operand::Cond(c) => c.parts(),
            Operand::Label(_) | Operand::Computed(_) | Operand::Timestamp | Operand::Const(_) => 0,
        }
    }
}

/// Why evaluation stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A strict condition named a label the record does not have.
    Missing(String),
    /// A strict condition could not be evaluated on the record (a division by zero...).
    Invalid(String),
    /// A `$limit` was reached: the query ends.
    Limit,
}

/// A condition with the state of its aggregation operators, for one query.
///
/// A clone shares the condition's texts (label names, text constants) and copies only its
/// operators and their state: a query compiles its condition once and each entry's cursor
/// (or a feed reader's entry) takes a clone, so the copies together are bounded by
/// [`MAX_QUERY_CONDITION_PARTS`] whatever the texts' sizes (hostile probe of 2026-11-30: a
/// 1 MB condition over 1,000 entries held 1 GB per query, kept as long as its session).
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    node: Node,
    strict: bool,
    descending: bool,
    /// The text work of the last record evaluated, for tests to check that it is linear.
    #[cfg(test)]
    last_work: usize,
}

#[derive(Debug, Clone)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Vec<Node>),
    Xor(Vec<Node>),
    Compare(CmpOp, Arg, Arg),
    In(Arg, Vec<Arg>),
    NotIn(Arg, Vec<Arg>),
    Exists(Vec<Arc<str>>),
    ExistsOf(Vec<Arg>),
    Str(StrOp, Arg, Arg),
    Truthy(Arg),
    EachN { n: Arg, seen: i64 },
    EachT { step: Arg, last: Option<u64> },
    Limit { n: Arg, seen: i64 },
    Gate(Box<Gate>),
}

/// The state of a `$gate` (see [`Condition::Gate`]); times are positions along the query's
/// order (descending queries count backwards from `u64::MAX`).
#[derive(Debug, Clone)]
struct Gate {
    duration: Arg,
    input: Arg,
    /// The end of the open window.
    deadline: Option<u64>,
    /// The input of the last record evaluated.
    previous: bool,
    /// The window has passed: closed until the input is false again.
    reset: bool,
    /// The last record reaching the gate.
    last: Option<u64>,
}

/// An operand ready to evaluate; its texts shared by every clone of the matcher.
#[derive(Debug, Clone)]
enum Arg {
    Label(Arc<str>),
    Computed(Arc<str>),
    Timestamp,
    /// A constant other than text.
    Const(V<'static>),
    /// A text constant.
    Text(Arc<str>),
    Func(Func, Vec<Arg>),
    Cond(Box<Node>),
}

/// A value while evaluating.
#[derive(Debug, Clone)]
enum V<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Dur(i64),
    Text(Cow<'a, str>),
}

/// Why a record failed.
enum Fail {
    Missing(String),
    Invalid(String),
    Limit,
}

type R<T> = std::result::Result<T, Fail>;

fn invalid<T>(msg: impl Into<String>) -> R<T> {
    Err(Fail::Invalid(msg.into()))
}

/// A label value as ReductStore reads it: a boolean, else an integer, else a float, else text.
fn parse_label(s: &str) -> V<'_> {
    match s {
        "true" => V::Bool(true),
        "false" => V::Bool(false),
        _ => {
            if !looks_numeric(s) {
                return V::Text(Cow::Borrowed(s));
            }
            if let Ok(i) = s.parse::<i64>() {
                V::Int(i)
            } else if let Ok(f) = s.parse::<f64>() {
                V::Float(f)
            } else {
                V::Text(Cow::Borrowed(s))
            }
        }
    }
}

/// Only strings that start like a number (or `inf`/`nan`) are tried as one: the others
/// read as text without a scan.
fn looks_numeric(s: &str) -> bool {
    matches!(s.as_bytes().first(), Some(c) if c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'i' | b'I' | b'n' | b'N'))
}

/// A text in an error message: quoted, and cut after its first 64 characters, as a
/// computed text may be 64 KiB and a strict query sends the message to the client.
fn quoted(t: &str) -> String {
    const SHOWN: usize = 64;
    match t.char_indices().nth(SHOWN) {
        None => format!("{t:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &t[..cut], t.len()),
    }
}

/// A number of a value; `None` for text.
#[derive(Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
}

impl V<'_> {
    fn num(&self) -> Option<Num> {
        match self {
            V::Bool(b) => Some(Num::I(*b as i64)),
            V::Int(i) | V::Dur(i) => Some(Num::I(*i)),
            V::Float(f) => Some(Num::F(*f)),
            V::Text(_) => None,
        }
    }

    fn truthy(&self) -> bool {
        match self {
            V::Bool(b) => *b,
            V::Int(i) | V::Dur(i) => *i != 0,
            V::Float(f) => *f != 0.0,
            V::Text(t) => !t.is_empty(),
        }
    }

    /// The value as an integer; parsing a text counts as text work of the record.
    fn as_int(&self, rec: &Rec<'_>) -> R<i64> {
        match self {
            V::Bool(b) => Ok(*b as i64),
            V::Int(i) | V::Dur(i) => Ok(*i),
            V::Float(f) => Ok(*f as i64),
            V::Text(t) => {
                rec.charge(t.len())?;
                match t.parse::<i64>() {
                    Ok(i) => Ok(i),
                    Err(_) => invalid(format!("{} is not an integer", quoted(t))),
                }
            }
        }
    }

    /// The value as a float; parsing a text counts as text work of the record.
    fn as_float(&self, rec: &Rec<'_>) -> R<f64> {
        match self {
            V::Bool(b) => Ok(*b as i64 as f64),
            V::Int(i) | V::Dur(i) => Ok(*i as f64),
            V::Float(f) => Ok(*f),
            V::Text(t) => {
                rec.charge(t.len())?;
                match t.parse::<f64>() {
                    Ok(f) => Ok(f),
                    Err(_) => invalid(format!("{} is not a number", quoted(t))),
                }
            }
        }
    }

    fn text(&self) -> Cow<'_, str> {
        match self {
            V::Bool(b) => Cow::Owned(b.to_string()),
            V::Int(i) => Cow::Owned(i.to_string()),
            V::Float(f) => Cow::Owned(f.to_string()),
            V::Dur(us) => Cow::Owned(fmt_duration(*us)),
            V::Text(t) => Cow::Borrowed(t),
        }
    }

    /// The value, a text borrowed rather than copied (a constant is read on every record).
    fn borrowed(&self) -> V<'_> {
        match self {
            V::Bool(b) => V::Bool(*b),
            V::Int(i) => V::Int(*i),
            V::Float(f) => V::Float(*f),
            V::Dur(d) => V::Dur(*d),
            V::Text(t) => V::Text(Cow::Borrowed(t)),
        }
    }
}

/// A duration as ReductStore writes it: `1s 500ms`, `0us`.
fn fmt_duration(mut us: i64) -> String {
    const UNITS: [(&str, i64); 6] = [
        ("d", 86_400_000_000),
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
        ("us", 1),
    ];
    let mut parts = Vec::new();
    for (unit, size) in UNITS {
        if us.unsigned_abs() >= size as u64 {
            let v = us / size;
            parts.push(format!("{v}{unit}"));
            us -= v * size;
        }
    }
    if parts.is_empty() {
        "0us".to_string()
    } else {
        parts.join(" ")
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

/// The text work of comparing two values: the shorter text's length when both are texts
/// (a byte-wise comparison reads at most that much of each), else none.
fn compare_cost(a: &V<'_>, b: &V<'_>) -> usize {
    match (a, b) {
        (V::Text(a), V::Text(b)) => a.len().min(b.len()),
        _ => 0,
    }
}

/// `None`: not comparable (a text against a non-text, or NaN).
fn compare(a: &V<'_>, b: &V<'_>) -> Option<Ordering> {
    match (a, b) {
        (V::Text(a), V::Text(b)) => Some(a.as_ref().cmp(b.as_ref())),
        _ => cmp_num(a.num()?, b.num()?),
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

fn compile_value(v: &Value) -> Arg {
    Arg::Const(match v {
        Value::Bool(b) => V::Bool(*b),
        Value::Int(i) => V::Int(*i),
        Value::Float(f) => V::Float(*f),
        Value::Duration(d) => V::Dur(*d),
        Value::Str(s) => return Arg::Text(s.as_str().into()),
    })
}

fn compile_arg(o: &Operand) -> Arg {
    match o {
        Operand::Label(l) => Arg::Label(l.as_str().into()),
        Operand::Computed(l) => Arg::Computed(l.as_str().into()),
        Operand::Timestamp => Arg::Timestamp,
        Operand::Const(v) => compile_value(v),
        Operand::Func(f, v) => Arg::Func(*f, v.iter().map(compile_arg).collect()),
        Operand::Cond(c) => Arg::Cond(Box::new(compile(c))),
    }
}

fn compile(c: &Condition) -> Node {
    let all = |v: &[Condition]| v.iter().map(compile).collect();
    let args = |v: &[Operand]| v.iter().map(compile_arg).collect();
    let int = |n: u64| Arg::Const(V::Int(i64::try_from(n).unwrap_or(i64::MAX)));
    match c {
        Condition::And(v) => Node::And(all(v)),
        Condition::Or(v) => Node::Or(all(v)),
        Condition::Not(v) => Node::Not(all(v)),
        Condition::Xor(v) => Node::Xor(all(v)),
        Condition::Compare(op, a, b) => Node::Compare(*op, compile_arg(a), compile_arg(b)),
        Condition::In(a, v) => Node::In(compile_arg(a), args(v)),
        Condition::NotIn(a, v) => Node::NotIn(compile_arg(a), args(v)),
        Condition::Exists(v) => Node::Exists(v.iter().map(|l| l.as_str().into()).collect()),
        Condition::ExistsOf(v) => Node::ExistsOf(args(v)),
        Condition::Str(op, a, b) => Node::Str(*op, compile_arg(a), compile_arg(b)),
        Condition::Truthy(a) => Node::Truthy(compile_arg(a)),
        Condition::EachN(n) => Node::EachN {
            n: int((*n).max(1)),
            seen: 0,
        },
        Condition::EachT(step) => Node::EachT {
            step: Arg::Const(V::Dur(i64::try_from(*step).unwrap_or(i64::MAX))),
            last: None,
        },
        Condition::Limit(n) => Node::Limit {
            n: int(*n),
            seen: 0,
        },
        Condition::Aggregate(agg, a) => {
            let a = compile_arg(a);
            match agg {
                Agg::EachN => Node::EachN { n: a, seen: 0 },
                Agg::EachT => Node::EachT {
                    step: a,
                    last: None,
                },
                Agg::Limit => Node::Limit { n: a, seen: 0 },
            }
        }
        Condition::Gate(duration, input) => Node::Gate(Box::new(Gate {
            duration: compile_arg(duration),
            input: compile_arg(input),
            deadline: None,
            previous: false,
            reset: false,
            last: None,
        })),
    }
}

/// A record as a condition sees it.
struct Rec<'a> {
    ts: u64,
    labels: &'a Labels,
    desc: bool,
    /// The text work done on this record so far, in bytes (see [`MAX_TEXT_WORK`]). A `Cell`
    /// because the record is shared by every operand the evaluation reaches.
    work: Cell<usize>,
}

impl Rec<'_> {
    /// Counts `bytes` of text work; past [`MAX_TEXT_WORK`] the record fails, which also
    /// ends its evaluation (every operator passes a failure up at once).
    fn charge(&self, bytes: usize) -> R<()> {
        let work = self.work.get().saturating_add(bytes);
        self.work.set(work);
        if work > MAX_TEXT_WORK {
            return invalid(format!(
                "the condition does more than {MAX_TEXT_WORK} bytes of text work on one record (joining, comparing or searching long texts): make it simpler"
            ));
        }
        Ok(())
    }
}

impl Matcher {
    pub(crate) fn new(c: &Condition, strict: bool, descending: bool) -> Matcher {
        Matcher {
            node: compile(c),
            strict,
            descending,
            #[cfg(test)]
            last_work: 0,
        }
    }

    /// Whether the record matches; `Err` ends the query.
    pub(crate) fn matches(&mut self, ts: u64, labels: &Labels) -> Result<bool, Stop> {
        let rec = Rec {
            ts,
            labels,
            desc: self.descending,
            work: Cell::new(0),
        };
        let verdict = eval(&mut self.node, &rec);
        #[cfg(test)]
        {
            self.last_work = rec.work.get();
        }
        match verdict {
            Ok(b) => Ok(b),
            Err(Fail::Limit) => Err(Stop::Limit),
            Err(_) if !self.strict => Ok(false),
            Err(Fail::Missing(l)) => Err(Stop::Missing(l)),
            Err(Fail::Invalid(m)) => Err(Stop::Invalid(m)),
        }
    }
}

fn label<'a>(rec: &Rec<'a>, name: &str) -> R<V<'a>> {
    match rec.labels.get(name) {
        Some(v) => {
            // A value that starts like a number is parsed as one: a scan of up to 4 KiB,
            // on every reference to the label.
            if looks_numeric(v) {
                rec.charge(v.len())?;
            }
            Ok(parse_label(v))
        }
        None => Err(Fail::Missing(name.to_string())),
    }
}

/// An operand's value.
fn value<'a>(a: &'a mut Arg, rec: &Rec<'a>) -> R<V<'a>> {
    Ok(match a {
        Arg::Label(l) => return label(rec, l),
        Arg::Computed(l) => return Err(Fail::Missing(format!("@{l}"))),
        Arg::Timestamp => V::Int(rec.ts as i64),
        Arg::Const(v) => v.borrowed(),
        Arg::Text(t) => V::Text(Cow::Borrowed(t)),
        Arg::Cond(c) => V::Bool(eval(c, rec)?),
        Arg::Func(f, args) => return func(*f, args, rec),
    })
}

/// `$add` of two texts: `b` appended to `a`. The join so far (owned) grows in place, and
/// only a borrowed `a` (a label, a constant) is copied, once: a `$add` of N texts copies
/// their total length, where building a new string per step copied O(N²) of it.
fn join<'a>(a: Cow<'a, str>, b: &str, rec: &Rec<'_>) -> R<V<'a>> {
    let len = a.len().saturating_add(b.len());
    if len > MAX_TEXT {
        return invalid(format!(
            "$add: joining the texts makes {len} bytes, over the limit of {MAX_TEXT} bytes for a computed text"
        ));
    }
    rec.charge(match a {
        Cow::Borrowed(_) => len,
        Cow::Owned(_) => b.len(),
    })?;
    let mut s = a.into_owned();
    s.push_str(b);
    Ok(V::Text(Cow::Owned(s)))
}

fn arith<'a>(f: Func, a: V<'a>, b: V<'_>, rec: &Rec<'_>) -> R<V<'a>> {
    // `$add` of two texts joins them, as in ReductStore; any other text is an error.
    let (a, b) = match (f, a, b) {
        (Func::Add, V::Text(x), V::Text(y)) => return join(x, &y, rec),
        (_, a, b) => (a, b),
    };
    let (Some(x), Some(y)) = (a.num(), b.num()) else {
        return invalid(format!("{} takes numbers, not text", f.name()));
    };
    Ok(match f {
        Func::Add | Func::Sub | Func::Mult | Func::Rem => match (x, y) {
            (Num::I(x), Num::I(y)) => V::Int(match f {
                Func::Add => x.wrapping_add(y),
                Func::Sub => x.wrapping_sub(y),
                Func::Mult => x.wrapping_mul(y),
                _ => match x.checked_rem(y) {
                    Some(r) => r,
                    None if y == 0 => return invalid("$rem: division by zero"),
                    None => 0,
                },
            }),
            _ => {
                let (x, y) = (num_f(x), num_f(y));
                V::Float(match f {
                    Func::Add => x + y,
                    Func::Sub => x - y,
                    Func::Mult => x * y,
                    _ => x % y,
                })
            }
        },
        Func::Div => {
            let d = b.as_float(rec)?;
            if d == 0.0 {
                return invalid("$div: division by zero");
            }
            V::Float(a.as_float(rec)? / d)
        }
        Func::DivNum => {
            let d = b.as_int(rec)?;
            if d == 0 {
                return invalid("$div_num: division by zero");
            }
            V::Int(a.as_int(rec)?.wrapping_div(d))
        }
        _ => return invalid(format!("{} is not arithmetic", f.name())),
    })
}

fn num_f(n: Num) -> f64 {
    match n {
        Num::I(i) => i as f64,
        Num::F(f) => f,
    }
}

fn func<'a>(f: Func, args: &'a mut [Arg], rec: &Rec<'a>) -> R<V<'a>> {
    let n = args.len();
    let mut it = args.iter_mut();
    let next = |it: &mut std::slice::IterMut<'a, Arg>| match it.next() {
        Some(a) => value(a, rec),
        None => invalid(format!("{} takes more operands", f.name())),
    };
    match f {
        Func::Add | Func::Mult => {
            // The first operand is kept as it is (a label stays borrowed), so a join copies
            // it only when a second text comes (`join`).
            let mut acc: Option<V<'a>> = None;
            for _ in 0..n {
                let v = next(&mut it)?;
                acc = Some(match acc {
                    None => v,
                    Some(a) => arith(f, a, v, rec)?,
                });
            }
            Ok(acc.unwrap_or(V::Int(if f == Func::Add { 0 } else { 1 })))
        }
        Func::Sub | Func::Div | Func::DivNum | Func::Rem => {
            let a = next(&mut it)?;
            let b = next(&mut it)?;
            arith(f, a, b, rec)
        }
        Func::Abs => Ok(match next(&mut it)? {
            V::Bool(b) => V::Int(b as i64),
            V::Int(i) | V::Dur(i) => V::Int(i.wrapping_abs()),
            V::Float(x) => V::Float(x.abs()),
            V::Text(_) => return invalid("$abs takes a number, not text"),
        }),
        Func::Cast => {
            let v = next(&mut it)?;
            let ty = next(&mut it)?;
            Ok(match ty.text().as_ref() {
                "bool" => V::Bool(v.truthy()),
                "int" => V::Int(v.as_int(rec)?),
                "float" => V::Float(v.as_float(rec)?),
                // a text is already one: moved, not copied (a number's text is short)
                "string" => match v {
                    V::Text(t) => V::Text(t),
                    other => V::Text(Cow::Owned(other.text().into_owned())),
                },
                "duration" => V::Dur(v.as_int(rec)?),
                other => return invalid(format!("$cast: unknown type {}", quoted(other))),
            })
        }
        Func::Ref => {
            let name = next(&mut it)?;
            let name = name.text();
            // the lookup compares the name with label keys
            rec.charge(name.len())?;
            label(rec, &name)
        }
        Func::Second
        | Func::Minute
        | Func::Hour
        | Func::Day
        | Func::Month
        | Func::Year
        | Func::Weekday => {
            let us = next(&mut it)?.as_int(rec)?;
            if n == 2 {
                let tz = next(&mut it)?;
                if !matches!(&tz, V::Text(t) if is_utc(t)) {
                    return invalid(format!("{}: tsblob knows the time zone UTC only", f.name()));
                }
            }
            Ok(V::Int(calendar(f, us)))
        }
    }
}

/// The names of UTC that the date operators accept as their time zone.
pub fn is_utc(tz: &str) -> bool {
    matches!(tz, "UTC" | "Etc/UTC" | "GMT" | "Etc/GMT" | "Zulu" | "UCT")
}

/// A calendar field of a timestamp in microseconds since the epoch, in UTC.
fn calendar(f: Func, us: i64) -> i64 {
    let secs = us.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // civil from days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    match f {
        Func::Second => sod % 60,
        Func::Minute => sod / 60 % 60,
        Func::Hour => sod / 3600,
        Func::Day => d,
        Func::Month => m,
        Func::Year => y,
        // 1970-01-01 was a Thursday (3 days after a Monday)
        _ => (days + 3).rem_euclid(7),
    }
}

fn eval(n: &mut Node, rec: &Rec<'_>) -> R<bool> {
    Ok(match n {
        Node::And(v) => {
            for c in v {
                if !eval(c, rec)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Or(v) => {
            for c in v {
                if eval(c, rec)? {
                    return Ok(true);
                }
            }
            false
        }
        Node::Not(v) => {
            for c in v {
                if eval(c, rec)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Xor(v) => {
            let mut count = 0;
            for c in v {
                count += eval(c, rec)? as usize;
            }
            count == 1
        }
        Node::Compare(op, a, b) => {
            let x = value(a, rec)?;
            let y = value(b, rec)?;
            rec.charge(compare_cost(&x, &y))?;
            holds(*op, compare(&x, &y))
        }
        Node::In(a, v) | Node::NotIn(a, v) => {
            let x = value(a, rec)?;
            let mut found = false;
            for item in v.iter_mut() {
                let y = value(item, rec)?;
                rec.charge(compare_cost(&x, &y))?;
                if compare(&x, &y) == Some(Ordering::Equal) {
                    found = true;
                    break;
                }
            }
            found == matches!(n, Node::In(..))
        }
        Node::Exists(v) => v.iter().all(|l| rec.labels.contains_key(&**l)),
        Node::ExistsOf(v) => {
            for a in v.iter_mut() {
                let name = value(a, rec)?;
                let name = name.text();
                // the lookup compares the name with label keys
                rec.charge(name.len())?;
                if !rec.labels.contains_key(name.as_ref()) {
                    return Ok(false);
                }
            }
            true
        }
        Node::Str(op, a, b) => {
            let x = value(a, rec)?;
            let y = value(b, rec)?;
            let (x, y) = (x.text(), y.text());
            // A search reads the whole text and the pattern (linear: `str::contains` is a
            // two-way search); a prefix or suffix test at most the shorter of them.
            rec.charge(match op {
                StrOp::Contains => x.len().saturating_add(y.len()),
                StrOp::StartsWith | StrOp::EndsWith => x.len().min(y.len()),
            })?;
            match op {
                StrOp::Contains => x.contains(y.as_ref()),
                StrOp::StartsWith => x.starts_with(y.as_ref()),
                StrOp::EndsWith => x.ends_with(y.as_ref()),
            }
        }
        Node::Truthy(a) => value(a, rec)?.truthy(),
        Node::EachN { n, seen } => {
            *seen += 1;
            let n = value(n, rec)?.as_int(rec)?;
            if n == 0 {
                return invalid("$each_n takes a step of at least 1");
            }
            *seen % n == 0
        }
        Node::EachT { step, last } => {
            let anchor = *last.get_or_insert(rec.ts);
            let step = micros("$each_t", value(step, rec)?, rec)?;
            let gone = if rec.desc {
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
                Some(d) if d >= step => {
                    *last = Some(rec.ts);
                    true
                }
                Some(_) => false,
            }
        }
        Node::Limit { n, seen } => {
            *seen += 1;
            if *seen > value(n, rec)?.as_int(rec)? {
                return Err(Fail::Limit);
            }
            true
        }
        Node::Gate(g) => gate(g, rec)?,
    })
}

/// A duration operand in microseconds: a duration as it is, anything else as seconds
/// (rounded to the nearest microsecond); negative is 0.
fn micros(op: &str, v: V<'_>, rec: &Rec<'_>) -> R<u64> {
    match v {
        V::Dur(us) => Ok(us.max(0) as u64),
        v => {
            let s = v.as_float(rec)? * 1e6;
            if s.is_nan() {
                return invalid(format!("{op} takes a duration or a number of seconds"));
            }
            Ok(s.round().max(0.0) as u64)
        }
    }
}

fn gate(g: &mut Gate, rec: &Rec<'_>) -> R<bool> {
    // a position along the query's order
    let now = if rec.desc { u64::MAX - rec.ts } else { rec.ts };
    if g.last.is_some_and(|last| now < last) {
        g.deadline = None;
        g.previous = false;
        g.reset = false;
    }
    g.last = Some(now);
    let duration = micros("$gate", value(&mut g.duration, rec)?, rec)?;
    let input = value(&mut g.input, rec)?.truthy();
    if g.deadline.is_some_and(|d| now >= d) {
        g.deadline = None;
        g.reset = true;
    }
    if g.reset {
        g.reset = input;
        g.previous = input;
        return Ok(false);
    }
    if g.deadline.is_none() && !g.previous && input {
        g.deadline = Some(now.saturating_add(duration));
    }
    g.previous = input;
    Ok(input && g.deadline.is_some_and(|d| now < d))
}

#[cfg(test)]
#[path = "when_tests.rs"]
mod tests;
