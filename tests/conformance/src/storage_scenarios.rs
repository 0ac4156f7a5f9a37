//! Scenarios of this group (filled in as they are written).

/// Expands to one test per scenario of this module.
#[macro_export]
macro_rules! storage_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; storage_scenarios; );
    };
}
