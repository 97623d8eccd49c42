//! Criterion benchmarks (filled in below).
fn main() {}
