//! The names of functions and of the components that run them, and the per-thread cache of
//! the names parsed from stored text.

use super::IdParseError;
use std::{fmt, str::FromStr, sync::Arc};

/// A function's fully qualified name: `<interface>.<function>`, split at the last dot.
///
/// Held as its whole text and where the function part starts: one shared text to clone,
/// drop and compare (rows, events, keys and wake-ups of every execution carry a name), and
/// written out without formatting.
#[derive(Clone)]
pub struct FunctionFqn {
    text: Arc<str>,
    /// The index of the function part, after the last dot.
    function_at: usize,
}

impl PartialEq for FunctionFqn {
    /// Equal texts; clones of one name (the requests of a batch, the functions an executor
    /// was given) are told equal without comparing their texts.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.text, &other.text) || self.text == other.text
    }
}

impl Eq for FunctionFqn {}

impl std::hash::Hash for FunctionFqn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl Ord for FunctionFqn {
    /// By interface, then by function (not by the whole text: a dot sorts after some
    /// characters an interface may hold).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.ifc_name(), self.function_name()).cmp(&(other.ifc_name(), other.function_name()))
    }
}

impl PartialOrd for FunctionFqn {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl FunctionFqn {
    /// A name from its parts; the function name must not contain a dot, neither part may be
    /// empty or contain whitespace or control characters.
    pub fn new(
        ifc_name: impl AsRef<str>,
        function_name: impl AsRef<str>,
    ) -> Result<Self, IdParseError> {
        let (ifc_name, function_name) = (ifc_name.as_ref(), function_name.as_ref());
        // The whole name, for an error only: a valid name (every stored row read back) is
        // checked without building it.
        let input = || format!("{ifc_name}.{function_name}");
        for (part, value) in [
            ("interface name", ifc_name),
            ("function name", function_name),
        ] {
            if value.is_empty() {
                return Err(IdParseError::Empty {
                    input: input(),
                    part,
                });
            }
            // Printable ASCII, the usual name, holds neither: no character is decoded for it.
            if let Some(character) = (!value.bytes().all(|b| b.is_ascii_graphic()))
                .then(|| value.chars().find(|c| c.is_whitespace() || c.is_control()))
                .flatten()
            {
                return Err(IdParseError::IllegalCharacter {
                    input: input(),
                    character,
                    allowed: "a function name has no whitespace or control characters",
                });
            }
        }
        if function_name.contains('.') {
            return Err(IdParseError::IllegalCharacter {
                input: input(),
                character: '.',
                allowed: "the function part (after the last dot) has no dot",
            });
        }
        Ok(Self {
            text: input().into(),
            function_at: ifc_name.len() + 1,
        })
    }

    /// The interface part, before the last dot.
    #[must_use]
    pub fn ifc_name(&self) -> &str {
        &self.text[..self.function_at - 1]
    }

    /// The function part, after the last dot.
    #[must_use]
    pub fn function_name(&self) -> &str {
        &self.text[self.function_at..]
    }

    /// The whole name, `<interface>.<function>`: what [`Display`](fmt::Display) writes.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for FunctionFqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for FunctionFqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for FunctionFqn {
    type Err = IdParseError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        thread_local! {
            static PARSED: Parsed<FunctionFqn> = Parsed::default();
        }
        // The function part has no dot: the name splits at its last.
        let split: fn(&str) -> Option<(&str, &str)> = |text| text.rsplit_once('.');
        PARSED.with(|parsed| parsed.get_or_split(input, '.', split, |a, b| Self::new(a, b)))
    }
}

/// The names (functions, components) one thread parsed, by their text: a store reads the
/// same few names back in every row and event, and a clone of a parsed one is a reference
/// count or two where parsing checks every character and allocates. Bounded, since the
/// texts come from outside: past [`Parsed::MOST`] names, the others are parsed every time.
struct Parsed<T> {
    names: std::cell::RefCell<std::collections::HashMap<Box<str>, T, foldhash::fast::RandomState>>,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Self {
            names: std::cell::RefCell::default(),
        }
    }
}

impl<T: Clone> Parsed<T> {
    /// The most names kept per thread and type.
    const MOST: usize = 1_024;

    /// The name of `input`, parsed before or now: `split` at `delimiter` (a missing one is
    /// the error) and made by `new` from the two parts.
    fn get_or_split(
        &self,
        input: &str,
        delimiter: char,
        split: fn(&str) -> Option<(&str, &str)>,
        new: impl FnOnce(&str, &str) -> Result<T, IdParseError>,
    ) -> Result<T, IdParseError> {
        if let Some(parsed) = self.names.borrow().get(input) {
            return Ok(parsed.clone());
        }
        let (first, second) = split(input).ok_or_else(|| IdParseError::MissingDelimiter {
            input: input.to_string(),
            delimiter,
        })?;
        let parsed = new(first, second)?;
        let mut names = self.names.borrow_mut();
        if names.len() < Self::MOST {
            names.insert(input.into(), parsed.clone());
        }
        Ok(parsed)
    }
}

/// Which deployed unit runs a function: `<type>:<name>`, e.g. `activity:payments`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentId {
    component_type: Arc<str>,
    name: Arc<str>,
}

impl ComponentId {
    /// A component id; the type is ASCII letters, digits, `_` and `-`; the name has no
    /// whitespace or control characters; neither is empty.
    pub fn new(
        component_type: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
    ) -> Result<Self, IdParseError> {
        let component_type = component_type.into();
        let name = name.into();
        // The whole id, for an error only.
        let input = || format!("{component_type}:{name}");
        if component_type.is_empty() {
            return Err(IdParseError::Empty {
                input: input(),
                part: "component type",
            });
        }
        if name.is_empty() {
            return Err(IdParseError::Empty {
                input: input(),
                part: "component name",
            });
        }
        if let Some(character) = component_type
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
        {
            return Err(IdParseError::IllegalCharacter {
                input: input(),
                character,
                allowed: "a component type may contain ASCII letters, digits, `_` and `-`",
            });
        }
        if let Some(character) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(IdParseError::IllegalCharacter {
                input: input(),
                character,
                allowed: "a component name has no whitespace or control characters",
            });
        }
        Ok(Self {
            component_type,
            name,
        })
    }

    /// The type, before the colon.
    #[must_use]
    pub fn component_type(&self) -> &str {
        &self.component_type
    }

    /// The name, after the colon.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.component_type, self.name)
    }
}

impl fmt::Debug for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for ComponentId {
    type Err = IdParseError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        thread_local! {
            static PARSED: Parsed<ComponentId> = Parsed::default();
        }
        let split: fn(&str) -> Option<(&str, &str)> = |text| text.split_once(':');
        PARSED.with(|parsed| parsed.get_or_split(input, ':', split, |a, b| Self::new(a, b)))
    }
}
