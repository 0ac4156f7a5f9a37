//! Typed function handles: a function's FQN plus the types of its parameters and result.

use concepts::{FunctionFqn, IdParseError, Json};
use serde::Serialize;
use std::{fmt, marker::PhantomData};

/// A handle to a function: its fully qualified name (`<interface>.<function>`) plus the type of
/// its parameters `P` and of its successful result `R`, both serde types.
///
/// Handles are constants, shared by the code that registers the function on a worker, the
/// workflows that call it and the clients that submit it:
///
/// ```
/// use workflow::Function;
/// const CHARGE: Function<u64, String> = Function::new("shop:payments/api.charge");
/// assert_eq!(CHARGE.name(), "shop:payments/api.charge");
/// ```
///
/// The parameters are stored as the JSON `P` serializes to, the result as the JSON `R`
/// serializes to.
pub struct Function<P, R> {
    ffqn: &'static str,
    types: PhantomData<fn(P) -> R>,
}

impl<P, R> Function<P, R> {
    /// A handle to the function named `ffqn`.
    ///
    /// # Panics
    /// When `ffqn` is not a legal function name (no dot, an empty part, whitespace or a control
    /// character). Declared as a `const` item, a bad name is a compile error, not a panic.
    #[must_use]
    pub const fn new(ffqn: &'static str) -> Self {
        if let Err(problem) = check_ffqn(ffqn) {
            panic!("{}", problem);
        }
        Self {
            ffqn,
            types: PhantomData,
        }
    }

    /// The function's name as written.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        self.ffqn
    }

    /// The function's name, parsed.
    ///
    /// # Errors
    /// When the name is not legal (only non-ASCII whitespace can get past [`Function::new`]).
    pub fn ffqn(&self) -> Result<FunctionFqn, IdParseError> {
        self.ffqn.parse()
    }
}

impl<P: Serialize, R> Function<P, R> {
    /// The parameters as stored in the execution's `Created` event.
    pub(crate) fn encode_params(&self, params: &P) -> Result<Json, serde_json::Error> {
        serde_json::to_value(params).map(Json)
    }
}

impl<P, R> Clone for Function<P, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P, R> Copy for Function<P, R> {}

impl<P, R> fmt::Debug for Function<P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Function").field(&self.ffqn).finish()
    }
}

impl<P, R> fmt::Display for Function<P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ffqn)
    }
}

/// The rules of `concepts::FunctionFqn` that a `const fn` can check (ASCII only).
const fn check_ffqn(ffqn: &str) -> Result<(), &'static str> {
    let bytes = ffqn.as_bytes();
    let mut last_dot = None;
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if byte.is_ascii_whitespace() || byte.is_ascii_control() {
            return Err("a function name has no whitespace or control characters");
        }
        if byte == b'.' {
            last_dot = Some(index);
        }
        index += 1;
    }
    match last_dot {
        None => Err("a function name is `<interface>.<function>`: it needs a dot"),
        Some(0) => Err("a function name needs an interface before its last dot"),
        Some(dot) if dot + 1 == bytes.len() => {
            Err("a function name needs a function after its last dot")
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_names_parse_like_concepts_does() {
        const F: Function<(), ()> = Function::new("ns:pkg/ifc@1.0.0.fn");
        let ffqn = F.ffqn().unwrap();
        assert_eq!(ffqn.ifc_name(), "ns:pkg/ifc@1.0.0");
        assert_eq!(ffqn.function_name(), "fn");
    }

    #[test]
    fn illegal_names_are_refused_with_a_reason() {
        assert!(check_ffqn("nodot").unwrap_err().contains("needs a dot"));
        assert!(check_ffqn(".fn").unwrap_err().contains("interface"));
        assert!(check_ffqn("ifc.").unwrap_err().contains("function after"));
        assert!(check_ffqn("if c.fn").unwrap_err().contains("whitespace"));
        assert!(check_ffqn("ifc.fn").is_ok());
    }

    #[test]
    #[should_panic(expected = "needs a dot")]
    fn a_runtime_handle_with_an_illegal_name_panics_with_the_reason() {
        let name = String::from("nodot").leak();
        let _ = Function::<(), ()>::new(name);
    }
}
