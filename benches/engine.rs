//! engine benchmark (being written).
fn main() {}
