//! Tests of id parsing.
