//! Selecting records from the index alone: label filters, a condition and a limit, applied
//! to pages of index records by queries (`read.rs`) and by [`Store::remove_where`].

use crate::codec::index::IndexValue;
use crate::error::{QueryError, Result};
use crate::record::{LabelFilter, Query};
use crate::when::{Matcher, Stop};
use std::sync::Arc;

/// Index records scanned per page by `remove_where` (one index commit per page at most).
/// Records removed per index commit in a removal (by range or condition).
pub(crate) const REMOVE_PAGE: usize = 4096;

/// What [`Selector::judge`] makes of one record.
pub(crate) enum Verdict {
    Keep,
    Skip,
    /// The condition's `$limit` was reached: this record and every one after it are left.
    End,
}

/// What a query keeps of the records it walks, with the state of its condition. A clone
/// shares the filters and the condition's texts: a query over many entries builds one and
/// clones it per entry (see [`Matcher`]).
#[derive(Clone)]
pub(crate) struct Selector {
    filters: Arc<[LabelFilter]>,
    matcher: Option<Matcher>,
    /// Records still to keep (`Query::limit`).
    left: u64,
}

impl Selector {
    pub(crate) fn new(q: &Query) -> Selector {
        Selector {
            filters: q.filters.as_slice().into(),
            matcher: q
                .when
                .as_ref()
                .map(|c| Matcher::new(c, q.strict, q.descending)),
            left: q.limit.unwrap_or(u64::MAX),
        }
    }

    /// The condition and label filters of `q` without its limit: one entry's part of a
    /// multi-entry query, whose `$limit`, `$each_n`, `$each_t` and `$gate` count that entry's
    /// records (as ReductStore's), while `q.limit` counts the merged stream.
    pub(crate) fn per_entry(q: &Query) -> Selector {
        Selector {
            left: u64::MAX,
            ..Selector::new(q)
        }
    }

    /// Whether the record `(ts, v)`, the next one walked, matches the filters and the
    /// condition (its limit aside). An `Err`: a strict condition met a missing label.
    pub(crate) fn judge(&mut self, ts: u64, v: &IndexValue) -> Result<Verdict> {
        let labels = &v.attrs.labels;
        if !self.filters.iter().all(|f| f.matches(labels)) {
            return Ok(Verdict::Skip);
        }
        let Some(m) = self.matcher.as_mut() else {
            return Ok(Verdict::Keep);
        };
        match m.matches(ts, labels) {
            Ok(true) => Ok(Verdict::Keep),
            Ok(false) => Ok(Verdict::Skip),
            Err(Stop::Limit) => Ok(Verdict::End),
            Err(Stop::Missing(label)) => Err(QueryError::MissingLabel { label, ts }.into()),
            Err(Stop::Invalid(message)) => Err(QueryError::Invalid { message, ts }.into()),
        }
    }

    /// Moves the records of `page` that match into `out`, in order. `Ok(true)`: the query
    /// has ended (its limit or a `$limit` was reached); nothing after the last kept record
    /// may match. An `Err` (a strict condition met a missing label) comes after the records
    /// kept before it, which are in `out`.
    pub(crate) fn select(
        &mut self,
        page: Vec<(u64, IndexValue)>,
        out: &mut impl Extend<(u64, IndexValue)>,
    ) -> Result<bool> {
        for (ts, v) in page {
            if self.left == 0 {
                return Ok(true);
            }
            match self.judge(ts, &v)? {
                Verdict::Keep => {}
                Verdict::Skip => continue,
                Verdict::End => return Ok(true),
            }
            self.left -= 1;
            out.extend([(ts, v)]);
        }
        Ok(self.left == 0)
    }
}
