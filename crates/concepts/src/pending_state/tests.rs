//! Tests of the pending-state derivation.
