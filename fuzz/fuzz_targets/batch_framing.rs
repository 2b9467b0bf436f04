//! Fuzzes the record framing every batch upload is parsed with (`server/src/framing.rs`,
//! compiled here from its source file so the fuzz build does not pull in the whole server).
//!
//! The first input byte picks how the rest is cut into pieces, as a network would: the
//! decoder must never panic, must give the same events whatever the cut (it is
//! incremental), and its payload pieces must add up to what each record frame announced.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

#[path = "../../server/src/framing.rs"]
#[allow(dead_code)]
mod framing;

use framing::{Decoder, Event};

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
});
