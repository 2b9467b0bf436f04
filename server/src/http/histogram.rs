//! `GET /api/v1/b/{bucket}/{entry}/histogram`: record counts and payload bytes per time
//! step, computed from the index without reading payloads (what the console's timeline
//! draws).

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use tsblob_storage::{Histogram, MAX_HISTOGRAM_STEPS};

use super::errors::{blocking, AppError, ErrorBody};
use super::params::{pairs, parse_ts, parse_u64, unknown};
use super::records::Target;

/// Counts per step over `[start, stop)`; step `i` covers `[start + i*step, start + (i+1)*step)`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HistogramJson {
    /// µs, inclusive.
    pub start: u64,
    /// µs, exclusive.
    pub stop: u64,
    /// µs per step.
    pub step: u64,
    /// Records per step.
    pub counts: Vec<u64>,
    /// Payload bytes (uncompressed) per step.
    pub bytes: Vec<u64>,
    /// Set when the window held more records than one request visits (20,000,000): steps
    /// from this timestamp on are incomplete.
    pub truncated_at: Option<u64>,
}

impl From<Histogram> for HistogramJson {
    fn from(h: Histogram) -> Self {
        HistogramJson {
            start: h.start,
            stop: h.stop,
            step: h.step,
            counts: h.counts,
            bytes: h.bytes,
            truncated_at: h.truncated_at,
        }
    }
}

/// `start`, `stop` and `step` of a histogram, checked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HistogramParams {
    pub start: Option<u64>,
    pub stop: Option<u64>,
    pub step: Option<u64>,
}

impl HistogramParams {
    pub fn parse(query: Option<&str>) -> Result<HistogramParams, AppError> {
        let mut p = HistogramParams::default();
        for (k, v) in pairs(query) {
            match k.as_str() {
                "start" => p.start = Some(parse_ts(&k, &v)?),
                "stop" => p.stop = Some(parse_ts(&k, &v)?),
                "step" => p.step = Some(parse_u64(&k, &v)?),
                _ => return Err(unknown(&k, "start, stop and step")),
            }
        }
        if let (Some(start), Some(stop)) = (p.start, p.stop) {
            if start > stop {
                return Err(AppError::invalid_timestamp(format!(
                    "start={start} is after stop={stop}: the range is [start, stop)"
                )));
            }
        }
        if p.step == Some(0) {
            return Err(AppError::bad_request(
                "step=0 is not a step: give a positive number of microseconds, or leave it out for about 200 steps",
            ));
        }
        if let (Some(start), Some(stop), Some(step)) = (p.start, p.stop, p.step) {
            let n = Histogram::steps(start, stop, step);
            if n > MAX_HISTOGRAM_STEPS {
                return Err(AppError::bad_request(format!(
                    "step={step} cuts [{start}, {stop}) into {n} steps, more than {MAX_HISTOGRAM_STEPS}: use a step of at least {} µs",
                    (stop - start).div_ceil(MAX_HISTOGRAM_STEPS)
                )));
            }
        }
        Ok(p)
    }
}

/// Counts and bytes of an entry's records per time step.
#[utoipa::path(get, path = "/api/v1/b/{bucket}/{entry}/histogram", tag = "entries",
    params(("bucket" = String, Path), ("entry" = String, Path),
           ("start" = Option<u64>, Query, description = "inclusive, µs; default: the oldest record"),
           ("stop" = Option<u64>, Query, description = "exclusive, µs; default: just after the latest record"),
           ("step" = Option<u64>, Query, description = "µs per step; default: about 200 steps; at most 10,000 steps")),
    responses((status = 200, body = HistogramJson),
              (status = 400, body = ErrorBody, description = "more than 10,000 steps, step=0 or an unknown parameter"),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn histogram(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_read(&t.bucket)?;
    let p = HistogramParams::parse(req.uri().query())?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    let h =
        blocking(move || Ok(store.histogram(&bucket, &entry, p.start, p.stop, p.step)?)).await?;
    Ok(Json(HistogramJson::from(h)).into_response())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parameters_are_checked() {
        let p = HistogramParams::parse(Some("start=10&stop=20&step=5")).unwrap();
        assert_eq!((p.start, p.stop, p.step), (Some(10), Some(20), Some(5)));
        let code = |q| {
            let e = HistogramParams::parse(Some(q)).unwrap_err();
            (e.status.as_u16(), e.code.as_str())
        };
        assert_eq!(code("step=0"), (400, "bad_request"));
        assert_eq!(code("start=0&stop=10001&step=1"), (400, "bad_request"));
        assert!(HistogramParams::parse(Some("start=0&stop=10000&step=1")).is_ok());
        assert_eq!(code("start=9&stop=1"), (422, "invalid_timestamp"));
        assert_eq!(code("strat=1"), (400, "bad_request"));
    }
}
