//! tsblob's record framing (`application/x-tsblob-records`, see `docs/api.md`): an encoder for
//! batch bodies and an incremental decoder for query streams that never copies a payload.

use anyhow::{bail, Result};
use bytes::{Buf, BufMut};

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
    encode_record_head(out, ts, content_type, labels, payload.len() as u64);
    out.put_slice(payload);
}

/// Appends a record frame's head: its `payload_len` bytes of payload must follow.
pub fn encode_record_head(
    out: &mut Vec<u8>,
    ts: u64,
    content_type: &str,
    labels: &[(String, String)],
    payload_len: u64,
) {
    let labels_len: usize = labels.iter().map(|(k, v)| 4 + k.len() + v.len()).sum();
    out.reserve(RECORD_HEADER + content_type.len() + labels_len);
    out.put_u8(KIND_RECORD);
    out.put_u64_le(ts);
    out.put_u16_le(content_type.len() as u16);
    out.put_u16_le(labels.len() as u16);
    out.put_u32_le(labels_len as u32);
    out.put_u64_le(payload_len);
    out.put_slice(content_type.as_bytes());
    for (k, v) in labels {
        out.put_u16_le(k.len() as u16);
        out.put_slice(k.as_bytes());
        out.put_u16_le(v.len() as u16);
        out.put_slice(v.as_bytes());
    }
}

/// Appends the end frame that closes a batch of `count` records.
pub fn encode_end(out: &mut Vec<u8>, count: u64) {
    out.put_u8(KIND_END);
    out.put_u64_le(count);
}

/// What the decoder found in the stream, in order.
#[derive(Debug, PartialEq)]
pub enum Event<'a> {
    /// A record's head: its payload (`len` bytes) follows as [`Event::Payload`] pieces.
    Record {
        /// Timestamp in µs.
        ts: u64,
        /// Labels.
        labels: Vec<(String, String)>,
        /// Payload length.
        len: u64,
    },
    /// The next piece of the current record's payload, borrowed from the received chunk.
    Payload(&'a [u8]),
    /// The current record's payload is complete.
    RecordDone,
    /// The end frame, with the record count the server announced.
    End(u64),
}

/// Incremental decoder: [`Decoder::feed`] each received chunk. Heads (a few dozen bytes) are
/// gathered in a small buffer; payload bytes are handed on as slices of the chunk they came
/// in, never copied, so a client can check gigabytes without buffering them.
#[derive(Debug, Default)]
pub struct Decoder {
    head: Vec<u8>,
    payload_left: u64,
}

impl Decoder {
    /// Bytes of an unfinished frame: a partial head, or payload bytes still to come.
    pub fn pending(&self) -> u64 {
        self.head.len() as u64 + self.payload_left
    }

    /// Decodes `chunk`, calling `on` for every event it completes.
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        mut on: impl FnMut(Event<'_>) -> Result<()>,
    ) -> Result<()> {
        loop {
            if self.payload_left > 0 {
                if chunk.is_empty() {
                    return Ok(());
                }
                let n = chunk
                    .len()
                    .min(usize::try_from(self.payload_left).unwrap_or(usize::MAX));
                on(Event::Payload(&chunk[..n]))?;
                chunk = &chunk[n..];
                self.payload_left -= n as u64;
                if self.payload_left == 0 {
                    on(Event::RecordDone)?;
                }
                continue;
            }
            // A head completes as soon as its last byte is in, even at the end of a chunk.
            let need = head_len(&self.head)?;
            if self.head.len() < need {
                if chunk.is_empty() {
                    return Ok(());
                }
                let n = (need - self.head.len()).min(chunk.len());
                self.head.extend_from_slice(&chunk[..n]);
                chunk = &chunk[n..];
                continue;
            }
            self.finish_head(&mut on)?;
        }
    }

    fn finish_head(&mut self, on: &mut impl FnMut(Event<'_>) -> Result<()>) -> Result<()> {
        let head = std::mem::take(&mut self.head);
        match head[0] {
            KIND_RECORD => {
                let mut h = &head[1..RECORD_HEADER];
                let ts = h.get_u64_le();
                let ct_len = usize::from(h.get_u16_le());
                let label_count = h.get_u16_le();
                let _labels_len = h.get_u32_le();
                let len = h.get_u64_le();
                let mut label_bytes = &head[RECORD_HEADER + ct_len..];
                let labels = decode_labels(&mut label_bytes, label_count)?;
                on(Event::Record { ts, labels, len })?;
                self.payload_left = len;
                if len == 0 {
                    on(Event::RecordDone)?;
                }
            }
            KIND_END => on(Event::End((&head[1..9]).get_u64_le()))?,
            _ => {
                let text = String::from_utf8_lossy(&head[5..]).into_owned();
                bail!("tsblob ended the query stream with an error frame: {text}")
            }
        }
        self.head = head;
        self.head.clear();
        Ok(())
    }
}

/// Length of the head that starts `buf` as far as `buf` tells (grows as more arrives).
fn head_len(buf: &[u8]) -> Result<usize> {
    let Some(&kind) = buf.first() else {
        return Ok(1);
    };
    Ok(match kind {
        KIND_RECORD if buf.len() < RECORD_HEADER => RECORD_HEADER,
        KIND_RECORD => {
            let ct_len = usize::from(u16::from_le_bytes([buf[9], buf[10]]));
            let labels_len = u32::from_le_bytes([buf[13], buf[14], buf[15], buf[16]]) as usize;
            RECORD_HEADER + ct_len + labels_len
        }
        KIND_END => 9,
        KIND_ERROR if buf.len() < 5 => 5,
        KIND_ERROR => 5 + u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize,
        other => bail!("tsblob query stream: unknown frame kind {other}"),
    })
}

fn decode_labels(bytes: &mut &[u8], count: u16) -> Result<Vec<(String, String)>> {
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

fn take_str(bytes: &mut &[u8]) -> Result<String> {
    if bytes.len() < 2 {
        bail!("tsblob query stream: truncated label");
    }
    let len = usize::from(bytes.get_u16_le());
    if bytes.len() < len {
        bail!("tsblob query stream: truncated label");
    }
    let (raw, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(String::from_utf8(raw.to_vec())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn frames_round_trip_through_the_decoder_byte_by_byte() -> Result<()> {
        let labels = vec![("l0".to_string(), "cam-1".to_string())];
        let mut body = Vec::new();
        encode_record(&mut body, 7, "application/octet-stream", &labels, b"hello");
        encode_record(&mut body, 8, "", &[], b"");
        encode_end(&mut body, 2);
        let mut dec = Decoder::default();
        type Seen = (u64, Vec<(String, String)>, Vec<u8>);
        let mut seen: Vec<Seen> = Vec::new();
        let mut end = None;
        for b in &body {
            dec.feed(std::slice::from_ref(b), |ev| {
                match ev {
                    Event::Record { ts, labels, .. } => seen.push((ts, labels, Vec::new())),
                    Event::Payload(p) => seen.last_mut().context("payload first")?.2.extend(p),
                    Event::RecordDone => {}
                    Event::End(n) => end = Some(n),
                }
                Ok(())
            })?;
        }
        assert_eq!(seen[0], (7, labels.clone(), b"hello".to_vec()));
        assert_eq!(seen[1], (8, vec![], vec![]));
        assert_eq!(end, Some(2));
        assert_eq!(dec.pending(), 0);
        // The same body in one piece gives the same events.
        let mut count = 0;
        Decoder::default().feed(&body, |ev| {
            if matches!(ev, Event::RecordDone) {
                count += 1;
            }
            Ok(())
        })?;
        assert_eq!(count, 2);
        Ok(())
    }
}
