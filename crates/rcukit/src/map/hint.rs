//! Index hints: the hash bits a bucket keeps for the entries of its first line, so that
//! moving them into a larger table reads no node.
//!
//! # Why
//!
//! A node's bucket in a table of `2^k` buckets is its hash's low `k` bits. Into a smaller
//! table the bucket follows from the old index alone (its low bits), but into a table twice as
//! large it needs bit `k` of the hash too, which the old index does not tell: the mover reads
//! the node's hash, a cache miss per entry moved. While a map fills from empty every entry is
//! moved again at each doubling, and those misses are a large part of a fill's time
//! (`docs/benchmarks.md`, "Growing with index hints in the state word").
//!
//! # How
//!
//! Each lane of a bucket's first line has a 4-bit *hint* in the bucket's state word (see
//! `line.rs`): up to three hash bits just above the table's index bits (bits `k`, `k + 1`,
//! `k + 2` for a table of `2^k` buckets), under a marker bit that says how many are known; a
//! hint of zero knows none. A node placed in a lane by an insert gets three bits. Moving into
//! a table `d` doublings larger takes the node's new index bits from the low `d` known bits and
//! keeps the rest as the new hint; with fewer than `d` known, the mover reads the node and
//! gives it three again. Moving into a smaller table, the index bits that the smaller table
//! drops are hash bits just above its index: they become the new hint's low bits. So a map
//! filled from empty reads each node about once every four doublings instead of at every one.
//! Lanes of overflow lines have no hint: their nodes are read, as before.
//!
//! # Why it is correct
//!
//! A hint is a function of its node's hash and its table's size, and it is only ever written
//! under the bucket's lock, in the store of the state word that ends the change which put the
//! node in its lane (claim 4 of the [map's essay](super)). A lane changes node only by such a
//! placement, or by a replacement, which keeps the key and so the hash. A lane emptied keeps its
//! old hint, which nobody reads: a lane is read only while it holds a node, and the next
//! placement writes its own. Movers read hints under the old bucket's lock, where the state
//! word is stable. Readers never look at hints (they test the state word's flag bits only), and
//! writers compare whole state words, in which a hint changes only together with the version.

/// Bits of one lane's hint.
pub(crate) const BITS: u32 = 4;

/// Hash bits a hint knows at most (below its marker bit).
const MOST: u32 = BITS - 1;

/// The hint of a node with `hash` in a table of `2^bits` buckets: the three hash bits above
/// the index bits.
#[inline(always)]
pub(crate) fn of_hash(hash: u64, bits: u32) -> u64 {
    1 << MOST | (hash >> bits) & ((1 << MOST) - 1)
}

/// How many hash bits `hint` knows, and those bits.
#[inline(always)]
fn known(hint: u64) -> (u32, u64) {
    if hint == 0 {
        (0, 0)
    } else {
        let n = 63 - hint.leading_zeros();
        (n, hint & ((1 << n) - 1))
    }
}

/// Into a table `d` doublings larger: the `d` index bits the node gains (to be put above the
/// old index's bits) and its hint there, if `hint` knows them.
#[inline(always)]
pub(crate) fn grown(hint: u64, d: u32) -> Option<(u64, u64)> {
    let (n, bits) = known(hint);
    (n >= d).then(|| (bits & ((1 << d) - 1), 1 << (n - d) | bits >> d))
}

/// Into a table `d` doublings smaller, from a bucket whose index bits that the smaller table
/// drops are `dropped`: the node's hint there.
#[inline(always)]
pub(crate) fn shrunk(hint: u64, dropped: u64, d: u32) -> u64 {
    let (n, bits) = known(hint);
    let keep = (n + d).min(MOST);
    let bits = (dropped | bits.checked_shl(d).unwrap_or(0)) & ((1 << keep) - 1);
    1 << keep | bits
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    /// The bucket a hint leads to in a larger table, or `None` if the node must be read.
    fn grown_index(index: u64, old_bits: u32, d: u32, hint: u64) -> Option<(u64, u64)> {
        grown(hint, d).map(|(gained, hint)| (index | gained << old_bits, hint))
    }

    /// Every chain of resizes between sizes 2^0 and 2^14, by one to five doublings at a time,
    /// for many hashes: wherever a hint leads a node, it is the node's bucket, and a hint that
    /// knows bits knows the right ones.
    #[test]
    fn hints_lead_to_the_bucket_of_the_hash_through_any_resizes() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2_000 {
            let hash = next();
            let mut bits = (next() % 12) as u32;
            let mut hint = if next() % 4 == 0 {
                0
            } else {
                of_hash(hash, bits)
            };
            let mut index = hash & ((1 << bits) - 1);
            for _ in 0..40 {
                let (n, known_bits) = known(hint);
                assert_eq!(
                    known_bits,
                    (hash >> bits) & ((1 << n) - 1),
                    "hash {hash:#x}"
                );
                let d = 1 + (next() % 5) as u32;
                if next() % 2 == 0 && bits + d <= 14 {
                    (index, hint) = grown_index(index, bits, d, hint).unwrap_or_else(|| {
                        assert!(n < d, "a hint that knew {n} bits for {d} doublings");
                        (hash & ((1 << (bits + d)) - 1), of_hash(hash, bits + d))
                    });
                    bits += d;
                } else if bits >= d {
                    let dropped = index >> (bits - d);
                    bits -= d;
                    index &= (1 << bits) - 1;
                    hint = shrunk(hint, dropped, d);
                }
                assert_eq!(index, hash & ((1 << bits) - 1), "hash {hash:#x}");
            }
        }
    }

    #[test]
    fn a_hint_from_the_hash_knows_three_bits_and_fits_its_field() {
        for bits in 0..40 {
            let hint = of_hash(u64::MAX, bits);
            assert_eq!(known(hint), (3, 7));
            assert!(hint < 1 << BITS);
        }
        assert_eq!(grown(0, 1), None);
        assert_eq!(grown(of_hash(0b10_1000, 3), 3), Some((0b101, 1)));
        assert_eq!(grown(1, 0), Some((0, 1)));
        assert!(shrunk(of_hash(u64::MAX, 3), 0b11_1111, 6) < 1 << BITS);
    }
}
