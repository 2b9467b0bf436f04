//! The web console (`/ui/`): plain HTML, CSS and JavaScript modules from `server/ui/`,
//! embedded in the binary at compile time (no build step, no Node, nothing fetched from
//! elsewhere: edge devices are offline).
//!
//! The assets are public; every piece of data the console shows comes from the API, with
//! the token the user typed (kept in `sessionStorage`, sent as `Authorization: Bearer`).
//! Every console response carries a Content-Security-Policy that allows only the console's
//! own scripts, styles and connections (no inline script), and images from itself, `blob:`
//! (record previews) and `data:`.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::errors::AppError;

/// The policy on every console response.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' blob: data:; connect-src 'self'; font-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

macro_rules! asset {
    ($name:literal, $mime:literal) => {
        (
            $name,
            $mime,
            include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $name)).as_slice(),
        )
    };
}

/// Every console file: path under `/ui/`, media type, bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("util.js", "text/javascript; charset=utf-8"),
    asset!("timeline.js", "text/javascript; charset=utf-8"),
    asset!("pages/overview.js", "text/javascript; charset=utf-8"),
    asset!("pages/bucket.js", "text/javascript; charset=utf-8"),
    asset!("pages/lifecycle.js", "text/javascript; charset=utf-8"),
    asset!("pages/entry.js", "text/javascript; charset=utf-8"),
    asset!("pages/attachments.js", "text/javascript; charset=utf-8"),
    asset!("pages/bulk.js", "text/javascript; charset=utf-8"),
    asset!("pages/tokens.js", "text/javascript; charset=utf-8"),
    asset!("pages/replication.js", "text/javascript; charset=utf-8"),
    asset!("pages/tier.js", "text/javascript; charset=utf-8"),
];

/// The landing page at `/`: where the console and the API are.
const ROOT: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>tsblob</title>\
<link rel=\"icon\" href=\"/ui/favicon.svg\"></head><body><h1>tsblob</h1><ul>\
<li><a href=\"/ui/\">Web console</a></li>\
<li><a href=\"/api/v1/openapi.json\">API (OpenAPI document)</a></li>\
<li><a href=\"/health\">Health</a></li></ul></body></html>";

/// The console's routes (outside the token check: the assets hold no data).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { page("text/html; charset=utf-8", ROOT.as_bytes()) }),
        )
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { serve("index.html") }))
        .route(
            "/ui/{*path}",
            get(|Path(path): Path<String>| async move { serve(&path) }),
        )
}

fn serve(path: &str) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == path) {
        Some((_, mime, bytes)) => page(mime, bytes),
        None => {
            // With the API's hardening headers: its message repeats the path asked for
            // (browser probe of 2026-11-29: the console's 404 had none of them).
            let mut r = AppError::not_found(format!("the console has no file {path:?}: open /ui/"))
                .into_response();
            super::browser::harden(r.headers_mut());
            r
        }
    }
}

fn page(mime: &'static str, bytes: &'static [u8]) -> Response {
    let mut r = (StatusCode::OK, bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Small files, and a new binary may bring new ones: revalidate each time.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_import_is_an_embedded_asset() {
        // A module imported by another but missing from ASSETS would 404 in the browser.
        for (name, _, bytes) in ASSETS {
            let text = std::str::from_utf8(bytes).unwrap_or("");
            for line in text.lines() {
                let Some(from) = line.split(" from \"").nth(1) else {
                    continue;
                };
                let Some(target) = from.split('"').next() else {
                    continue;
                };
                let base = name.rsplit_once('/').map_or("", |(d, _)| d);
                let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
                for seg in target.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let resolved = parts.join("/");
                assert!(
                    ASSETS.iter().any(|(n, _, _)| *n == resolved),
                    "{name} imports {target} ({resolved}), which is not embedded"
                );
            }
        }
    }
}
