//! Fuzzes the record framing every batch upload is parsed with (`tsblob_proto::framing`,
//! the crate the server, the CLI and the bench share).
//!
//! The first input byte picks how the rest is cut into pieces, as a network would: the
//! decoders must never panic, must give the same events whatever the cut (they are
//! incremental), and their payload pieces must add up to what each record frame announced.
//! The client-side `ChunkDecoder` (payloads as slices of the received chunks) must agree
//! with the server's `Decoder` event for event, and so must `ChunkDecoder::next_raw` (the
//! batch route's: heads with their content type and labels still encoded, decoded here).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tsblob_proto::framing::{ChunkDecoder, Decoder, Event, FrameError, RawEvent};

/// One of the two decoders: the server's (fed a `BytesMut`) or the clients' (fed chunks).
enum Dec {
    Server(Decoder, BytesMut),
    Client(ChunkDecoder),
    Raw(ChunkDecoder),
}

impl Dec {
    fn push(&mut self, chunk: &[u8]) {
        match self {
            Dec::Server(_, buf) => buf.extend_from_slice(chunk),
            Dec::Client(d) | Dec::Raw(d) => d.push(Bytes::copy_from_slice(chunk)),
        }
    }

    fn next(&mut self) -> Result<Option<Event>, FrameError> {
        match self {
            Dec::Server(d, buf) => d.next(buf),
            Dec::Client(d) => d.next_event(),
            Dec::Raw(d) => Ok(d.next_raw()?.map(|e| match e {
                RawEvent::Record(h) => {
                    let head = h.head();
                    assert_eq!(h.labels(), head.labels);
                    assert_eq!(h.content_type(), head.content_type);
                    Event::Record(head)
                }
                RawEvent::Other(e) => e,
            })),
        }
    }
}

/// Decodes `input` fed in pieces of `piece` bytes; payload pieces are joined so that two
/// cuts of the same input can be compared.
fn decode(mut d: Dec, input: &[u8], piece: usize) -> (Vec<Event>, Option<String>) {
    let mut events: Vec<Event> = Vec::new();
    let mut announced: Option<u64> = None;
    let mut received = 0u64;
    for chunk in input.chunks(piece.max(1)) {
        d.push(chunk);
        loop {
            match d.next() {
                Ok(None) => break,
                Ok(Some(Event::Data(b))) => {
                    received += b.len() as u64;
                    assert!(Some(received) <= announced, "more payload than announced");
                    match events.last_mut() {
                        Some(Event::Data(prev)) => {
                            let mut joined = BytesMut::from(&prev[..]);
                            joined.extend_from_slice(&b);
                            *prev = joined.freeze();
                        }
                        _ => events.push(Event::Data(b)),
                    }
                }
                Ok(Some(ev)) => {
                    if let Some(want) = announced {
                        assert_eq!(received, want, "a frame began inside a payload");
                    }
                    (announced, received) = match &ev {
                        Event::Record(h) => (Some(h.payload_len), 0),
                        _ => (None, 0),
                    };
                    events.push(ev);
                }
                Err(FrameError(e)) => return (events, Some(e)),
            }
        }
    }
    (events, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let server = || Dec::Server(Decoder::new(), BytesMut::new());
    let (whole, whole_err) = decode(server(), input, input.len());
    let piece = usize::from(cut % 64) + 1;
    for (what, d) in [
        ("the cut", server()),
        ("the chunk decoder", Dec::Client(ChunkDecoder::new())),
        ("the raw heads", Dec::Raw(ChunkDecoder::new())),
    ] {
        let (events, err) = decode(d, input, piece);
        assert_eq!(
            whole_err.is_some(),
            err.is_some(),
            "{what} changed the verdict"
        );
        if whole_err.is_none() {
            assert_eq!(whole, events, "{what} changed the events");
        }
    }
});
