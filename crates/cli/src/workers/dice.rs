//! Reproducible randomness: a stable hash of the execution id, the attempt and a label.
//!
//! The same execution, attempt and label always give the same number, in every process and
//! with every build (the hash is FNV-1a followed by a SplitMix64 finalizer, not `std`'s
//! `DefaultHasher`, whose output may change between Rust releases). A worker that is repeated
//! after a crash therefore makes the same choice as the run that was lost.

use concepts::ExecutionId;

/// A stable 64-bit hash of the byte strings in `parts` (each is length-prefixed, so
/// `["ab", "c"]` and `["a", "bc"]` differ).
#[must_use]
pub fn hash64(parts: &[&[u8]]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = FNV_OFFSET;
    for part in parts {
        let len = u64::try_from(part.len()).unwrap_or(u64::MAX);
        for byte in len.to_le_bytes().iter().chain(part.iter()) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
    }
    splitmix64(hash)
}

/// The SplitMix64 finalizer: spreads every input bit over the whole output.
#[must_use]
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in `[0, 1)` for this execution, attempt and label.
#[must_use]
pub fn roll(execution_id: &ExecutionId, attempt: u32, label: &str) -> f64 {
    let hash = hash64(&[
        execution_id.as_str().as_bytes(),
        &attempt.to_le_bytes(),
        label.as_bytes(),
    ]);
    // The top 53 bits make an exactly representable fraction.
    #[expect(
        clippy::cast_precision_loss,
        reason = "53 bits fit an f64 mantissa exactly"
    )]
    let fraction = (hash >> 11) as f64 / (1u64 << 53) as f64;
    fraction
}

/// True with probability `probability` (clamped to `[0, 1]`) for this execution, attempt and
/// label.
#[must_use]
pub fn chance(execution_id: &ExecutionId, attempt: u32, label: &str, probability: f64) -> bool {
    roll(execution_id, attempt, label) < probability.clamp(0.0, 1.0)
}
