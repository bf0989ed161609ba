fn main() {
    println!("nbraid");
}
