//! JSON answers of the API that the server writes and its own outbound clients read
//! (`batch_client.rs`, for replication and `tsblob cp`): the error document, a batch's
//! answer and an attachment's document. Below both sides, so the clients do not depend on the HTTP handlers.

use serde::{Deserialize, Serialize};

/// The JSON document of an error.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable machine-readable `code` and a human `message`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// The fate of one record of a batch.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecordResult {
    /// The stored timestamp, or the requested one (null for "now") if it failed.
    pub ts: Option<u64>,
    /// 201 when stored, otherwise the status a single write would have had.
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// The answer to a batch.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchResult {
    /// Set when the body itself was at fault (then the status is not 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
    pub written: u64,
    /// Records found already stored with the same payload (`if_exists=compare`: status
    /// 200); absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub existing: u64,
    pub failed: u64,
    /// One element per record frame handled, in order.
    pub results: Vec<RecordResult>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An attachment's bytes as a JSON value: the document as written (validated then). Bytes
/// an embedding program wrote through the engine that are not JSON come back as a string.
/// The API answers with it and replication sends it.
pub fn attachment_json(a: &tsblob_storage::Attachment) -> Box<serde_json::value::RawValue> {
    use serde_json::value::RawValue;
    let text = String::from_utf8_lossy(&a.data).into_owned();
    RawValue::from_string(text.clone()).unwrap_or_else(|_| {
        RawValue::from_string(serde_json::Value::String(text).to_string())
            .unwrap_or_else(|_| RawValue::from_string("null".into()).unwrap_or_default())
    })
}
