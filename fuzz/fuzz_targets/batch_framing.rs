//! Fuzzes the record framing every batch upload is parsed with (`tsblob_proto::framing`,
//! the crate the server, the CLI and the bench share).
//!
//! The first input byte picks how the rest is cut into pieces, as a network would: the
//! decoders must never panic, must give the same events whatever the cut (they are
//! incremental), and their payload pieces must add up to what each record frame announced.
//! The client-side `ChunkDecoder` (payloads as slices of the received chunks) must agree
//! with the server's `Decoder` event for event.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tsblob_proto::framing::{ChunkDecoder, Decoder, Event, FrameError};

/// Appends an event, joining payload pieces so that two cuts can be compared.
fn push_event(events: &mut Vec<Event>, ev: Event) {
    match (events.last_mut(), ev) {
        (Some(Event::Data(prev)), Event::Data(b)) => {
            let mut joined = BytesMut::from(&prev[..]);
            joined.extend_from_slice(&b);
            *prev = joined.freeze();
        }
        (_, ev) => events.push(ev),
    }
}

/// The same as [`decode`], through the `ChunkDecoder`.
fn decode_chunks(input: &[u8], piece: usize) -> (Vec<Event>, Option<String>) {
    let mut d = ChunkDecoder::new();
    let mut events = Vec::new();
    for chunk in input.chunks(piece.max(1)) {
        d.push(Bytes::copy_from_slice(chunk));
        loop {
            match d.next_event() {
                Ok(None) => break,
                Ok(Some(ev)) => push_event(&mut events, ev),
                Err(FrameError(e)) => return (events, Some(e)),
            }
        }
    }
    (events, None)
}

/// Decodes `input` fed in pieces of `piece` bytes; payload pieces are joined so that two
/// cuts of the same input can be compared.
fn decode(input: &[u8], piece: usize) -> (Vec<Event>, Option<String>) {
    let mut d = Decoder::new();
    let mut buf = BytesMut::new();
    let mut events: Vec<Event> = Vec::new();
    let mut announced: Option<u64> = None;
    let mut received = 0u64;
    for chunk in input.chunks(piece.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            match d.next(&mut buf) {
                Ok(None) => break,
                Ok(Some(Event::Data(b))) => {
                    received += b.len() as u64;
                    assert!(Some(received) <= announced, "more payload than announced");
                    push_event(&mut events, Event::Data(b));
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
                Err(e) => return (events, Some(e.0)),
            }
        }
    }
    (events, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let (whole, whole_err) = decode(input, input.len());
    let (pieces, pieces_err) = decode(input, usize::from(cut % 64) + 1);
    assert_eq!(
        whole_err.is_some(),
        pieces_err.is_some(),
        "the cut changed the verdict"
    );
    if whole_err.is_none() {
        assert_eq!(whole, pieces, "the cut changed the events");
    }
    let (chunked, chunked_err) = decode_chunks(input, usize::from(cut % 64) + 1);
    assert_eq!(
        whole_err.is_some(),
        chunked_err.is_some(),
        "the chunk decoder's verdict differs"
    );
    if whole_err.is_none() {
        assert_eq!(whole, chunked, "the chunk decoder's events differ");
    }
});
