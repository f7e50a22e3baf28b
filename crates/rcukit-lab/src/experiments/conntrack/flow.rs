//! A flow's key and record, and the hash every map uses.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// A flow's 5-tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source IPv4 address.
    pub src: u32,
    /// Destination IPv4 address.
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// The protocol of keys that are never in the table (SCTP: no flow of the model uses it).
pub(super) const ABSENT_PROTO: u8 = 132;

impl FlowKey {
    /// The key of flow `id` (one-to-one for ids below 2^40): a client in 10.0.0.0/8 talking to
    /// one of a few servers on 443, 80, 53 (UDP) or 22.
    pub fn of(id: u64) -> FlowKey {
        let dport = [443, 80, 53, 22][((id >> 3) & 3) as usize];
        FlowKey {
            src: 0x0A00_0000 | ((id >> 16) as u32 & 0x00FF_FFFF),
            dst: 0xC633_6400 | (id % 97) as u32,
            sport: id as u16,
            dport,
            proto: if dport == 53 { 17 } else { 6 },
        }
    }

    /// A key like flow `id`'s that no flow ever has (a packet of an unknown connection).
    pub fn absent(id: u64) -> FlowKey {
        FlowKey {
            proto: ABSENT_PROTO,
            ..FlowKey::of(id)
        }
    }

    /// The key as two words: what is hashed and what the C table compares.
    #[inline]
    pub fn words(&self) -> (u64, u64) {
        (
            (u64::from(self.src) << 32) | u64::from(self.dst),
            (u64::from(self.sport) << 24) | (u64::from(self.dport) << 8) | u64::from(self.proto),
        )
    }
}

impl Hash for FlowKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (w0, w1) = self.words();
        state.write_u64(w0);
        state.write_u64(w1);
    }
}

/// A flow's record. Counts its own drop, so that the run can check every record is freed.
#[derive(Debug)]
pub struct FlowRecord {
    /// The flow's id.
    pub id: u64,
    /// When it was created (the writer's count of creations).
    pub created: u64,
    /// When it expires (on the same clock).
    pub expires: u64,
    /// Packets seen.
    pub packets: u64,
    /// Bytes seen.
    pub bytes: u64,
    dropped: &'static AtomicU64,
}

impl FlowRecord {
    pub(super) fn new(id: u64, flows: u64, dropped: &'static AtomicU64) -> FlowRecord {
        FlowRecord {
            id,
            created: id,
            expires: id + flows,
            packets: 1,
            bytes: 64,
            dropped,
        }
    }

    /// What a lookup copies out of the record while the read side is held.
    #[inline]
    pub(super) fn seen(&self) -> (u64, u64) {
        (self.id, self.expires)
    }
}

impl Drop for FlowRecord {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Relaxed);
    }
}

pub(super) const HASH_SEED: u64 = 0x243F_6A88_85A3_08D3;
pub(super) const HASH_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
pub(super) fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// The hasher every map of the experiment uses: per 64-bit word, `state = fold(state ^ word,
/// K)`, where `fold` is the folded 64×64→128-bit multiply (low half xor high half) that
/// foldhash and wyhash mix with; a fixed seed. The C table computes the same function
/// (`lab_lfht_hash`). Fast and well mixed in every bit; not meant to resist chosen keys.
#[derive(Clone, Copy, Debug)]
pub struct FlowHasher {
    state: u64,
}

impl Hasher for FlowHasher {
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.state = fold(self.state ^ word, HASH_MUL);
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

/// Builds [`FlowHasher`]s (the `S` of every Rust map here).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowBuild;

impl BuildHasher for FlowBuild {
    type Hasher = FlowHasher;

    #[inline]
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher { state: HASH_SEED }
    }
}

/// The hash of `key` (what every Rust map computes, and the C table's `lab_lfht_hash`).
pub fn flow_hash(key: &FlowKey) -> u64 {
    FlowBuild.hash_one(key)
}

pub(super) const HASHER_DESCRIPTION: &str =
    "FlowHasher: the key's two 64-bit words each mixed in with a \
    folded 64x64->128-bit multiply (foldhash/wyhash style), fixed seed; the same function in \
    C for rculfhash";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn keys_are_distinct_and_absent_keys_never_collide() {
        let mut seen = std::collections::HashSet::new();
        for id in 0..200_000u64 {
            assert!(seen.insert(FlowKey::of(id)));
        }
        for id in 0..1000u64 {
            assert!(!seen.contains(&FlowKey::absent(id)));
        }
    }

    #[test]
    pub(super) fn hasher_spreads_keys() {
        // The top 7 and the low 17 bits (control byte and bucket of a 128k-slot table) take
        // many values over consecutive flows.
        let top: std::collections::HashSet<u64> = (0..10_000)
            .map(|i| flow_hash(&FlowKey::of(i)) >> 57)
            .collect();
        let low: std::collections::HashSet<u64> = (0..10_000)
            .map(|i| flow_hash(&FlowKey::of(i)) & 0x1_FFFF)
            .collect();
        assert_eq!(top.len(), 128);
        assert!(low.len() > 9_000, "{}", low.len());
    }

    #[cfg(feature = "c-peers")]
    #[test]
    pub(super) fn rust_and_c_hash_agree() {
        for id in [0u64, 1, 77, 123_456_789] {
            for key in [FlowKey::of(id), FlowKey::absent(id)] {
                let (w0, w1) = key.words();
                assert_eq!(flow_hash(&key), crate::c_peers::lfht_hash(w0, w1));
            }
        }
    }
}
