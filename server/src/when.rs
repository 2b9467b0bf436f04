//! The JSON condition language of queries (`when`), parsed into the engine's typed
//! [`Condition`]. Operator names, notations and semantics follow ReductStore's conditional
//! query language (`docs/api.md`, "Conditions"), so a ReductStore `when` works unchanged for
//! every operator tsblob supports; any other operator is a 400 naming it.
//!
//! Notations: object (`{"&score": {"$gt": 10}}`), array (`{"$gt": ["&score", 10]}`), unary
//! (`{"$each_n": 5}`, `{"$not": "&flag"}`); the keys of an object are ANDed in their order
//! (aggregation operators such as `$each_n` depend on it, so the JSON is read in order); a key
//! given twice keeps its last value, as in ReductStore.
//!
//! Used by queries (`http::query`), `tsblob cp` and replication tasks alike, so it sits
//! below all three; its error is its own ([`WhenError`]).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use tsblob_storage::{is_utc, Agg, CmpOp, Condition, Func, Operand, StrOp, Value};

/// A `when` that does not parse: the message says what is wrong and how to write it, and
/// starts with `when: ` (the HTTP layer answers it 400 `bad_request`, `http/errors.rs`).
/// Display and `Error` by hand: the fuzz target compiles this file alone
/// (`fuzz/fuzz_targets/when_parser.rs`), with no dependency beyond serde's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhenError {
    /// `bad_request` (a 400), or `unsupported_directive` / `unsupported_time_zone` (a 422:
    /// a ReductStore form tsblob does not evaluate).
    pub code: &'static str,
    pub message: String,
}

impl fmt::Display for WhenError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WhenError {}

impl WhenError {
    /// A well-formed ReductStore form tsblob does not evaluate (a 422 with its own code).
    fn unprocessable(code: &'static str, message: impl Into<String>) -> WhenError {
        WhenError {
            code,
            message: message.into(),
        }
    }
}

/// A JSON value whose objects keep their keys in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_none<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
                Ok(Json::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
                Ok(Json::Num(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
                Ok(Json::Num(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
                serde_json::Number::from_f64(n)
                    .map(Json::Num)
                    .ok_or_else(|| E::custom("a number that is not finite"))
            }
            fn visit_str<E>(self, s: &str) -> Result<Json, E> {
                Ok(Json::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Json, E> {
                Ok(Json::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Json::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                // A key given twice keeps its first place and its last value, as in
                // serde_json (and so ReductStore) and most JSON parsers.
                let mut v: Vec<(String, Json)> = Vec::new();
                while let Some((k, x)) = a.next_entry::<String, Json>()? {
                    match v.iter_mut().find(|(seen, _)| *seen == k) {
                        Some(slot) => slot.1 = x,
                        None => v.push((k, x)),
                    }
                }
                Ok(Json::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => write!(f, "null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Num(n) => write!(f, "{n}"),
            Json::Str(s) => write!(f, "{}", serde_json::Value::String(s.clone())),
            Json::Arr(v) => {
                write!(f, "[")?;
                for (i, x) in v.iter().enumerate() {
                    write!(f, "{}{x}", if i > 0 { ", " } else { "" })?;
                }
                write!(f, "]")
            }
            Json::Obj(v) => {
                write!(f, "{{")?;
                for (i, (k, x)) in v.iter().enumerate() {
                    let k = serde_json::Value::String(k.clone());
                    write!(f, "{}{k}: {x}", if i > 0 { ", " } else { "" })?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// The operators tsblob evaluates.
pub const SUPPORTED: &str = "$and $or $not $xor $all_of $any_of $none_of $one_of $eq $ne $gt \
    $gte $lt $lte $in $nin $exists $has $contains $starts_with $ends_with $add $sub $mult $div \
    $div_num $rem $abs $cast $ref $second $minute $hour $day $month $year $weekday $each_n \
    $each_t $limit $gate, and \"$timestamp\" (\"$id\") as an operand";

/// ReductStore's query-execution directives: hints on how its batches are cut, which
/// tsblob's streamed answers do not need; accepted and ignored.
const IO_DIRECTIVES: [&str; 6] = [
    "#batch_size",
    "#batch_records",
    "#batch_metadata_size",
    "#batch_timeout",
    "#record_timeout",
    "#io_timeout",
];

/// ReductStore directives tsblob does not evaluate: a 422 naming them.
const UNSUPPORTED_DIRECTIVES: [&str; 4] = ["#ctx_before", "#ctx_after", "#select_labels", "#ext"];

fn bad(msg: impl Into<String>) -> WhenError {
    WhenError {
        code: "bad_request",
        message: format!("when: {}", msg.into()),
    }
}

/// Parses a `when` given as JSON text (the query-string form).
pub fn parse_text(text: &str) -> Result<Condition, WhenError> {
    let json: Json = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "not valid JSON ({e}): give an object such as {{\"&score\": {{\"$gt\": 10}}}}, URL-encoded"
        ))
    })?;
    parse(&json)
}

/// Parses a `when` object of at most [`tsblob_storage::MAX_CONDITION_PARTS`] parts.
pub fn parse(json: &Json) -> Result<Condition, WhenError> {
    let c = parse_any(json)?;
    let (parts, max) = (c.parts(), tsblob_storage::MAX_CONDITION_PARTS);
    if parts > max {
        return Err(WhenError::unprocessable(
            "invalid_condition",
            format!(
                "when: the condition has {parts} parts (operators, operands, label names), over the limit of {max}: every record a query walks evaluates all of them; simplify it, or split the query"
            ),
        ));
    }
    Ok(c)
}

fn parse_any(json: &Json) -> Result<Condition, WhenError> {
    let entries = match json {
        Json::Obj(entries) => directives(entries)?,
        // A bare string other than a reference is a text value, true when not empty: it
        // selected every record, and a `PATCH`, a removal or a lifecycle rule with it acted
        // on every record (docs walkthrough: `"when": "{\"&n\": ...}"`, JSON text inside a
        // string, the easy mistake after the query string's form).
        Json::Str(s) if !s.starts_with(['&', '@', '$']) => {
            return Err(bad(format!(
                "the condition is the string {}, which as a bare value is true for any text and would select every record: give the condition as a JSON object (not JSON text inside a string), such as {{\"&score\": {{\"$gt\": 10}}}}, or a label such as \"&flag\"",
                tsblob_proto::quote_short(s)
            )))
        }
        // a bare value, as in ReductStore: `true`, `"&flag"`, `1`
        Json::Bool(_) | Json::Num(_) | Json::Str(_) => {
            return Ok(into_condition(
                parse_value(json)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| bad("an empty condition"))?,
            ))
        }
        Json::Arr(_) | Json::Null => {
            return Err(bad(format!(
                "the condition must be a JSON object such as {{\"&score\": {{\"$gt\": 10}}}} (or true), not {json}"
            )))
        }
    };
    let mut all = parse_object(&entries)?
        .into_iter()
        .map(into_condition)
        .collect::<Vec<_>>();
    Ok(if all.len() == 1 {
        all.remove(0)
    } else {
        Condition::And(all)
    })
}

/// The top-level keys without ReductStore's directives (`#...`): the execution hints are
/// ignored, the others are a 422 naming them.
fn directives(entries: &[(String, Json)]) -> Result<Vec<(String, Json)>, WhenError> {
    let mut out = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        if !key.starts_with('#') {
            out.push((key.clone(), value.clone()));
        } else if IO_DIRECTIVES.contains(&key.as_str()) {
            if matches!(value, Json::Null | Json::Obj(_) | Json::Arr(_)) {
                return Err(bad(format!(
                    "the directive {key:?} takes a number or a duration, not {value}"
                )));
            }
        } else if UNSUPPORTED_DIRECTIVES.contains(&key.as_str()) {
            return Err(WhenError::unprocessable("unsupported_directive",
                format!(
                    "when: the directive {key:?} is not supported by tsblob (ReductStore has it): remove it; tsblob accepts the execution hints {} and ignores them",
                    IO_DIRECTIVES.join(" ")
                ),
            ));
        } else {
            return Err(bad(format!(
                "unknown directive {key:?}: ReductStore's are {} {}",
                UNSUPPORTED_DIRECTIVES.join(" "),
                IO_DIRECTIVES.join(" ")
            )));
        }
    }
    Ok(out)
}

/// A parsed piece: a condition, or a value a comparison compares.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Cond(Condition),
    Val(Operand),
    /// A duration literal (`"5s"`): microseconds as a number, seconds to `$each_t`.
    Dur(i64),
}

fn into_condition(e: Expr) -> Condition {
    match e {
        Expr::Cond(c) => c,
        Expr::Val(o) => Condition::Truthy(o),
        Expr::Dur(us) => Condition::Truthy(Operand::Const(Value::Duration(us))),
    }
}

fn parse_value(j: &Json) -> Result<Vec<Expr>, WhenError> {
    Ok(match j {
        Json::Obj(entries) => parse_object(entries)?,
        Json::Bool(b) => vec![Expr::Val(Operand::Const(Value::Bool(*b)))],
        Json::Num(n) => vec![Expr::Val(Operand::Const(number(n)))],
        Json::Str(s) => vec![parse_literal(s)?],
        Json::Arr(_) => {
            return Err(bad(format!(
                "an array may only hold the operands of an operator, as in {{\"$in\": [\"&cam\", \"a\", \"b\"]}}; found {j} in another place"
            )))
        }
        Json::Null => {
            return Err(bad(
                "null is not a value of the condition language: use a number, a string or a boolean",
            ))
        }
    })
}

fn number(n: &serde_json::Number) -> Value {
    match n.as_i64() {
        Some(i) => Value::Int(i),
        None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

fn parse_literal(s: &str) -> Result<Expr, WhenError> {
    if let Some(label) = s.strip_prefix('&') {
        if label.is_empty() {
            return Err(bad("\"&\" names no label: write \"&<label>\""));
        }
        return Ok(Expr::Val(Operand::Label(label.to_string())));
    }
    if let Some(name) = s.strip_prefix('@') {
        // computed labels come from ReductStore's extensions (`#ext`), which tsblob does not
        // have: as in ReductStore without one, the label is missing and the record fails
        return Ok(Expr::Val(Operand::Computed(name.to_string())));
    }
    if let Some(rest) = s.strip_prefix("$$") {
        return Ok(Expr::Val(Operand::Const(Value::Str(format!("${rest}")))));
    }
    if s.starts_with('$') {
        return parse_operator(s, vec![]).map_err(|e| {
            bad(format!(
                "the string {s:?} reads as an operator but is not one taking no operands ({}); write \"$${}\" for the text itself",
                e.message,
                &s[1..]
            ))
        });
    }
    if let Some(us) = duration(s) {
        return Ok(Expr::Dur(us));
    }
    Ok(Expr::Val(Operand::Const(Value::Str(s.to_string()))))
}

/// A duration literal as ReductStore reads it: whitespace-separated `<integer><unit>` parts
/// (`us`, `ms`, `s`, `m`, `h`, `d`), summed: `"1s"`, `"100ms"`, `"1h -30m"`.
pub fn duration(s: &str) -> Option<i64> {
    if s.trim().is_empty() {
        return None;
    }
    let mut total: i64 = 0;
    for part in s.split_whitespace() {
        let split = part
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .filter(|&i| i > 0)?;
        let (num, unit) = part.split_at(split);
        let v: i64 = num.parse().ok()?;
        let scale: i64 = match unit {
            "us" => 1,
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            "d" => 86_400_000_000,
            _ => return None,
        };
        total = total.checked_add(v.checked_mul(scale)?)?;
    }
    Some(total)
}

fn parse_object(entries: &[(String, Json)]) -> Result<Vec<Expr>, WhenError> {
    let mut out = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        if key.starts_with('#') {
            return Err(bad(format!(
                "the directive {key:?} is only allowed at the top level of the condition"
            )));
        }
        out.push(match value {
            // array notation: {"$gt": ["&score", 10]}
            Json::Arr(items) => {
                let mut operands = Vec::new();
                for item in items {
                    operands.extend(parse_value(item)?);
                }
                parse_operator(key, operands)?
            }
            // object notation: {"&score": {"$gt": 10}}
            Json::Obj(inner) if !key.starts_with('$') || matches!(key.as_str(), "$timestamp" | "$id") => {
                let [(op, operand)] = inner.as_slice() else {
                    return Err(bad(format!(
                        "{{{:?}: {value}}} must hold exactly one operator, as in {{{key:?}: {{\"$gt\": 10}}}}; AND several with {{\"$and\": [...]}}",
                        key
                    )));
                };
                let mut operands = vec![parse_literal(key)?];
                match (op.as_str(), operand) {
                    // {"&cam": {"$in": ["a", "b"]}}: the list as the operands
                    ("$in" | "$nin", Json::Arr(items)) => {
                        for item in items {
                            operands.extend(parse_value(item)?);
                        }
                    }
                    _ => operands.extend(parse_value(operand)?),
                }
                parse_operator(op, operands)?
            }
            // An object under a logical operator: `$not` of one condition (a superset of
            // ReductStore's), nothing else. `{"$and": {}}` was true and `{"$not": {}}` too, so a
            // removal by query built from an empty filter removed every record, and
            // `{"$or": {"&a": ..., "&b": ...}}` ANDed its keys; ReductStore refuses all of these.
            Json::Obj(inner) if LOGICAL.contains(&key.as_str()) && (key != "$not" || inner.len() != 1) => {
                return Err(bad(format!(
                    "{key} takes a list of conditions, as in {{{key:?}: [{{\"&a\": {{\"$eq\": 1}}}}, {{\"&b\": {{\"$gt\": 2}}}}]}}{}; got the object {value}",
                    if key == "$not" { " or one condition, as in {\"$not\": {\"&a\": {\"$eq\": 1}}}" } else { "" }
                )));
            }
            // unary notation: {"$each_n": 5}, {"$not": "&flag"}, {"$not": {"&a": {...}}}
            _ => parse_operator(key, parse_value(value)?)?,
        });
    }
    Ok(out)
}

fn operand(_op: &str, e: Expr) -> Result<Operand, WhenError> {
    Ok(match e {
        Expr::Val(o) => o,
        Expr::Dur(us) => Operand::Const(Value::Duration(us)),
        // a condition where a value belongs is its boolean, as in ReductStore
        Expr::Cond(c) => Operand::Cond(Box::new(c)),
    })
}

/// An operand as the request wrote it, for error messages (never the parser's own forms).
fn shown(e: &Expr) -> String {
    match e {
        Expr::Val(Operand::Const(Value::Int(i))) => i.to_string(),
        Expr::Val(Operand::Const(Value::Float(f))) => f.to_string(),
        Expr::Val(Operand::Const(Value::Bool(b))) => b.to_string(),
        Expr::Val(Operand::Const(Value::Str(s))) => format!("the string {s:?}"),
        Expr::Val(Operand::Label(l)) => format!("the label \"&{l}\""),
        Expr::Val(Operand::Timestamp) => "\"$timestamp\"".to_string(),
        Expr::Val(Operand::Const(Value::Duration(us))) => format!("a duration of {us} µs"),
        Expr::Val(Operand::Computed(l)) => format!("the computed label \"@{l}\""),
        Expr::Val(Operand::Func(f, _)) => format!("a value computed by {}", f.name()),
        Expr::Val(Operand::Cond(_)) => "a condition".to_string(),
        Expr::Dur(us) => format!("a duration of {us} µs"),
        Expr::Cond(_) => "a condition".to_string(),
    }
}

/// The operators whose operands are conditions.
const LOGICAL: [&str; 8] = [
    "$and", "$all_of", "$or", "$any_of", "$not", "$none_of", "$xor", "$one_of",
];

/// Integers a float stands for exactly (an `f64` holds every integer up to 2^53).
const EXACT_FLOAT_INT: f64 = 9_007_199_254_740_992.0;

/// A non-negative integer operand (`$each_n`, `$limit`).
fn count(op: &str, operands: Vec<Expr>) -> Result<u64, WhenError> {
    let [e] = <[Expr; 1]>::try_from(operands)
        .map_err(|v| bad(format!("{op} takes exactly one operand, got {}", v.len())))?;
    let n = match &e {
        Expr::Val(Operand::Const(Value::Int(i))) => Some(*i),
        Expr::Val(Operand::Const(Value::Float(f)))
            if f.fract() == 0.0 && f.abs() <= EXACT_FLOAT_INT =>
        {
            Some(*f as i64)
        }
        Expr::Val(Operand::Const(Value::Str(s))) => s.parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if n >= 0 => Ok(n as u64),
        _ => Err(bad(format!(
            "{op} takes a non-negative integer constant, as in {{{op:?}: 10}}; got {}",
            shown(&e)
        ))),
    }
}

/// Whether an aggregation operator's operand is computed per record (not a constant).
fn computed(operands: &[Expr]) -> bool {
    matches!(
        operands,
        [Expr::Cond(_)
            | Expr::Val(
                Operand::Label(_)
                    | Operand::Computed(_)
                    | Operand::Timestamp
                    | Operand::Func(..)
                    | Operand::Cond(_)
            )]
    )
}

fn parse_operator(op: &str, operands: Vec<Expr>) -> Result<Expr, WhenError> {
    if op.starts_with('#') {
        return Err(bad(format!(
            "the directive {op:?} is only allowed at the top level of the condition"
        )));
    }
    if !op.starts_with('$') {
        return Err(bad(if op.starts_with('&') {
            format!(
                "{op:?} needs an operator: write {{{op:?}: {{\"$eq\": <value>}}}} (or $ne, $gt, $gte, $lt, $lte, $in, $nin)"
            )
        } else {
            format!(
                "{op:?} is neither an operator (\"$...\") nor a label (\"&...\"): write {{\"&{op}\": {{\"$eq\": <value>}}}} to compare the label {op:?}"
            )
        }));
    }
    let arity = |n: usize, operands: &Vec<Expr>| {
        if operands.len() == n {
            Ok(())
        } else {
            Err(bad(format!(
                "{op} takes exactly {n} operands, got {}: write {{{op:?}: [\"&label\", <value>]}} or {{\"&label\": {{{op:?}: <value>}}}}",
                operands.len()
            )))
        }
    };
    let conds = |operands: Vec<Expr>| operands.into_iter().map(into_condition).collect();
    let cmp = match op {
        "$eq" => Some(CmpOp::Eq),
        "$ne" => Some(CmpOp::Ne),
        "$gt" => Some(CmpOp::Gt),
        "$gte" => Some(CmpOp::Gte),
        "$lt" => Some(CmpOp::Lt),
        "$lte" => Some(CmpOp::Lte),
        _ => None,
    };
    if let Some(c) = cmp {
        arity(2, &operands)?;
        let mut it = operands.into_iter();
        let (a, b) = (it.next(), it.next());
        let (Some(a), Some(b)) = (a, b) else {
            return Err(bad(format!("{op} takes two operands")));
        };
        return Ok(Expr::Cond(Condition::Compare(
            c,
            operand(op, a)?,
            operand(op, b)?,
        )));
    }
    Ok(Expr::Cond(match op {
        "$and" | "$all_of" => Condition::And(conds(operands)),
        "$or" | "$any_of" => Condition::Or(conds(operands)),
        "$not" | "$none_of" => Condition::Not(conds(operands)),
        "$in" | "$nin" => {
            if operands.len() < 2 {
                return Err(bad(format!(
                    "{op} takes a value and at least one candidate: {{{op:?}: [\"&cam\", \"a\", \"b\"]}} or {{\"&cam\": {{{op:?}: [\"a\", \"b\"]}}}}"
                )));
            }
            let mut v = operands
                .into_iter()
                .map(|e| operand(op, e))
                .collect::<Result<Vec<_>, _>>()?;
            let first = v.remove(0);
            if op == "$in" {
                Condition::In(first, v)
            } else {
                Condition::NotIn(first, v)
            }
        }
        "$exists" | "$has" => {
            if operands.is_empty() {
                return Err(bad(format!(
                    "{op} takes label names: {{{op:?}: [\"cam\", \"score\"]}}"
                )));
            }
            // Plain names, or (as in ReductStore) any operand whose value names the label:
            // `{"$has": ["&which"]}` asks for the label named by `which`'s value.
            let plain = |e: &Expr| match e {
                Expr::Val(Operand::Const(Value::Str(s))) => Some(s.clone()),
                Expr::Val(Operand::Const(Value::Int(i))) => Some(i.to_string()),
                _ => None,
            };
            match operands.iter().map(plain).collect::<Option<Vec<String>>>() {
                Some(names) => Condition::Exists(names),
                None => Condition::ExistsOf(
                    operands
                        .into_iter()
                        .map(|e| operand(op, e))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            }
        }
        "$each_n" | "$limit" | "$each_t" if computed(&operands) => {
            let agg = match op {
                "$each_n" => Agg::EachN,
                "$limit" => Agg::Limit,
                _ => Agg::EachT,
            };
            let mut it = operands.into_iter();
            let (Some(e), None) = (it.next(), it.next()) else {
                return Err(bad(format!("{op} takes exactly one operand")));
            };
            Condition::Aggregate(agg, operand(op, e)?)
        }
        "$each_n" => match count(op, operands)? {
            0 => {
                return Err(bad(
                    "$each_n takes a step of at least 1 (every n-th record)",
                ))
            }
            n => Condition::EachN(n),
        },
        "$limit" => Condition::Limit(count(op, operands)?),
        "$each_t" => {
            let [e] = <[Expr; 1]>::try_from(operands).map_err(|v| {
                bad(format!(
                    "$each_t takes exactly one operand, got {}",
                    v.len()
                ))
            })?;
            let us = match &e {
                Expr::Dur(us) => Some(*us as f64),
                Expr::Val(Operand::Const(Value::Int(s))) => Some(*s as f64 * 1e6),
                Expr::Val(Operand::Const(Value::Float(s))) => Some(s * 1e6),
                Expr::Val(Operand::Const(Value::Bool(b))) => Some(*b as i64 as f64 * 1e6),
                Expr::Val(Operand::Const(Value::Str(s))) => s.parse::<f64>().ok().map(|s| s * 1e6),
                _ => None,
            };
            // seconds are rounded to the nearest µs (ReductStore truncates `0.001001 * 1e6`
            // and loses one): see the differences in docs/api.md
            match us {
                Some(us) if us >= 0.0 && us.is_finite() => Condition::EachT(us.round() as u64),
                _ => {
                    return Err(bad(format!(
                        "$each_t takes a duration (\"100ms\", \"1s\", \"5m\") or a number of seconds, not negative; got {}",
                        shown(&e)
                    )))
                }
            }
        }
        "$xor" | "$one_of" => Condition::Xor(conds(operands)),
        "$gate" => {
            arity(2, &operands)?;
            let mut it = operands.into_iter().map(|e| operand(op, e));
            match (it.next(), it.next()) {
                (Some(duration), Some(input)) => Condition::Gate(duration?, input?),
                _ => return Err(bad("$gate takes two operands: a duration and a condition")),
            }
        }
        "$contains" | "$starts_with" | "$ends_with" => {
            arity(2, &operands)?;
            let sop = match op {
                "$contains" => StrOp::Contains,
                "$starts_with" => StrOp::StartsWith,
                _ => StrOp::EndsWith,
            };
            let mut it = operands.into_iter().map(|e| operand(op, e));
            match (it.next(), it.next()) {
                (Some(a), Some(b)) => Condition::Str(sop, a?, b?),
                _ => return Err(bad(format!("{op} takes two operands"))),
            }
        }
        "$add" | "$sub" | "$mult" | "$div" | "$div_num" | "$rem" | "$abs" | "$cast" | "$ref"
        | "$second" | "$minute" | "$hour" | "$day" | "$month" | "$year" | "$weekday" => {
            let (f, lo, hi) = match op {
                "$add" => (Func::Add, 0, usize::MAX),
                "$mult" => (Func::Mult, 0, usize::MAX),
                "$sub" => (Func::Sub, 2, 2),
                "$div" => (Func::Div, 2, 2),
                "$div_num" => (Func::DivNum, 2, 2),
                "$rem" => (Func::Rem, 2, 2),
                "$abs" => (Func::Abs, 1, 1),
                "$cast" => (Func::Cast, 2, 2),
                "$ref" => (Func::Ref, 1, 1),
                "$second" => (Func::Second, 1, 2),
                "$minute" => (Func::Minute, 1, 2),
                "$hour" => (Func::Hour, 1, 2),
                "$day" => (Func::Day, 1, 2),
                "$month" => (Func::Month, 1, 2),
                "$year" => (Func::Year, 1, 2),
                _ => (Func::Weekday, 1, 2),
            };
            if operands.len() < lo || operands.len() > hi {
                return Err(bad(format!(
                    "{op} takes {} operands, got {}: write {{{op:?}: [<value>, ...]}}",
                    if lo == hi {
                        lo.to_string()
                    } else if hi == usize::MAX {
                        format!("{lo} or more")
                    } else {
                        format!("{lo} to {hi}")
                    },
                    operands.len()
                )));
            }
            let args = operands
                .into_iter()
                .map(|e| operand(op, e))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(Operand::Const(tz)) = args.get(1).filter(|_| lo == 1 && hi == 2) {
                if !matches!(tz, Value::Str(t) if is_utc(t)) {
                    return Err(WhenError::unprocessable("unsupported_time_zone",
                        format!("when: {op} in the time zone {}: tsblob evaluates calendar fields in UTC only; drop the time zone (or give \"UTC\")", shown(&Expr::Val(Operand::Const(tz.clone())))),
                    ));
                }
            }
            if f == Func::Cast {
                if let Some(Operand::Const(ty)) = args.get(1) {
                    if !matches!(ty, Value::Str(t) if ["bool", "int", "float", "string", "duration"].contains(&t.as_str()))
                    {
                        return Err(bad(format!("$cast takes a type name: \"bool\", \"int\", \"float\", \"string\" or \"duration\"; got {}", shown(&Expr::Val(Operand::Const(ty.clone()))))));
                    }
                }
            }
            return Ok(Expr::Val(Operand::Func(f, args)));
        }
        "$timestamp" | "$id" => {
            if !operands.is_empty() {
                return Err(bad(format!(
                    "{op} takes no operands: use the string {op:?}"
                )));
            }
            return Ok(Expr::Val(Operand::Timestamp));
        }
        other => {
            return Err(bad(format!(
                "unknown operator {other}: supported: {SUPPORTED}"
            )))
        }
    }))
}

#[cfg(test)]
#[path = "when_tests.rs"]
mod tests;
