//! The rule of every persistent backend's opening: which schema versions a build opens,
//! creates or migrates, and why it refuses the others. The backends read the version their
//! store holds and apply the migrations; whether they may is decided here, once.

/// What an opening was asked to do with the schema it finds; by default both (a tool that
/// must not change what it opens asks for less: [`SchemaOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaPolicy {
    /// Create the schema in a store that has none; when false such a store is refused
    /// ([`SchemaRefusal::NoSchema`]) and nothing is created.
    pub create: bool,
    /// Migrate an older schema to the build's; when false such a store is refused
    /// ([`SchemaRefusal::TooOld`]) and left at its version.
    pub migrate: bool,
}

impl Default for SchemaPolicy {
    fn default() -> Self {
        Self {
            create: true,
            migrate: true,
        }
    }
}

/// A store's configuration that holds a [`SchemaPolicy`] (the SQL backends' configurations):
/// how a tool that must not change what it opens asks for less than creating and migrating.
pub trait SchemaOptions: Sized {
    /// The configuration's policy.
    fn schema_mut(&mut self) -> &mut SchemaPolicy;

    /// The same configuration, opening only a store that already holds Stele's schema:
    /// nothing is created (`create = false`; a store without it is [`SchemaRefusal::NoSchema`]).
    #[must_use]
    fn existing_only(mut self) -> Self {
        self.schema_mut().create = false;
        self
    }

    /// The same configuration, never migrating an older schema (`migrate = false`; such a
    /// store is [`SchemaRefusal::TooOld`] and left at its version).
    #[must_use]
    fn without_migrations(mut self) -> Self {
        self.schema_mut().migrate = false;
        self
    }
}

/// Why a store was not opened at the schema version it holds; nothing was changed. Its
/// message follows the store's name (`walkthrough.db is not a Stele database: ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchemaRefusal {
    /// A newer build wrote it.
    #[error(
        "has schema version {found}, but this build knows versions up to {supported}; open it with a newer build"
    )]
    TooNew {
        /// The store's version.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// It holds no schema (an empty file or database) and creating one was not asked for.
    #[error(
        "is not a Stele database: it holds none of Stele's tables, and creating them was not asked for"
    )]
    NoSchema,
    /// It has an older schema and migrating was not asked for: it is left at its version.
    #[error(
        "has schema version {found}, older than this build's {current}; it is migrated only when opened with migrations"
    )]
    TooOld {
        /// The store's version.
        found: u32,
        /// The version the opening migrates to.
        current: u32,
    },
}

impl SchemaPolicy {
    /// Whether a store at version `found` (0: no schema) may be opened and brought to
    /// `target` by a build that knows versions up to `supported`.
    ///
    /// # Errors
    /// The [`SchemaRefusal`] of a newer store, of one without a schema when `create` is
    /// false, and of an older one when `migrate` is false.
    pub fn check(self, found: u32, target: u32, supported: u32) -> Result<(), SchemaRefusal> {
        if found > supported {
            Err(SchemaRefusal::TooNew { found, supported })
        } else if found == 0 && !self.create {
            Err(SchemaRefusal::NoSchema)
        } else if found > 0 && found < target && !self.migrate {
            Err(SchemaRefusal::TooOld {
                found,
                current: target,
            })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SchemaPolicy, SchemaRefusal};

    #[test]
    fn each_version_is_opened_or_refused_as_asked() {
        let all = SchemaPolicy {
            create: true,
            migrate: true,
        };
        let none = SchemaPolicy {
            create: false,
            migrate: false,
        };
        for found in 0..=5 {
            assert_eq!(all.check(found, 5, 5), Ok(()), "{found}");
        }
        assert_eq!(
            all.check(6, 5, 5),
            Err(SchemaRefusal::TooNew {
                found: 6,
                supported: 5
            })
        );
        assert_eq!(none.check(0, 5, 5), Err(SchemaRefusal::NoSchema));
        assert_eq!(
            none.check(3, 5, 5),
            Err(SchemaRefusal::TooOld {
                found: 3,
                current: 5
            })
        );
        assert_eq!(none.check(5, 5, 5), Ok(()));
        // Brought to an older target (a test's migration), a store at it is up to date.
        assert_eq!(none.check(3, 3, 5), Ok(()));
    }
}
