//! tsblob's record framing (`application/x-tsblob-records`, see `docs/api.md`): an encoder for
//! batch bodies and an incremental decoder for query streams that holds at most one record.

use anyhow::{bail, Result};
use bytes::{Buf, BufMut, BytesMut};

/// Fixed header of a record frame.
const RECORD_HEADER: usize = 25;
const KIND_END: u8 = 0;
const KIND_RECORD: u8 = 1;
const KIND_ERROR: u8 = 2;

/// Appends one record frame.
pub fn encode_record(
    out: &mut Vec<u8>,
    ts: u64,
    content_type: &str,
    labels: &[(String, String)],
    payload: &[u8],
) {
    let labels_len: usize = labels.iter().map(|(k, v)| 4 + k.len() + v.len()).sum();
    out.reserve(RECORD_HEADER + content_type.len() + labels_len + payload.len());
    out.put_u8(KIND_RECORD);
    out.put_u64_le(ts);
    out.put_u16_le(content_type.len() as u16);
    out.put_u16_le(labels.len() as u16);
    out.put_u32_le(labels_len as u32);
    out.put_u64_le(payload.len() as u64);
    out.put_slice(content_type.as_bytes());
    for (k, v) in labels {
        out.put_u16_le(k.len() as u16);
        out.put_slice(k.as_bytes());
        out.put_u16_le(v.len() as u16);
        out.put_slice(v.as_bytes());
    }
    out.put_slice(payload);
}

/// Appends the end frame that closes a batch of `count` records.
pub fn encode_end(out: &mut Vec<u8>, count: u64) {
    out.put_u8(KIND_END);
    out.put_u64_le(count);
}

/// One decoded record.
#[derive(Debug)]
pub struct Frame {
    /// Timestamp in µs.
    pub ts: u64,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// Payload bytes.
    pub payload: BytesMut,
}

/// What the decoder found next.
#[derive(Debug)]
pub enum Next {
    /// Feed more bytes.
    NeedMore,
    /// A complete record.
    Record(Frame),
    /// The end frame, with the record count the server announced.
    End(u64),
}

/// Incremental decoder: push chunks with [`Decoder::push`], pull frames with [`Decoder::next`].
#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    /// Adds bytes received from the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes received but not yet decoded.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Decodes the next frame if it is complete.
    pub fn next(&mut self) -> Result<Next> {
        let Some(&kind) = self.buf.first() else {
            return Ok(Next::NeedMore);
        };
        match kind {
            KIND_RECORD => {
                if self.buf.len() < RECORD_HEADER {
                    return Ok(Next::NeedMore);
                }
                let mut h = &self.buf[1..RECORD_HEADER];
                let ts = h.get_u64_le();
                let ct_len = usize::from(h.get_u16_le());
                let label_count = h.get_u16_le();
                let labels_len = h.get_u32_le() as usize;
                let payload_len = usize::try_from(h.get_u64_le())?;
                let total = RECORD_HEADER + ct_len + labels_len + payload_len;
                if self.buf.len() < total {
                    self.buf.reserve(total - self.buf.len());
                    return Ok(Next::NeedMore);
                }
                let mut frame = self.buf.split_to(total);
                frame.advance(RECORD_HEADER + ct_len);
                let mut label_bytes = frame.split_to(labels_len);
                let labels = decode_labels(&mut label_bytes, label_count)?;
                Ok(Next::Record(Frame {
                    ts,
                    labels,
                    payload: frame,
                }))
            }
            KIND_END => {
                if self.buf.len() < 9 {
                    return Ok(Next::NeedMore);
                }
                let count = (&self.buf[1..9]).get_u64_le();
                self.buf.advance(9);
                Ok(Next::End(count))
            }
            KIND_ERROR => {
                if self.buf.len() < 5 {
                    return Ok(Next::NeedMore);
                }
                let len = (&self.buf[1..5]).get_u32_le() as usize;
                if self.buf.len() < 5 + len {
                    return Ok(Next::NeedMore);
                }
                let text = String::from_utf8_lossy(&self.buf[5..5 + len]).into_owned();
                bail!("tsblob ended the query stream with an error frame: {text}")
            }
            other => bail!("tsblob query stream: unknown frame kind {other}"),
        }
    }
}

fn decode_labels(bytes: &mut BytesMut, count: u16) -> Result<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let key = take_str(bytes)?;
        let value = take_str(bytes)?;
        out.push((key, value));
    }
    if !bytes.is_empty() {
        bail!("tsblob query stream: a record's labels are longer than their count says");
    }
    Ok(out)
}

fn take_str(bytes: &mut BytesMut) -> Result<String> {
    if bytes.len() < 2 {
        bail!("tsblob query stream: truncated label");
    }
    let len = usize::from(bytes.get_u16_le());
    if bytes.len() < len {
        bail!("tsblob query stream: truncated label");
    }
    let raw = bytes.split_to(len);
    Ok(String::from_utf8(raw.to_vec())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_through_the_decoder_byte_by_byte() -> Result<()> {
        let labels = vec![("l0".to_string(), "cam-1".to_string())];
        let mut body = Vec::new();
        encode_record(&mut body, 7, "application/octet-stream", &labels, b"hello");
        encode_record(&mut body, 8, "", &[], b"");
        encode_end(&mut body, 2);
        let mut dec = Decoder::default();
        let mut seen = Vec::new();
        let mut end = None;
        for b in &body {
            dec.push(std::slice::from_ref(b));
            loop {
                match dec.next()? {
                    Next::NeedMore => break,
                    Next::Record(f) => seen.push((f.ts, f.labels, f.payload.to_vec())),
                    Next::End(n) => end = Some(n),
                }
            }
        }
        assert_eq!(seen[0], (7, labels, b"hello".to_vec()));
        assert_eq!(seen[1], (8, vec![], vec![]));
        assert_eq!(end, Some(2));
        assert_eq!(dec.pending(), 0);
        Ok(())
    }
}
