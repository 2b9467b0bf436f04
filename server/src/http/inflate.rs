//! A batch body as plain bytes, decoded from `Content-Encoding: zstd` as it arrives.
//!
//! Bug "zstd body collected whole" (issue 27, defect 2): one valid zstd batch of 600 MiB
//! took the server's RSS from 25 to 1,360 MB, since the compressed body was collected
//! whole (up to `--max-body`) before its first byte was decoded. Now each received chunk
//! is decoded into pieces of at most [`PIECE`] bytes as the parser asks for them, so a body
//! of any size holds one received chunk, one piece and the decoder's window (at most
//! 2^[`WINDOW_LOG_MAX`] bytes), all counted in the memory budget. `--max-compressed-body`
//! bounds the bytes sent and `--max-decompressed-body` the bytes they decode to: 413 past
//! either. Decoding runs on the request's task in steps of one piece (tens of µs each).

use axum::body::Body;
use axum::http::StatusCode;
use bytes::{Buf, Bytes};
use tsblob_proto::format_size;
use tsblob_proto::ErrorCode;
use zstd::zstd_safe::{get_error_name, DCtx, DParameter, InBuffer, OutBuffer};

use super::body::BodyChunks;
use super::budget::{Held, MemoryBudget};
use super::errors::AppError;
use super::Limits;

/// The most plain bytes one decoding step yields.
pub const PIECE: usize = 256 << 10;
/// The largest window a frame may ask for: 8 MiB, what zstd's levels up to 19 use (the
/// library's own default limit, 2^27, would let one request make the decoder allocate
/// 128 MiB). A frame asking for more is refused (400) with a message.
pub const WINDOW_LOG_MAX: u32 = 23;

/// The bytes of a request body: as sent, or decoded from zstd.
pub enum PlainChunks {
    Plain(BodyChunks),
    Zstd(Box<Inflate>),
}

impl PlainChunks {
    /// The body of a batch; `zstd`: decoded as it arrives.
    pub fn new(
        body: Body,
        zstd: bool,
        limits: &Limits,
        budget: &MemoryBudget,
    ) -> Result<PlainChunks, AppError> {
        if !zstd {
            return Ok(PlainChunks::Plain(BodyChunks::new(
                body,
                limits.max_body,
                limits,
            )));
        }
        Ok(PlainChunks::Zstd(Box::new(Inflate::new(
            body, limits, budget,
        )?)))
    }

    /// The next piece of plain bytes; `Ok(None)` at the end of the body.
    pub async fn next(&mut self) -> Result<Option<Bytes>, AppError> {
        match self {
            PlainChunks::Plain(c) => c.next().await,
            PlainChunks::Zstd(z) => z.next().await,
        }
    }

    /// Plain bytes so far.
    pub fn seen(&self) -> u64 {
        match self {
            PlainChunks::Plain(c) => c.seen(),
            PlainChunks::Zstd(z) => z.plain,
        }
    }
}

/// A zstd body being decoded.
pub struct Inflate {
    chunks: BodyChunks,
    dctx: DCtx<'static>,
    /// Received bytes not yet given to the decoder.
    input: Bytes,
    /// The last step filled its piece: the decoder may hold more without new input.
    pending_out: bool,
    /// A frame was started and not finished.
    in_frame: bool,
    plain: u64,
    max_plain: u64,
    /// The decoder's memory and a piece, in the budget.
    held: Held,
}

fn bad(why: impl std::fmt::Display) -> AppError {
    AppError::bad_request(format!(
        "the zstd body does not decompress ({why}): send complete zstd frames (window at most {} MiB, e.g. levels up to 19), or the body plain without Content-Encoding",
        (1u64 << WINDOW_LOG_MAX) >> 20
    ))
}

impl Inflate {
    fn new(body: Body, limits: &Limits, budget: &MemoryBudget) -> Result<Inflate, AppError> {
        let mut dctx = DCtx::create();
        dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
            .map_err(|c| AppError::internal(format!("zstd: {}", get_error_name(c))))?;
        // Taken at once, not waited for: what the decoder grows to is checked as it does.
        let mut held = budget.upload();
        if !held.try_resize((dctx.sizeof() + PIECE) as u64) {
            return Err(budget.busy("a zstd body's decoder"));
        }
        Ok(Inflate {
            chunks: BodyChunks::new(
                body,
                limits.max_compressed_body.min(limits.max_body),
                limits,
            ),
            dctx,
            input: Bytes::new(),
            pending_out: false,
            in_frame: false,
            plain: 0,
            max_plain: limits.max_decompressed_body,
            held,
        })
    }

    async fn next(&mut self) -> Result<Option<Bytes>, AppError> {
        loop {
            if !self.input.is_empty() || self.pending_out {
                if let Some(piece) = self.step()? {
                    return Ok(Some(piece));
                }
                continue;
            }
            match self.chunks.next().await {
                Ok(Some(c)) => self.input = c,
                Ok(None) if self.in_frame => {
                    return Err(bad("the body ended inside a frame: it was cut off"))
                }
                Ok(None) => return Ok(None),
                Err(e) if e.status == StatusCode::PAYLOAD_TOO_LARGE => {
                    return Err(AppError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        ErrorCode::PayloadTooLarge,
                        format!(
                            "the zstd body is over the server's limit of {} as sent (--max-compressed-body): split it",
                            format_size(self.chunks.limit())
                        ),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Decodes into one piece; `None` when nothing came out (more input needed).
    fn step(&mut self) -> Result<Option<Bytes>, AppError> {
        let mut piece = vec![0u8; PIECE];
        let mut out = OutBuffer::around(&mut piece[..]);
        let mut inp = InBuffer::around(&self.input);
        let hint = self
            .dctx
            .decompress_stream(&mut out, &mut inp)
            .map_err(|c| bad(get_error_name(c)))?;
        let (read, written) = (inp.pos(), out.pos());
        self.input.advance(read);
        self.pending_out = written == PIECE;
        self.in_frame = hint != 0;
        // The window is allocated when a frame's header is read: account for it.
        if !self.held.try_resize((self.dctx.sizeof() + PIECE) as u64) {
            return Err(AppError::busy(
                "the server's memory budget (--memory-budget) has no room for this zstd body's decoder window right now: retry after the Retry-After delay, or compress with a smaller window (a lower level)",
            ));
        }
        if written == 0 {
            if read == 0 && !self.input.is_empty() {
                return Err(bad("the decoder made no progress"));
            }
            return Ok(None);
        }
        self.plain += written as u64;
        if self.plain > self.max_plain {
            return Err(AppError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                format!(
                    "the zstd body decompresses to more than the server's limit of {} (--max-decompressed-body): split it into several batches",
                    format_size(self.max_plain)
                ),
            ));
        }
        piece.truncate(written);
        Ok(Some(Bytes::from(piece)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn body_of(pieces: Vec<Vec<u8>>) -> Body {
        let s = futures_util::stream::iter(
            pieces
                .into_iter()
                .map(|p| Ok::<_, std::io::Error>(Bytes::from(p))),
        );
        Body::from_stream(s)
    }

    async fn decode_all(body: Body, limits: &Limits) -> Result<Vec<u8>, AppError> {
        let budget = MemoryBudget::new(64 << 20, std::time::Duration::ZERO);
        let mut c = PlainChunks::new(body, true, limits, &budget)?;
        let mut out = Vec::new();
        while let Some(p) = c.next().await? {
            assert!(p.len() <= PIECE);
            out.extend_from_slice(&p);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_zstd_body_decodes_as_it_arrives_across_chunks_and_frames() {
        let plain: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut packed = zstd::encode_all(&plain[..], 3).unwrap();
        packed.extend(zstd::encode_all(&b"tail"[..], 3).unwrap());
        let pieces: Vec<Vec<u8>> = packed.chunks(1000).map(|c| c.to_vec()).collect();
        let got = decode_all(body_of(pieces), &Limits::default())
            .await
            .unwrap();
        assert_eq!(got.len(), plain.len() + 4);
        assert!(got.starts_with(&plain) && got.ends_with(b"tail"));
    }

    #[tokio::test]
    async fn the_caps_on_sent_and_decoded_bytes_answer_413() {
        let zeros = zstd::encode_all(&vec![0u8; 10 << 20][..], 3).unwrap();
        let limits = Limits {
            max_decompressed_body: 1 << 20,
            ..Limits::default()
        };
        let e = decode_all(body_of(vec![zeros.clone()]), &limits)
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            e.message.contains("--max-decompressed-body"),
            "{}",
            e.message
        );
        let limits = Limits {
            max_compressed_body: 100,
            ..Limits::default()
        };
        let e = decode_all(body_of(vec![zeros]), &limits).await.unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("--max-compressed-body"), "{}", e.message);
        let e = decode_all(body_of(vec![b"not zstd".to_vec()]), &Limits::default())
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }
}
