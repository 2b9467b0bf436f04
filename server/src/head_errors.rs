//! The answers hyper writes itself, to a request head it cannot parse, given tsblob's JSON
//! error body on their way to the socket.
//!
//! Bug "hyper's 400/414/431 had empty bodies" (hostile rounds of 2026-11-27 and -28, left
//! documented until now): a head with two `Content-Length`s, a control character in a
//! header, 200 header lines or a 70 KB path was answered by hyper before any of tsblob's
//! code ran, `content-length: 0` and nothing to say what was wrong, where every other error
//! is a status and a JSON body saying what to fix. hyper has no hook for these answers
//! (`Server::on_error` in its `proto/h1/role.rs` writes a bare head, then closes the
//! connection), so this wrapper of the connection's stream, under hyper and above TLS,
//! recognises such a head in a write and writes the same answer with a JSON body
//! ([`AppError::raw_answer`]) in its place.
//!
//! A write is taken for one of these answers only when it is that head and nothing else:
//! the status line of one of the three, `connection: close`, `content-length: 0`, no
//! `content-type` (every answer of tsblob's own routes has one: `http::errors::json_errors`
//! makes sure), ending the head, at most 256 bytes. Everything else passes through
//! untouched, at the cost of a prefix comparison per write. What could still be taken for
//! one: a stored record whose payload is exactly such a head, read back in a write of its
//! own (the socket having taken its answer's head alone just before); only that answer
//! would be garbled. hyper's `date` header is kept.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tsblob_proto::ErrorCode;

use crate::http::errors::AppError;

/// A connection's stream whose parser-error answers get a JSON body.
pub struct HeadErrors<I> {
    io: I,
    /// The answer written in place of hyper's head, while it is being written.
    replacing: Option<Replacing>,
}

/// Our answer in place of hyper's `of` bytes, `sent` of it written so far.
struct Replacing {
    answer: Vec<u8>,
    sent: usize,
    of: usize,
}

impl<I> HeadErrors<I> {
    pub fn new(io: I) -> HeadErrors<I> {
        HeadErrors {
            io,
            replacing: None,
        }
    }
}

/// The answer to write in place of `head`, when it is one of hyper's own.
fn answer_for(head: &[u8]) -> Option<Vec<u8>> {
    const MAX: usize = 256;
    if head.len() > MAX || !head.starts_with(b"HTTP/1.1 4") || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?.to_ascii_lowercase();
    if !text.contains("\r\nconnection: close\r\n")
        || !text.contains("\r\ncontent-length: 0\r\n")
        || text.contains("content-type")
    {
        return None;
    }
    let (status, code, message) = if text.starts_with("http/1.1 400 ") {
        (
            StatusCode::BAD_REQUEST,
            ErrorCode::MalformedHead,
            "the request head could not be parsed (a malformed request line or header, two Content-Length headers, a negative one or one of 2^64 or more, a Transfer-Encoding whose last coding is not chunked, a control character in a header): send one well-formed HTTP/1.1 request head",
        )
    } else if text.starts_with("http/1.1 414 ") {
        (
            StatusCode::URI_TOO_LONG,
            ErrorCode::UriTooLong,
            "the request target (path and query string) is over 64 KiB: shorten it (a long condition goes in the body of a query POST)",
        )
    } else if text.starts_with("http/1.1 431 ") {
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorCode::HeadTooLarge,
            "the request head is over its bound (at most 100 header lines and about 400 KiB), or its Content-Length is 2^64-2 or 2^64-1 (past what the HTTP parser frames): send fewer or shorter headers (a record's many labels go in a batch or a PATCH body), and the body's true length",
        )
    } else {
        return None;
    };
    let mut answer = AppError::new(status, code, message).raw_answer();
    // hyper's `date` header, kept: the line as hyper wrote it, after our status line.
    if let (Some(at), Some(line_end)) = (
        text.find("\r\ndate: "),
        answer.windows(2).position(|w| w == b"\r\n"),
    ) {
        let line = &head[at + 2..];
        if let Some(len) = line.windows(2).position(|w| w == b"\r\n") {
            let date = line[..len + 2].to_vec();
            answer.splice(line_end + 2..line_end + 2, date);
        }
    }
    Some(answer)
}

impl<I: AsyncWrite + Unpin> HeadErrors<I> {
    /// Writes `replacing` on; answers hyper's byte count when all of it is written.
    fn poll_replacing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            let Some(r) = self.replacing.as_mut() else {
                return Poll::Ready(Ok(0));
            };
            if r.sent == r.answer.len() {
                let of = r.of;
                self.replacing = None;
                return Poll::Ready(Ok(of));
            }
            match Pin::new(&mut self.io).poll_write(cx, &r.answer[r.sent..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => r.sent += n,
                Poll::Ready(Err(e)) => {
                    self.replacing = None;
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for HeadErrors<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for HeadErrors<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            match answer_for(buf) {
                Some(answer) => {
                    this.replacing = Some(Replacing {
                        answer,
                        sent: 0,
                        of: buf.len(),
                    })
                }
                None => return Pin::new(&mut this.io).poll_write(cx, buf),
            }
        }
        // hyper calls again with the same bytes after a Pending (its buffer is not
        // consumed until a write answers how much of it went).
        this.poll_replacing(cx).map_ok(|of| of.min(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            let mut filled = bufs.iter().filter(|b| !b.is_empty());
            let head = match (filled.next(), filled.next()) {
                (Some(only), None) => answer_for(only).map(|a| (a, only.len())),
                _ => None,
            };
            match head {
                Some((answer, of)) => {
                    this.replacing = Some(Replacing {
                        answer,
                        sent: 0,
                        of,
                    })
                }
                None => return Pin::new(&mut this.io).poll_write_vectored(cx, bufs),
            }
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        this.poll_replacing(cx).map_ok(|of| of.min(total))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.replacing.is_some() {
            std::task::ready!(this.poll_replacing(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.replacing.is_some() {
            std::task::ready!(this.poll_replacing(cx))?;
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HYPER_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Sat, 28 Nov 2026 17:37:02 GMT\r\n\r\n";

    #[test]
    fn hypers_own_heads_get_a_json_body_and_nothing_else_does() {
        let answer = String::from_utf8(answer_for(HYPER_431).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        // Bug "HeadErrors dropped hyper's date header": kept, as hyper wrote it.
        assert!(
            head.contains("\r\ndate: Sat, 28 Nov 2026 17:37:02 GMT\r\n"),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "head_too_large");
        let as_400 = String::from_utf8_lossy(HYPER_431)
            .replace("431 Request Header Fields Too Large", "400 Bad Request");
        assert!(String::from_utf8(answer_for(as_400.as_bytes()).unwrap())
            .unwrap()
            .contains("\"malformed_head\""));
        // A head with a content type (tsblob's own answers), a body after the head (a
        // record's payload that looks like a head), a 404: untouched.
        let typed = String::from_utf8_lossy(HYPER_431).replace(
            "connection: close\r\n",
            "connection: close\r\ncontent-type: text/plain\r\n",
        );
        assert!(answer_for(typed.as_bytes()).is_none());
        assert!(answer_for(&[HYPER_431, b"x"].concat()).is_none());
        let not_found = String::from_utf8_lossy(HYPER_431)
            .replace("431 Request Header Fields Too Large", "404 Not Found");
        assert!(answer_for(not_found.as_bytes()).is_none());
    }

    /// The replacement is written whole through a stream that takes a few bytes a write.
    #[tokio::test]
    async fn the_answer_goes_whole_through_short_writes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, mut b) = tokio::io::duplex(7);
        let mut w = HeadErrors::new(a);
        let writer = tokio::spawn(async move {
            w.write_all(HYPER_431).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        let text = String::from_utf8(got).unwrap();
        assert!(text.ends_with("}}"), "{text}");
        assert!(text.contains("\"head_too_large\""), "{text}");
    }
}
