//! The rule table, the packets the readers classify, and the updates the writer makes.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(super) const ACCEPT: u8 = 1;
pub(super) const DROP: u8 = 0;

/// One rule: source and destination with masks, protocol (0 = any), port range, verdict.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rule {
    src: u32,
    src_mask: u32,
    dst: u32,
    dst_mask: u32,
    proto: u8,
    verdict: u8,
    dport_lo: u16,
    dport_hi: u16,
}

impl Rule {
    #[inline]
    pub(super) fn matches(&self, p: &Packet) -> bool {
        (p.src & self.src_mask) == self.src
            && (p.dst & self.dst_mask) == self.dst
            && (self.proto == 0 || self.proto == p.proto)
            && p.dport >= self.dport_lo
            && p.dport <= self.dport_hi
    }

    /// The `i`-th rule of the initial table: one host in 10.0.0.0/8, TCP, any port.
    pub(super) fn initial(i: usize) -> Rule {
        Rule {
            src: 0x0A00_0000 | (i as u32 & 0x00FF_FFFF),
            src_mask: u32::MAX,
            dst: 0,
            dst_mask: 0,
            proto: 6,
            verdict: if i % 2 == 0 { ACCEPT } else { DROP },
            dport_lo: 1,
            dport_hi: u16::MAX,
        }
    }

    /// The seed's `iptables -A INPUT -s 192.168.105.$i -j DROP` (i counts from 1).
    pub(super) fn added(i: usize) -> Rule {
        Rule {
            src: 0xC0A8_6900u32.wrapping_add(i as u32),
            src_mask: u32::MAX,
            dst: 0,
            dst_mask: 0,
            proto: 0,
            verdict: DROP,
            dport_lo: 0,
            dport_hi: u16::MAX,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Packet {
    src: u32,
    dst: u32,
    dport: u16,
    proto: u8,
}

/// Classify: the verdict of the first matching rule, else the policy (ACCEPT).
#[inline]
pub(super) fn classify(rules: &[Rule], p: &Packet) -> u8 {
    rules
        .iter()
        .find(|r| r.matches(p))
        .map(|r| r.verdict)
        .unwrap_or(ACCEPT)
}

/// Packets for reader `thread`: sources in the last tenth of the table, one in eight matching
/// nothing. Returns (packet, expected verdict) pairs; 1024 of them (a power of two).
pub(super) fn packets(rules: usize, thread: usize) -> Vec<(Packet, u8)> {
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ (thread as u64).wrapping_mul(0x9E37_79B9);
    let tail = (rules / 10).max(1);
    (0..1024)
        .map(|k| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let src = if k % 8 == 7 {
                0x0B00_0000 | (x as u32 & 0xFFFF) // 11.0.x.x: no rule matches
            } else {
                let i = rules - 1 - (x as usize % tail);
                0x0A00_0000 | (i as u32 & 0x00FF_FFFF)
            };
            let p = Packet {
                src,
                dst: 0xC0A8_0001,
                dport: 1 + (x >> 20) as u16 % 60000,
                proto: 6,
            };
            // Initial rule i matches exactly source 10.0.0.0 + i; the added rules match
            // 192.168.105.0 + i, which no packet uses.
            let expected = {
                if src >> 24 == 0x0A {
                    let i = (src & 0x00FF_FFFF) as usize;
                    if i % 2 == 0 {
                        ACCEPT
                    } else {
                        DROP
                    }
                } else {
                    ACCEPT
                }
            };
            (p, expected)
        })
        .collect()
}

/// A table update.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// Append a rule (`iptables -A`).
    Append(Rule),
    /// Remove the last rule (`iptables -D`).
    RemoveLast,
}

impl Op {
    /// The copy of `rules` with this update applied.
    pub(super) fn apply(self, rules: &[Rule]) -> Vec<Rule> {
        match self {
            Op::Append(rule) => {
                let mut v = Vec::with_capacity(rules.len() + 1);
                v.extend_from_slice(rules);
                v.push(rule);
                v
            }
            Op::RemoveLast => rules[..rules.len().saturating_sub(1)].to_vec(),
        }
    }
}

/// A table version that counts its own destruction (every replaced table must be freed).
pub(super) struct RuleSet {
    pub(super) rules: Vec<Rule>,
    pub(super) freed: Arc<AtomicU64>,
}

impl Drop for RuleSet {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}
