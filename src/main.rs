//! The `inferdb` binary: parses the command line and runs one command.

fn main() {
    println!("inferdb {}", env!("CARGO_PKG_VERSION"));
}
