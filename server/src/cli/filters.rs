//! The record filters of the query API on the command line, shared by `query`, `tail` and
//! `rm`: label filters (`--eq`, `--ne`, `--has`, `--missing`), a `when` condition,
//! `--strict`.

use super::usage::Usage;

/// A `KEY=VALUE` argument.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("label {s:?} must be key=value"))
}

/// Which records a command applies to, beyond the time range.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FilterArgs {
    /// Only records whose label KEY equals VALUE (repeatable; all must hold).
    #[arg(long = "eq", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub eq: Vec<(String, String)>,
    /// Only records whose label KEY is not VALUE, or missing (repeatable).
    #[arg(long = "ne", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub ne: Vec<(String, String)>,
    /// Only records that have label KEY (repeatable).
    #[arg(long, value_name = "KEY")]
    pub has: Vec<String>,
    /// Only records without label KEY (repeatable).
    #[arg(long, value_name = "KEY")]
    pub missing: Vec<String>,
    /// A condition in ReductStore's `when` language, e.g. '{"&score": {"$gt": 10}}'. A label
    /// that holds a number is compared with a JSON number: '{"&k": {"$eq": 0}}', not "0"
    /// (--eq k=0 compares text).
    #[arg(long, value_name = "JSON")]
    pub when: Option<String>,
    /// A comparison with a missing label is an error instead of false.
    #[arg(long)]
    pub strict: bool,
}

impl FilterArgs {
    /// The query parameters; `each_t` (a `$each_t` step) is ANDed to the condition.
    pub fn params(&self, each_t: Option<&str>) -> anyhow::Result<Vec<(String, String)>> {
        let mut params = Vec::new();
        for (k, v) in &self.eq {
            params.push((format!("eq.{k}"), v.clone()));
        }
        for (k, v) in &self.ne {
            params.push((format!("ne.{k}"), v.clone()));
        }
        for k in &self.has {
            params.push(("has".into(), k.clone()));
        }
        for k in &self.missing {
            params.push(("missing".into(), k.clone()));
        }
        if let Some(w) = when_param(self.when.as_deref(), each_t)? {
            params.push(("when".into(), w));
        }
        if self.strict {
            params.push(("strict".into(), "true".into()));
        }
        Ok(params)
    }

    /// True if any filter is given.
    pub fn any(&self) -> bool {
        !(self.eq.is_empty()
            && self.ne.is_empty()
            && self.has.is_empty()
            && self.missing.is_empty()
            && self.when.is_none())
    }
}

/// A `--when` condition as JSON: a value that is not a JSON object is a usage mistake
/// (exit 2, as `--help` says). One reading for every command that takes `--when` (query,
/// rm, link, lifecycle and replication; the last three exited 1 with "is not JSON").
pub(crate) fn when_json(w: &str) -> anyhow::Result<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(w).map_err(|e| {
        Usage(format!("--when {w:?} is not JSON ({e}): give an object such as '{{\"&score\": {{\"$gt\": 10}}}}'"))
    })?;
    if !v.is_object() {
        return Err(Usage(
            "--when must be a JSON object such as '{\"&score\": {\"$gt\": 10}}'".into(),
        )
        .into());
    }
    Ok(v)
}

/// The `when` parameter of `--when` and `--each-t`, the condition's text kept as given (its
/// keys' order matters to aggregation operators).
pub(crate) fn when_param(
    when: Option<&str>,
    each_t: Option<&str>,
) -> anyhow::Result<Option<String>> {
    if let Some(w) = when {
        when_json(w)?;
    }
    let each = each_t.map(|t| format!("{{\"$each_t\": {}}}", serde_json::Value::from(t)));
    Ok(match (when, each) {
        (Some(w), Some(e)) => Some(format!("{{\"$and\": [{w}, {e}]}}")),
        (Some(w), None) => Some(w.to_string()),
        (None, e) => e,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_filter_becomes_its_query_parameter() {
        let f = FilterArgs {
            eq: vec![("cam".into(), "front".into())],
            ne: vec![("ok".into(), "no".into())],
            has: vec!["score".into()],
            missing: vec!["bad".into()],
            when: Some(r#"{"&score": {"$gt": 1}}"#.into()),
            strict: true,
        };
        let p = f.params(Some("1s")).unwrap();
        let get = |k: &str| p.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        assert_eq!(get("eq.cam"), Some("front"));
        assert_eq!(get("ne.ok"), Some("no"));
        assert_eq!(get("has"), Some("score"));
        assert_eq!(get("missing"), Some("bad"));
        assert_eq!(
            get("when"),
            Some(r#"{"$and": [{"&score": {"$gt": 1}}, {"$each_t": "1s"}]}"#)
        );
        assert_eq!(get("strict"), Some("true"));
        assert!(f.any() && !FilterArgs::default().any());
        let bad = FilterArgs {
            when: Some("[1]".into()),
            ..FilterArgs::default()
        };
        assert!(bad.params(None).is_err());
    }
}
