//! Single records: write (POST), read (GET), HEAD, label update (PATCH), removal (DELETE).
//!
//! Writes, reads and removals are the native handlers (`crate::http::records`, with their
//! body limits, memory budget, spooling and streaming) with ReductStore's headers
//! translated on the way in and out.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use tsblob_proto::headers::{decode_label_value, encode_label_value, label_header};

use super::wire::{self, LABEL_PREFIX};
use super::{ok_empty, Ctx};
use crate::http::errors::blocking;
use crate::http::records::Target;
use crate::http::AppError;

/// The request's `x-reduct-label-*` headers as tsblob's (`x-tsblob-label-*`, values
/// percent-encoded); tsblob label headers sent to this API are dropped, not obeyed.
fn translate_labels(req: &mut Request) -> Result<(), AppError> {
    let labels = wire::labels_from(req.headers())?;
    let headers = req.headers_mut();
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|k| {
            k.as_str().starts_with(LABEL_PREFIX)
                || k.as_str().starts_with(tsblob_proto::headers::LABEL_PREFIX)
        })
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
    for (k, v) in labels {
        let name = HeaderName::try_from(label_header(&k))
            .map_err(|_| AppError::invalid_label(format!("label {k:?}: not a header name")))?;
        let value = HeaderValue::try_from(encode_label_value(&v))
            .map_err(|_| AppError::invalid_label(format!("label {k:?}: not a header value")))?;
        headers.insert(name, value);
    }
    Ok(())
}

/// `POST /api/v1/b/{bucket}/{entry}?ts=`: the native write; ReductStore answers 200 empty.
pub async fn write(t: Target, mut req: Request) -> Result<Response, AppError> {
    translate_labels(&mut req)?;
    crate::http::records::write(t, req).await?;
    Ok(ok_empty())
}

/// `GET`/`HEAD /api/v1/b/{bucket}/{entry}[?ts=]`: the native read (the latest record
/// without `ts`), its metadata headers as ReductStore's.
pub async fn read(_ctx: &Ctx, t: Target, req: Request, head: bool) -> Result<Response, AppError> {
    let entry = t.entry.clone();
    let mut resp = crate::http::records::read(t, req, head).await?;
    let headers = resp.headers_mut();
    let ts = headers
        .remove(tsblob_proto::headers::TS_HEADER)
        .unwrap_or(HeaderValue::from_static("0"));
    headers.insert(wire::TIME_HEADER, ts);
    let labels: Vec<(HeaderName, HeaderValue)> = headers
        .iter()
        .filter(|(k, _)| k.as_str().starts_with(tsblob_proto::headers::LABEL_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in labels {
        headers.remove(&k);
        let key = &k.as_str()[tsblob_proto::headers::LABEL_PREFIX.len()..];
        let value = decode_label_value(key, v.as_bytes())
            .ok()
            .and_then(|v| wire::label_value(&v));
        if let (Ok(name), Some(value)) =
            (HeaderName::try_from(format!("{LABEL_PREFIX}{key}")), value)
        {
            headers.insert(name, value);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&entry) {
        headers.insert("x-reduct-entry", v);
    }
    Ok(resp)
}

/// `PATCH /api/v1/b/{bucket}/{entry}?ts=`: labels in `x-reduct-label-*` headers set, an
/// empty value removes the label.
pub async fn update(t: Target, req: Request) -> Result<Response, AppError> {
    t.caller.require_write(&t.bucket)?;
    let params = crate::http::params::RecordParams::parse(req.uri().query(), false)?;
    let ts = params
        .ts
        .ok_or_else(|| AppError::invalid_timestamp("an update needs ?ts=<µs> naming the record"))?;
    let (set, remove) = split_update(wire::labels_from(req.headers())?);
    crate::http::headers::check_label_bounds(&set)?;
    let (store, bucket, entry) = (t.state.store.clone(), t.bucket, t.entry);
    blocking(move || Ok(store.update_labels(&bucket, &entry, ts, &set, &remove)?)).await?;
    Ok(ok_empty())
}

/// Labels to set, and (empty values) to remove.
pub(crate) fn split_update(labels: Vec<(String, String)>) -> (tsblob_storage::Labels, Vec<String>) {
    let mut set = tsblob_storage::Labels::new();
    let mut remove = Vec::new();
    for (k, v) in labels {
        if v.is_empty() {
            remove.push(k);
        } else {
            set.insert(k, v);
        }
    }
    (set, remove)
}

/// `DELETE /api/v1/b/{bucket}/{entry}[?ts=]`: one record, or the whole entry.
pub async fn remove(t: Target, req: Request) -> Result<Response, AppError> {
    crate::http::records::remove(t, req).await?;
    Ok(ok_empty())
}
