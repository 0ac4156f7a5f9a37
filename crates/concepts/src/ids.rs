//! Identifiers and their text forms: execution, executor, run and delay ids, join set ids,
//! function names and component ids. Every parser returns a typed [`IdParseError`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::{fmt, str::FromStr, sync::Arc};
use ulid::Ulid;

mod names;
pub use names::{ComponentId, FunctionFqn};

/// Why a text could not be parsed as an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdParseError {
    /// The text does not start with the expected prefix.
    #[error("`{input}`: expected the prefix `{expected}`")]
    WrongPrefix {
        /// The text that was parsed.
        input: String,
        /// The prefix every id of this type starts with.
        expected: &'static str,
    },
    /// The ULID part is not 26 characters of Crockford base32.
    #[error("`{input}`: `{ulid}` is not a ULID (26 characters of Crockford base32)")]
    BadUlid {
        /// The text that was parsed.
        input: String,
        /// The part that should have been a ULID.
        ulid: String,
    },
    /// A delimiter the format requires is missing.
    #[error("`{input}`: missing the delimiter `{delimiter}`")]
    MissingDelimiter {
        /// The text that was parsed.
        input: String,
        /// The delimiter that was not found.
        delimiter: char,
    },
    /// The index of a derived execution id is not a positive integer.
    #[error("`{input}`: `{index}` is not a child index (a positive integer)")]
    BadIndex {
        /// The text that was parsed.
        input: String,
        /// The part that should have been the index.
        index: String,
    },
    /// The join set kind is not `o`, `n` or `g`.
    #[error("`{input}`: unknown join set kind `{kind}` (expected `o`, `n` or `g`)")]
    BadJoinSetKind {
        /// The text that was parsed.
        input: String,
        /// The kind that was found.
        kind: String,
    },
    /// A name contains a character its format does not allow.
    #[error("`{input}`: illegal character {character:?} ({allowed})")]
    IllegalCharacter {
        /// The text that was parsed.
        input: String,
        /// The first illegal character.
        character: char,
        /// What the format allows.
        allowed: &'static str,
    },
    /// A part that must not be empty is empty.
    #[error("`{input}`: the {part} must not be empty")]
    Empty {
        /// The text that was parsed.
        input: String,
        /// Which part is empty.
        part: &'static str,
    },
}

/// The value of each character of upper-case Crockford base32 (`0-9`, `A-Z` but `I`, `L`,
/// `O`, `U`), [`NOT_CROCKFORD`] for every other byte.
const CROCKFORD: [u8; 256] = {
    let alphabet = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut table = [NOT_CROCKFORD; 256];
    let mut value = 0;
    while value < alphabet.len() {
        #[expect(clippy::cast_possible_truncation, reason = "32 values")]
        {
            table[alphabet[value] as usize] = value as u8;
        }
        value += 1;
    }
    table
};

/// [`CROCKFORD`]'s mark of a byte outside the alphabet: above every value, so that one `or`
/// of a text's values tells whether any was outside.
const NOT_CROCKFORD: u8 = 0x80;

fn parse_ulid(input: &str, part: &str) -> Result<Ulid, IdParseError> {
    // Only the canonical form: upper-case Crockford base32 without the decoding aliases
    // (`I`, `L`, `O`, lower case), and at most `7` first (26 characters hold 130 bits, a ULID
    // has 128). A lenient parser would give one id several text forms that sort differently.
    // One pass: each character's value from the table, shifted in.
    let bytes = part.as_bytes();
    if bytes.len() != ulid::ULID_LEN {
        return Err(IdParseError::BadUlid {
            input: input.to_string(),
            ulid: part.to_string(),
        });
    }
    let mut value = 0_u128;
    let mut seen = 0_u8;
    for &byte in bytes {
        let digit = CROCKFORD[usize::from(byte)];
        seen |= digit;
        value = (value << 5) | u128::from(digit & 0x1f);
    }
    let canonical = seen & NOT_CROCKFORD == 0 && bytes.first().is_some_and(|b| *b <= b'7');
    if !canonical {
        return Err(IdParseError::BadUlid {
            input: input.to_string(),
            ulid: part.to_string(),
        });
    }
    Ok(Ulid(value))
}

/// A ULID whose timestamp part is `at`'s millisecond (from the caller's clock). Its 80 other
/// bits are random, unless this thread drew a ULID in the same millisecond last: then they are
/// that one's plus one (ULID's monotonic mode). So the ids of one millisecond ascend in the
/// order they were made, and an ordered index (every backend's, by id or by a time and then
/// id) inserts them at its end instead of at random places.
fn ulid_at(at: DateTime<Utc>) -> Ulid {
    thread_local! {
        static LAST: std::cell::Cell<Option<Ulid>> = const { std::cell::Cell::new(None) };
    }
    // As `Ulid::from_datetime` counts it: a time before the epoch is the epoch.
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    LAST.with(|last| {
        let next = match last.get() {
            Some(previous) if previous.timestamp_ms() == millis => previous.increment().ok(),
            _ => None,
        };
        let next = next.unwrap_or_else(|| Ulid::from_datetime(std::time::SystemTime::from(at)));
        last.set(Some(next));
        next
    })
}

macro_rules! prefixed_ulid {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Ulid);

        impl $name {
            /// The prefix of the text form, including the underscore.
            pub const PREFIX: &'static str = $prefix;

            /// A new id whose timestamp part is `at` and whose other 80 bits are random, or
            /// the previous id's of this thread plus one when that was of the same millisecond
            /// (see `ulid_at`).
            #[must_use]
            pub fn generate_at(at: DateTime<Utc>) -> Self {
                Self(ulid_at(at))
            }

            /// An id from its two ULID parts; deterministic, for tests and replays.
            #[must_use]
            pub fn from_parts(timestamp_ms: u64, random: u128) -> Self {
                Self(Ulid::from_parts(timestamp_ms, random))
            }

            /// The underlying ULID.
            #[must_use]
            pub fn ulid(&self) -> Ulid {
                self.0
            }
        }

        impl $name {
            /// `with` given the text form, written on the stack.
            fn with_text<R>(&self, with: impl FnOnce(&str) -> R) -> R {
                // ASCII only (the prefix and base32): the conversion cannot fail.
                self.with_ascii(|text| with(std::str::from_utf8(text).unwrap_or_default()))
            }

            /// `with` given the text form as its ASCII bytes, written on the stack.
            pub(crate) fn with_ascii<R>(&self, with: impl FnOnce(&[u8]) -> R) -> R {
                let mut text = TextBuffer([0_u8; PREFIXED_ULID_MAX]);
                let len = write_prefixed(Self::PREFIX, self.0, &mut text.0);
                with(&text.0[..len])
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.with_text(|text| f.write_str(text))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;
            fn from_str(input: &str) -> Result<Self, Self::Err> {
                let rest = input.strip_prefix(Self::PREFIX).ok_or_else(|| {
                    IdParseError::WrongPrefix { input: input.to_string(), expected: Self::PREFIX }
                })?;
                parse_ulid(input, rest).map(Self)
            }
        }

        impl Serialize for $name {
            /// The text whole: through `collect_str`, serde_json escapes each piece the
            /// formatter writes on its own.
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.with_text(|text| s.serialize_str(text))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

/// The longest text of a prefixed ULID: the longest prefix (`Delay_`) and the ULID.
const PREFIXED_ULID_MAX: usize = 6 + ulid::ULID_LEN;

/// Writes `prefix` and `ulid` into `text`; their length.
fn write_prefixed(prefix: &str, ulid: Ulid, text: &mut [u8; PREFIXED_ULID_MAX]) -> usize {
    let prefix = &prefix.as_bytes()[..prefix.len().min(6)];
    text[..prefix.len()].copy_from_slice(prefix);
    let len = prefix.len() + ulid::ULID_LEN;
    if let Ok(encoded) = <&mut [u8; ulid::ULID_LEN]>::try_from(&mut text[prefix.len()..len]) {
        encode_ulid(ulid, encoded);
    }
    len
}

/// Every pair of Crockford base32 characters, by the 10 bits they encode.
const CROCKFORD_PAIRS: [[u8; 2]; 1024] = {
    let alphabet = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut pairs = [[0_u8; 2]; 1024];
    let mut bits = 0;
    while bits < pairs.len() {
        pairs[bits] = [alphabet[bits >> 5], alphabet[bits & 0x1f]];
        bits += 1;
    }
    pairs
};

/// Writes the text of `ulid` (as [`Ulid::array_to_str`] does) into `text`, two characters
/// per lookup: 13 where the crate shifts a `u128` 26 times. Its 26 characters are 130 bits,
/// the 48 of the time with two zero bits above them (10 characters), then the 80 random bits
/// (16), so each part is encoded from a `u64` of its own.
fn encode_ulid(ulid: Ulid, text: &mut [u8; ulid::ULID_LEN]) {
    /// The low `5 * N` bits of `bits` as the first `N` characters of `text`.
    fn encode_pairs<const N: usize>(bits: u64, text: &mut [u8]) {
        for (i, pair) in text[..N].chunks_exact_mut(2).enumerate() {
            let index = usize::try_from((bits >> (5 * (N - 2 - 2 * i))) & 0x3ff);
            pair.copy_from_slice(&CROCKFORD_PAIRS[index.unwrap_or_default()]);
        }
    }
    let random = ulid.random();
    let [random_high, random_low] = [random >> 40, random & ((1 << 40) - 1)]
        .map(|bits| u64::try_from(bits).unwrap_or_default());
    let (time, random) = text.split_at_mut(10);
    let (high, low) = random.split_at_mut(8);
    encode_pairs::<10>(ulid.timestamp_ms(), time);
    encode_pairs::<8>(random_high, high);
    encode_pairs::<8>(random_low, low);
}

/// A buffer for the text of an id, aligned for `str::from_utf8`, which checks whole words
/// from an aligned start and each byte of an unaligned one. Its length is best a multiple of
/// [`whole_blocks`]: the check takes two words at a time and what is left byte by byte, so a
/// text is checked with the zeros after it and cut to its length afterwards.
#[repr(align(8))]
struct TextBuffer<const N: usize>([u8; N]);

/// `len` rounded up to the blocks of two words `str::from_utf8` checks at a time.
const fn whole_blocks(len: usize) -> usize {
    len.next_multiple_of(2 * size_of::<usize>())
}

prefixed_ulid!(
    /// Identifies one running executor: `Exr_<ULID>`.
    ExecutorId,
    "Exr_"
);
prefixed_ulid!(
    /// Identifies one lock of an execution (a fresh one each time it is locked): `Run_<ULID>`.
    RunId,
    "Run_"
);
prefixed_ulid!(
    /// Identifies one durable sleep request: `Delay_<ULID>`.
    DelayId,
    "Delay_"
);
prefixed_ulid!(
    /// The ULID part of a top-level execution id: `E_<ULID>`.
    ExecutionIdTopLevel,
    "E_"
);

/// The kind of a join set, the letter before the colon of its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JoinSetKind {
    /// `o`: opened implicitly for a single request.
    OneOff,
    /// `n`: named by the workflow author.
    Named,
    /// `g`: named by the runtime.
    Generated,
}

impl JoinSetKind {
    /// The one-letter text form.
    #[must_use]
    pub fn as_char(self) -> char {
        match self {
            Self::OneOff => 'o',
            Self::Named => 'n',
            Self::Generated => 'g',
        }
    }
}

const JOIN_SET_NAME_ALLOWED: &str =
    "a join set name may contain ASCII letters, digits, `_`, `-` and `/`";

/// Identifies a join set within its execution: `<kind>:<name>`, e.g. `n:batch`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JoinSetId {
    kind: JoinSetKind,
    name: Arc<str>,
}

impl JoinSetId {
    /// A join set id; the name may be empty and may contain ASCII letters, digits, `_ - /`.
    pub fn new(kind: JoinSetKind, name: impl Into<Arc<str>>) -> Result<Self, IdParseError> {
        let name: Arc<str> = name.into();
        if let Some(character) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/')))
        {
            return Err(IdParseError::IllegalCharacter {
                input: format!("{}:{name}", kind.as_char()),
                character,
                allowed: JOIN_SET_NAME_ALLOWED,
            });
        }
        Ok(Self { kind, name })
    }

    /// The kind.
    #[must_use]
    pub fn kind(&self) -> JoinSetKind {
        self.kind
    }

    /// The name (may be empty).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for JoinSetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_char(), self.name)
    }
}

impl fmt::Debug for JoinSetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for JoinSetId {
    type Err = IdParseError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let (kind, name) = input
            .split_once(':')
            .ok_or_else(|| IdParseError::MissingDelimiter {
                input: input.to_string(),
                delimiter: ':',
            })?;
        let kind = match kind {
            "o" => JoinSetKind::OneOff,
            "n" => JoinSetKind::Named,
            "g" => JoinSetKind::Generated,
            other => {
                return Err(IdParseError::BadJoinSetKind {
                    input: input.to_string(),
                    kind: other.to_string(),
                });
            }
        };
        Self::new(kind, name).map_err(|err| match err {
            IdParseError::IllegalCharacter {
                character, allowed, ..
            } => IdParseError::IllegalCharacter {
                input: input.to_string(),
                character,
                allowed,
            },
            other => other,
        })
    }
}

/// Identifies an execution: `E_<ULID>` at the top level, `<parent>.<join set id>_<idx>` for a child.
///
/// The text form is stored (validated) so that cloning, hashing and ordering are cheap.
/// Ids order by their text form, byte by byte, which is what a SQL `ORDER BY` on the text
/// column gives; that keeps tie-breaking identical on every backend.
#[derive(Clone)]
pub struct ExecutionId(Arc<str>);

impl std::hash::Hash for ExecutionId {
    /// A hash of the text, as equal texts (whether or not they share their allocation) are
    /// equal: its first and last 16 bytes as two integers, two multiplications of the
    /// store's hasher instead of a pass over every byte. The head holds a top-level id's time
    /// and the start of its random part, the tail the rest of it (or, for a child, its join
    /// set and index); a shorter text is hashed whole.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let bytes = self.0.as_bytes();
        match (bytes.first_chunk::<16>(), bytes.last_chunk::<16>()) {
            (Some(head), Some(tail)) => {
                state.write_u128(u128::from_ne_bytes(*head));
                state.write_u128(u128::from_ne_bytes(*tail));
            }
            _ => self.0.hash(state),
        }
    }
}

impl PartialEq for ExecutionId {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        // Clones share their text: most comparisons in a write are of an id with its clone.
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for ExecutionId {}

impl Ord for ExecutionId {
    /// Byte order of the text form. The first 16 bytes are compared as one big-endian
    /// integer first (the same order as comparing them byte by byte), then, for two texts of
    /// one length up to 32 bytes (two top-level ids), the last 16 the same way (the bytes both
    /// hold are equal by then): no call to `memcmp` for the comparisons of the ordered
    /// indexes. Ids of one millisecond differ after the `E_`, the 10 characters of the time
    /// and mostly the first few random ones (a thread's ids of one millisecond count up).
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        if let (Some(head_a), Some(head_b)) = (a.first_chunk::<16>(), b.first_chunk::<16>()) {
            let (head_a, head_b) = (u128::from_be_bytes(*head_a), u128::from_be_bytes(*head_b));
            if head_a != head_b {
                return head_a.cmp(&head_b);
            }
            if a.len() == b.len()
                && a.len() <= 32
                && let (Some(tail_a), Some(tail_b)) = (a.last_chunk::<16>(), b.last_chunk::<16>())
            {
                return u128::from_be_bytes(*tail_a).cmp(&u128::from_be_bytes(*tail_b));
            }
        }
        a.cmp(b)
    }
}

impl PartialOrd for ExecutionId {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl ExecutionId {
    /// A new top-level id with its timestamp part at `at`.
    #[must_use]
    pub fn generate_at(at: DateTime<Utc>) -> Self {
        Self::from(ExecutionIdTopLevel::generate_at(at))
    }

    /// The id of the `idx`-th child (starting at 1) of this execution in `join_set_id`.
    #[must_use]
    pub fn next_level(&self, join_set_id: &JoinSetId, idx: u64) -> Self {
        Self(format!("{}.{join_set_id}_{idx}", self.0).into())
    }

    /// True for a top-level id: `E_` and a ULID, validated at construction, where a child's
    /// text is longer (its parent's, a dot, a join set and an index).
    #[must_use]
    pub fn is_top_level(&self) -> bool {
        self.0.len() == ExecutionIdTopLevel::PREFIX.len() + ulid::ULID_LEN
    }

    /// The top-level part of the id.
    #[must_use]
    pub fn top_level(&self) -> ExecutionIdTopLevel {
        let head = self.0.split('.').next().unwrap_or(&self.0);
        head.parse().expect("validated at construction")
    }

    /// For a child id, the parent's id and the join set the child was submitted in.
    #[must_use]
    pub fn split_to_parent(&self) -> Option<(ExecutionId, JoinSetId)> {
        if self.is_top_level() {
            // No dot to search for: every create asks this of its id.
            return None;
        }
        let (parent, last) = self.0.rsplit_once('.')?;
        let (join_set, _idx) = last.rsplit_once('_')?;
        Some((Self(parent.into()), join_set.parse().ok()?))
    }

    /// The text form.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<ExecutionIdTopLevel> for ExecutionId {
    fn from(top: ExecutionIdTopLevel) -> Self {
        // Encoded in place, without the formatting machinery: one id per submit.
        const PREFIX: &[u8] = ExecutionIdTopLevel::PREFIX.as_bytes();
        const LEN: usize = PREFIX.len() + ulid::ULID_LEN;
        let mut text = TextBuffer([0u8; whole_blocks(LEN)]);
        let (prefix, rest) = text.0.split_at_mut(PREFIX.len());
        prefix.copy_from_slice(PREFIX);
        let ulid: &mut [u8; ulid::ULID_LEN] = (rest.first_chunk_mut()).expect("the ULID's room");
        encode_ulid(top.0, ulid);
        let whole = std::str::from_utf8(&text.0).expect("ASCII");
        Self(whole.get(..LEN).expect("ASCII").into())
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ExecutionId {
    type Err = IdParseError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let mut parts = input.split('.');
        let top = parts.next().unwrap_or_default();
        top.parse::<ExecutionIdTopLevel>()?;
        for step in parts {
            let (join_set, index) =
                step.rsplit_once('_')
                    .ok_or_else(|| IdParseError::MissingDelimiter {
                        input: input.to_string(),
                        delimiter: '_',
                    })?;
            join_set.parse::<JoinSetId>().map_err(|err| match err {
                IdParseError::IllegalCharacter {
                    character, allowed, ..
                } => IdParseError::IllegalCharacter {
                    input: input.to_string(),
                    character,
                    allowed,
                },
                IdParseError::BadJoinSetKind { kind, .. } => IdParseError::BadJoinSetKind {
                    input: input.to_string(),
                    kind,
                },
                IdParseError::MissingDelimiter { delimiter, .. } => {
                    IdParseError::MissingDelimiter {
                        input: input.to_string(),
                        delimiter,
                    }
                }
                other => other,
            })?;
            let valid_index = !index.is_empty()
                && index.bytes().all(|b| b.is_ascii_digit())
                && !index.starts_with('0')
                && index.parse::<u64>().is_ok();
            if !valid_index {
                return Err(IdParseError::BadIndex {
                    input: input.to_string(),
                    index: index.to_string(),
                });
            }
        }
        Ok(Self(input.into()))
    }
}

/// Serializes the text `first`, `separator`, `second` as one string, joined on the stack
/// when it is short (every name in practice): one `serialize_str` where formatting writes
/// three pieces, each scanned for escapes.
fn serialize_joined<S: Serializer>(
    s: S,
    first: &str,
    separator: char,
    second: &str,
) -> Result<S::Ok, S::Error> {
    let mut buffer = [0_u8; 128];
    let mut separator_text = [0_u8; 4];
    let pieces = [
        first.as_bytes(),
        separator.encode_utf8(&mut separator_text).as_bytes(),
        second.as_bytes(),
    ];
    let len = pieces.iter().map(|piece| piece.len()).sum::<usize>();
    if len > buffer.len() {
        return s.collect_str(&format_args!("{first}{separator}{second}"));
    }
    let mut at = 0;
    for piece in pieces {
        buffer[at..at + piece.len()].copy_from_slice(piece);
        at += piece.len();
    }
    match std::str::from_utf8(&buffer[..len]) {
        Ok(text) => s.serialize_str(text),
        // Three texts joined are one text; kept for the type's sake.
        Err(_) => s.collect_str(&format_args!("{first}{separator}{second}")),
    }
}

impl Serialize for JoinSetId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut kind = [0_u8; 4];
        serialize_joined(
            s,
            self.kind.as_char().encode_utf8(&mut kind),
            ':',
            &self.name,
        )
    }
}

impl Serialize for FunctionFqn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for ComponentId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_joined(s, self.component_type(), ':', self.name())
    }
}

macro_rules! serde_via_text {
    ($($name:ident),*) => {$(

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}
serde_via_text!(JoinSetId, FunctionFqn, ComponentId);

impl Serialize for ExecutionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ExecutionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
