//! [`Catalog`]: the functions a node runs, and how an execution of each is created when it is
//! submitted from outside (its component, its retries, a check of its parameters).

use concepts::{ComponentId, FunctionFqn};
use executor::LocalExecutors;
use serde::de::DeserializeOwned;
use std::{collections::BTreeMap, fmt, sync::Arc, time::Duration};

/// How a submitted execution of a function is created: the settings its `Created` event
/// records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionDefaults {
    /// The component that runs the function.
    pub component_id: ComponentId,
    /// How many temporary failures or timeouts are retried.
    pub max_retries: u32,
    /// The first retry's backoff; each further retry doubles it.
    pub retry_exp_backoff: Duration,
}

impl ExecutionDefaults {
    /// `component_id` with the typed client's retries: 3, the first after one second.
    #[must_use]
    pub fn new(component_id: ComponentId) -> Self {
        Self {
            component_id,
            max_retries: 3,
            retry_exp_backoff: Duration::from_secs(1),
        }
    }

    /// The settings of a function no catalog knows: component `submit:default`, 3 retries,
    /// one second first.
    ///
    /// # Panics
    /// Never: the component id is fixed and legal.
    #[must_use]
    pub fn unknown_function() -> Self {
        Self::new(ComponentId::new("submit", "default").expect("a legal component id"))
    }
}

/// Checks a submission's parameters; `Err` says why the function cannot take them.
type CheckParams = dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync;

/// One function of a [`Catalog`]: its name, the settings of its new executions and, when its
/// parameter type is known, a check that refuses parameters it could not decode.
#[derive(Clone)]
pub struct CatalogFunction {
    ffqn: FunctionFqn,
    defaults: ExecutionDefaults,
    check: Option<Arc<CheckParams>>,
}

impl fmt::Debug for CatalogFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CatalogFunction")
            .field("ffqn", &self.ffqn)
            .field("defaults", &self.defaults)
            .field("checks_params", &self.check.is_some())
            .finish()
    }
}

impl CatalogFunction {
    /// `ffqn`, whose executions are created with `defaults`; any JSON value is accepted as
    /// its parameters until [`CatalogFunction::params`] says what it takes.
    #[must_use]
    pub fn new(ffqn: FunctionFqn, defaults: ExecutionDefaults) -> Self {
        Self {
            ffqn,
            defaults,
            check: None,
        }
    }

    /// Refuses parameters that do not decode into `P`, as the worker would decode them (its
    /// execution would fail at once).
    #[must_use]
    pub fn params<P: DeserializeOwned + 'static>(mut self) -> Self {
        self.check = Some(Arc::new(|params: &serde_json::Value| {
            P::deserialize(params)
                .map(drop)
                .map_err(|err| err.to_string())
        }));
        self
    }

    /// The function.
    #[must_use]
    pub fn ffqn(&self) -> &FunctionFqn {
        &self.ffqn
    }

    /// How its submitted executions are created.
    #[must_use]
    pub fn defaults(&self) -> &ExecutionDefaults {
        &self.defaults
    }

    /// Whether it checks parameters ([`CatalogFunction::params`]).
    #[must_use]
    pub fn checks_params(&self) -> bool {
        self.check.is_some()
    }

    /// Whether the function takes `params`: `Err` with the decoder's reason when it cannot.
    ///
    /// # Errors
    /// The parameters do not decode into the function's parameter type.
    pub fn check(&self, params: &serde_json::Value) -> Result<(), String> {
        self.check.as_ref().map_or(Ok(()), |check| check(params))
    }

    pub(crate) fn with_defaults(mut self, defaults: ExecutionDefaults) -> Self {
        self.defaults = defaults;
        self
    }
}

/// The functions a node runs, by name, and the settings of an execution of a function it
/// does not know (which is created all the same, and waits for a worker elsewhere).
///
/// [`crate::NodeBuilder::start`] builds a node's catalog from its registrations
/// ([`crate::Node::catalog`]): a typed `activity` or `workflow` checks its parameters by
/// decoding them into its `P`; any other worker's functions take any JSON value; each gets
/// its executor's component. A program that submits without running a node builds one by
/// hand.
///
/// ```
/// use concepts::ComponentId;
/// use node::{Catalog, CatalogFunction, ExecutionDefaults};
///
/// let defaults = ExecutionDefaults::new(ComponentId::new("activity", "billing").unwrap());
/// let catalog = Catalog::new().with(
///     CatalogFunction::new("shop:billing/api.charge".parse().unwrap(), defaults).params::<u64>(),
/// );
/// let charge = catalog.get(&"shop:billing/api.charge".parse().unwrap()).unwrap();
/// assert!(charge.check(&serde_json::json!(42)).is_ok());
/// assert!(charge.check(&serde_json::json!("forty-two")).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Catalog {
    functions: BTreeMap<FunctionFqn, CatalogFunction>,
    unknown: ExecutionDefaults,
    /// The node's executors, which a submission due now is created locked for when one of
    /// them runs its function with a permit free ([`crate::Prepared::submit`]); none in a
    /// catalog built outside a node.
    local: LocalExecutors,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::new()
    }
}

impl Catalog {
    /// An empty catalog; an unknown function's executions get
    /// [`ExecutionDefaults::unknown_function`].
    #[must_use]
    pub fn new() -> Self {
        Self {
            functions: BTreeMap::new(),
            unknown: ExecutionDefaults::unknown_function(),
            local: LocalExecutors::new(),
        }
    }

    /// Adds `function`, replacing an entry of the same name.
    #[must_use]
    pub fn with(mut self, function: CatalogFunction) -> Self {
        self.insert(function);
        self
    }

    /// The settings of an execution of a function this catalog does not know.
    #[must_use]
    pub fn unknown_functions(mut self, defaults: ExecutionDefaults) -> Self {
        self.unknown = defaults;
        self
    }

    /// Adds `function`, replacing an entry of the same name.
    pub fn insert(&mut self, function: CatalogFunction) {
        self.functions.insert(function.ffqn.clone(), function);
    }

    /// The entry of `ffqn`, if the catalog knows it.
    #[must_use]
    pub fn get(&self, ffqn: &FunctionFqn) -> Option<&CatalogFunction> {
        self.functions.get(ffqn)
    }

    /// Every function, by name.
    pub fn functions(&self) -> impl ExactSizeIterator<Item = &CatalogFunction> {
        self.functions.values()
    }

    /// How an execution of `ffqn` is created: its entry's settings, or those of an unknown
    /// function.
    #[must_use]
    pub fn defaults_of(&self, ffqn: &FunctionFqn) -> &ExecutionDefaults {
        self.get(ffqn)
            .map_or(&self.unknown, |function| &function.defaults)
    }

    /// The settings of an execution of a function this catalog does not know.
    #[must_use]
    pub fn unknown_defaults(&self) -> &ExecutionDefaults {
        &self.unknown
    }

    /// The catalog of a node whose executors are `local`.
    pub(crate) fn with_local_executors(mut self, local: LocalExecutors) -> Self {
        self.local = local;
        self
    }

    pub(crate) fn local_executors(&self) -> &LocalExecutors {
        &self.local
    }
}
