//! The reference model: for every record key, the set of states a correct engine may be in.
//!
//! A state is "absent", "evicted" (absent because a FIFO quota deleted its block: it must
//! never come back) or "present with this version". Concurrency and kills make a key's state
//! uncertain; an observation (a read) must match one allowed state and collapses the set to
//! what it matched.

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use tsblob_storage::Labels;

/// Where a record lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub bucket: String,
    pub entry: String,
    pub ts: u64,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}@{}", self.bucket, self.entry, self.ts)
    }
}

/// One acknowledged (or possibly applied) version of a record. Its payload is derived from
/// (entry, ts, ver, len), so a read can be checked byte for byte without keeping copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub ver: u32,
    pub len: u32,
    pub ct: String,
    pub labels: Labels,
}

/// Sequence numbers taken when an operation started and when it was acknowledged: the
/// real-time order of two operations is known when one's `end` precedes the other's `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Absent,
    Evicted,
    /// The version, and when its current copy was written (for the FIFO order check).
    Present(Version, Span),
}

/// What a read saw: `None` for "not found". `fp` is the payload's fingerprint (`None` for a
/// head, which carries no payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obs {
    pub fp: Option<u64>,
    pub len: u64,
    pub ct: String,
    pub labels: Labels,
}

#[derive(Debug, Clone)]
pub struct KeyModel {
    pub allowed: Vec<State>,
    /// A FIFO quota may have deleted the record since it was last seen.
    pub evictable: bool,
}

/// Where an attachment lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AKey {
    pub bucket: String,
    pub entry: String,
    pub name: String,
}

impl std::fmt::Display for AKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} attachment {}", self.bucket, self.entry, self.name)
    }
}

/// The bytes of version `ver` of an attachment (a JSON document, its length varying).
pub fn attachment_doc(entry: &str, name: &str, ver: u32) -> Vec<u8> {
    let pad = "x".repeat((ver as usize * 37) % 300);
    format!(r#"{{"e":"{entry}","n":"{name}","v":{ver},"p":"{pad}"}}"#).into_bytes()
}

/// The version whose bytes `data` is, or `u32::MAX` for bytes no write produced.
pub fn attachment_version(entry: &str, name: &str, data: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(data);
    let ver = text
        .split(r#""v":"#)
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse::<u32>().ok());
    match ver {
        Some(v) if attachment_doc(entry, name, v) == data => v,
        _ => u32::MAX,
    }
}

#[derive(Debug, Default)]
pub struct Model {
    /// Per attachment, the versions it may hold (`None`: absent).
    pub attach: BTreeMap<AKey, Vec<Option<u32>>>,
    pub keys: BTreeMap<Key, KeyModel>,
    /// Every data version and content type ever attempted per key: a record of another lane
    /// seen mid-flight must be one of them.
    pub registry: BTreeMap<Key, Vec<(u32, u32, String)>>,
    /// Buckets that exist (certainly) after the last applied operation.
    pub buckets: BTreeSet<String>,
    /// When the current copy of a record seen evicted was written (the earliest candidate).
    pub evicted_span: BTreeMap<Key, Span>,
}

pub fn fingerprint(data: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

/// The payload of version `ver` of (entry, ts): every fourth version compresses well (so
/// zstd buckets store it compressed), the rest are pseudo-random.
pub fn payload(entry: &str, ts: u64, ver: u32, len: u32) -> Vec<u8> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (entry, ts, ver).hash(&mut h);
    let seed = h.finish();
    if ver.is_multiple_of(4) {
        let pattern = seed.to_le_bytes();
        let mut out = Vec::with_capacity(len as usize + 21);
        while out.len() < len as usize {
            out.extend_from_slice(b"tsblob-model-");
            out.extend_from_slice(&pattern);
        }
        out.truncate(len as usize);
        out
    } else {
        let mut out = vec![0u8; len as usize];
        Xoshiro256PlusPlus::seed_from_u64(seed).fill_bytes(&mut out);
        out
    }
}

pub fn payload_fp(key: &Key, ver: u32, len: u32) -> u64 {
    fingerprint(&payload(&key.entry, key.ts, ver, len))
}

impl Version {
    pub fn matches(&self, key: &Key, obs: &Obs) -> bool {
        obs.len == self.len as u64
            && obs.ct == self.ct
            && obs.labels == self.labels
            && obs
                .fp
                .is_none_or(|fp| fp == payload_fp(key, self.ver, self.len))
    }
}

pub fn show_states(states: &[State]) -> String {
    let parts: Vec<String> = states
        .iter()
        .map(|s| match s {
            State::Absent => "absent".to_string(),
            State::Evicted => "evicted".to_string(),
            State::Present(v, _) => {
                format!("v{} ({} B, {}, labels {:?})", v.ver, v.len, v.ct, v.labels)
            }
        })
        .collect();
    format!("[{}]", parts.join(" | "))
}

pub fn show_obs(obs: &Option<Obs>) -> String {
    match obs {
        None => "not found".into(),
        Some(o) => format!(
            "{} B, {}, labels {:?}{}",
            o.len,
            o.ct,
            o.labels,
            if o.fp.is_some() { "" } else { " (head)" }
        ),
    }
}

impl Model {
    pub fn aget(&self, key: &AKey) -> Vec<Option<u32>> {
        self.attach.get(key).cloned().unwrap_or_else(|| vec![None])
    }

    pub fn aset(&mut self, key: &AKey, allowed: Vec<Option<u32>>) {
        let mut dedup: Vec<Option<u32>> = Vec::new();
        for s in allowed {
            if !dedup.contains(&s) {
                dedup.push(s);
            }
        }
        self.attach.insert(key.clone(), dedup);
    }

    pub fn awiden(&mut self, key: &AKey, more: Option<u32>) {
        let mut all = self.aget(key);
        all.push(more);
        self.aset(key, all);
    }

    /// Checks what a read saw of an attachment (`None`: not there) and collapses the key to
    /// it.
    pub fn aobserve(&mut self, key: &AKey, seen: Option<u32>) -> Result<(), String> {
        let allowed = self.aget(key);
        if !allowed.contains(&seen) {
            let show = |v: &Option<u32>| v.map_or("absent".to_string(), |v| format!("v{v}"));
            let all: Vec<String> = allowed.iter().map(show).collect();
            return Err(format!(
                "{key}: read {} but the model allows only [{}]{}",
                show(&seen),
                all.join(" | "),
                if seen.is_none() {
                    " (an acknowledged attachment is lost)"
                } else {
                    ""
                }
            ));
        }
        self.aset(key, vec![seen]);
        Ok(())
    }

    /// The attachment keys the model knows of one entry.
    pub fn akeys_of_entry(&self, bucket: &str, entry: &str) -> Vec<AKey> {
        self.attach
            .keys()
            .filter(|k| k.bucket == bucket && k.entry == entry)
            .cloned()
            .collect()
    }

    pub fn get(&self, key: &Key) -> Vec<State> {
        self.keys
            .get(key)
            .map(|k| k.allowed.clone())
            .unwrap_or_else(|| vec![State::Absent])
    }

    pub fn set(&mut self, key: &Key, allowed: Vec<State>) {
        let evictable = self.keys.get(key).is_some_and(|k| k.evictable);
        let mut dedup: Vec<State> = Vec::new();
        for s in allowed {
            if !dedup.contains(&s) {
                dedup.push(s);
            }
        }
        self.keys.insert(
            key.clone(),
            KeyModel {
                allowed: dedup,
                evictable,
            },
        );
    }

    /// The record may be deleted by a FIFO quota before it is next seen.
    pub fn set_evictable(&mut self, key: &Key) {
        if let Some(k) = self.keys.get_mut(key) {
            k.evictable = true;
        }
    }

    /// Adds states to what a key may be in (an operation that may or may not have happened).
    pub fn widen(&mut self, key: &Key, more: Vec<State>) {
        let mut all = self.get(key);
        all.extend(more);
        self.set(key, all);
    }

    pub fn register(&mut self, key: &Key, ver: u32, len: u32, ct: &str) {
        let r = self.registry.entry(key.clone()).or_default();
        if !r.iter().any(|(v, l, c)| *v == ver && *l == len && c == ct) {
            r.push((ver, len, ct.to_string()));
        }
    }

    /// Marks every record of `bucket` as possibly evicted (a FIFO quota was in force).
    pub fn mark_evictable(&mut self, bucket: &str) {
        for (k, m) in self.keys.iter_mut() {
            if k.bucket == bucket {
                m.evictable = true;
            }
        }
    }

    /// Checks an observation against the key's allowed states and collapses them to the
    /// match. `Err` describes the violation.
    pub fn observe(&mut self, key: &Key, obs: &Option<Obs>, fifo_now: bool) -> Result<(), String> {
        let km = self.keys.get(key).cloned().unwrap_or(KeyModel {
            allowed: vec![State::Absent],
            evictable: false,
        });
        let matching: Vec<State> = km
            .allowed
            .iter()
            .filter(|s| match (s, obs) {
                (State::Absent | State::Evicted, None) => true,
                (State::Present(v, _), Some(o)) => v.matches(key, o),
                _ => false,
            })
            .cloned()
            .collect();
        let new = if !matching.is_empty() {
            matching
        } else if obs.is_none() && km.evictable {
            let written = km.allowed.iter().filter_map(|s| match s {
                State::Present(_, span) => Some(*span),
                _ => None,
            });
            if let Some(span) = written.min_by_key(|s| s.start) {
                self.evicted_span.insert(key.clone(), span);
            }
            vec![State::Evicted]
        } else {
            let evicted = km.allowed.contains(&State::Evicted);
            return Err(format!(
                "{key}: read {} but the model allows only {}{}",
                show_obs(obs),
                show_states(&km.allowed),
                if evicted && obs.is_some() {
                    " (an evicted record came back)"
                } else if obs.is_some() && km.allowed.iter().all(|s| *s == State::Absent) {
                    " (a removed or never-acknowledged record is present)"
                } else if obs.is_none() {
                    " (an acknowledged record is lost)"
                } else {
                    ""
                }
            ));
        };
        let present = new.iter().any(|s| matches!(s, State::Present(..)));
        self.keys.insert(
            key.clone(),
            KeyModel {
                allowed: new,
                // Seen present while no FIFO quota could act: not evictable until one can.
                evictable: km.evictable && (fifo_now || !present),
            },
        );
        Ok(())
    }

    /// A record seen mid-flight (of another lane, or in a racing entry) must carry one of
    /// the data versions and content types ever attempted for its key.
    pub fn plausible(&self, key: &Key, obs: &Obs) -> Result<(), String> {
        let ok = self.registry.get(key).is_some_and(|r| {
            r.iter().any(|(ver, len, ct)| {
                obs.len == *len as u64
                    && obs.ct == *ct
                    && obs.fp.is_none_or(|fp| fp == payload_fp(key, *ver, *len))
            })
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{key}: read {} which no write ever attempted (corrupt or foreign bytes)",
                show_obs(&Some(obs.clone()))
            ))
        }
    }

    pub fn keys_of_entry(&self, bucket: &str, entry: &str) -> Vec<Key> {
        self.keys
            .keys()
            .filter(|k| k.bucket == bucket && k.entry == entry)
            .cloned()
            .collect()
    }

    /// (bucket, entry) pairs the model knows records of.
    pub fn entries(&self) -> BTreeSet<(String, String)> {
        self.keys
            .keys()
            .map(|k| (k.bucket.clone(), k.entry.clone()))
            .collect()
    }
}
