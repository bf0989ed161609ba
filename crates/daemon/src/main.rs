fn main() {
    println!("nbraidd: not yet serving");
}
