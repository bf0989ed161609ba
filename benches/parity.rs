//! parity benchmark (being written).
fn main() {}
