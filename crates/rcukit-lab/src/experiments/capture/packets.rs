//! Packets, BPF descriptors and their filters, and the descriptor list the schemes publish.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
pub(super) struct Packet {
    pub(super) src: u32,
    pub(super) dst: u32,
    pub(super) ports: u32,
}

/// One comparison of a filter program: `packet.field & mask == value`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Insn {
    pub(super) field: u8,
    pub(super) mask: u32,
    pub(super) value: u32,
}

/// A BPF descriptor: a filter program and its packet counters (per descriptor, like
/// `bd_rcount` / `bd_fcount`, kept by each packet thread and summed at the end).
#[derive(Debug)]
pub(super) struct Descriptor {
    pub(super) program: Vec<Insn>,
}

impl Descriptor {
    /// `host 198.18.0.x` in `len` comparisons: matches when any comparison holds (so packets
    /// that do not match run the whole program).
    pub(super) fn new(len: usize, salt: u32) -> Descriptor {
        let program = (0..len)
            .map(|i| Insn {
                field: (i % 3) as u8,
                mask: u32::MAX,
                value: 0xC612_0000 | (salt.wrapping_mul(31).wrapping_add(i as u32) & 0xFFFF),
            })
            .collect();
        Descriptor { program }
    }

    #[inline]
    pub(super) fn matches(&self, p: &Packet) -> bool {
        self.program.iter().any(|insn| {
            let v = match insn.field {
                0 => p.src,
                1 => p.dst,
                _ => p.ports,
            };
            v & insn.mask == insn.value
        })
    }
}

/// Run every descriptor's filter over `p`; the number that matched.
#[inline]
pub(super) fn run_filters(list: &[Arc<Descriptor>], p: &Packet) -> u64 {
    list.iter().filter(|d| d.matches(p)).count() as u64
}

/// A descriptor-list version that counts its destruction.
pub(super) struct DescList {
    pub(super) list: Vec<Arc<Descriptor>>,
    pub(super) freed: Arc<AtomicU64>,
}

impl Drop for DescList {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Relaxed);
    }
}
