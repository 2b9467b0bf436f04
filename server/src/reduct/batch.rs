//! Batch protocol v1 (`/api/v1/b/{bucket}/{entry}/batch`, per-record `x-reduct-time-<ts>`
//! headers) and the multi-entry `/api/v1/io/{bucket}/...` protocol (v2).

use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::Extension;

use super::Ctx;
use crate::http::auth::Caller;
use crate::http::records::Target;
use crate::http::AppError;

fn unsupported(what: &str) -> AppError {
    AppError::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "unsupported",
        format!("{what} is not supported by this tsblob version (see docs/reductstore.md)"),
    )
}

pub async fn write_v1(_t: Target, _req: Request) -> Result<Response, AppError> {
    Err(unsupported("batch protocol v1"))
}

pub async fn update_v1(_t: Target, _req: Request) -> Result<Response, AppError> {
    Err(unsupported("batch protocol v1"))
}

pub async fn remove_v1(_t: Target, _req: Request) -> Result<Response, AppError> {
    Err(unsupported("batch protocol v1"))
}

pub async fn io_route(
    State(_ctx): State<Ctx>,
    Extension(_caller): Extension<Caller>,
    Path((_bucket, _op)): Path<(String, String)>,
    _req: Request,
) -> Result<Response, AppError> {
    Err(unsupported("the /io protocol"))
}
