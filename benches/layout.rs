//! layout benchmark (being written).
fn main() {}
