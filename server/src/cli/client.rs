//! A thin HTTP client for the CLI: base URL, bearer token, and errors that show the
//! server's `{"error": {"code", "message"}}` as they are.

use anyhow::{bail, Context};
use reqwest::{Method, RequestBuilder, Response};

/// Where the server is and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Server URL.
    #[arg(
        long,
        env = "TSBLOB_URL",
        default_value = "http://127.0.0.1:8686",
        global = true
    )]
    pub url: String,
    /// Bearer token (the server's --token, or one made with the token routes).
    #[arg(long, env = "TSBLOB_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

pub struct Client {
    pub http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Percent-encodes a path segment; `/` inside entry names is kept (it separates segments
/// in the API too).
pub fn seg(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'/');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

impl Client {
    pub fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Client {
            http,
            base: args.url.trim_end_matches('/').to_string(),
            token: args.token.clone().filter(|t| !t.is_empty()),
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let r = self.http.request(method, self.url(path));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// Sends and turns a non-2xx answer into an error carrying the server's message.
    pub async fn send(&self, req: RequestBuilder) -> anyhow::Result<Response> {
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach the server at {}", self.base))?;
        check(resp).await
    }

    pub async fn json(&self, req: RequestBuilder) -> anyhow::Result<serde_json::Value> {
        let resp = self.send(req).await?;
        resp.json().await.context("the server's answer is not JSON")
    }
}

/// Passes a successful response through; otherwise fails with `status code: message`.
pub async fn check(resp: Response) -> anyhow::Result<Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v["error"]["code"].is_string() => bail!(
            "{} {}: {}",
            status.as_u16(),
            v["error"]["code"].as_str().unwrap_or(""),
            v["error"]["message"].as_str().unwrap_or("")
        ),
        _ => bail!("{status}: {text}"),
    }
}
