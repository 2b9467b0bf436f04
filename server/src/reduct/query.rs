//! Query sessions: `q` opens one and answers its id; reads by id take the next records in
//! a batch, until the last (`x-reduct-last: true`) or 204; a session unused for its TTL is
//! dropped.

use axum::extract::Request;
use axum::response::Response;

use super::Ctx;
use crate::http::records::Target;
use crate::http::AppError;

/// Bounds of the query sessions.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub max: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits { max: 1024 }
    }
}

/// Open query sessions.
pub struct Sessions {
    pub limits: SessionLimits,
}

impl Sessions {
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions { limits }
    }
}

fn unsupported() -> AppError {
    AppError::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "unsupported",
        "queries are not supported by this tsblob version (see docs/reductstore.md)",
    )
}

pub async fn open_v1(_ctx: &Ctx, _t: Target, _req: Request) -> Result<Response, AppError> {
    Err(unsupported())
}

pub async fn read_v1(
    _ctx: &Ctx,
    _t: Target,
    _req: Request,
    _head: bool,
) -> Result<Response, AppError> {
    Err(unsupported())
}

pub async fn remove_v1(_t: Target, _req: Request) -> Result<Response, AppError> {
    Err(unsupported())
}
