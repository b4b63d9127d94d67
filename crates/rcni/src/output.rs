//! How the verbs print JSON on stdout: the format Go's tools print (4-space indentation), and
//! a newline, in one write(2). `println!` passed the text and its newline to std's
//! line-buffered stdout separately, which then took two writes.

use serde::Serialize;

/// The value, pretty, and a newline.
pub fn print_json<T: Serialize>(v: &T) {
    let mut text = cni_types::pretty_json(v);
    text.push('\n');
    print!("{text}");
}
