//! Health gates: pure verdicts from observations (pod signals, query results)
//! and the I/O that fetches those results.

pub mod threshold;
