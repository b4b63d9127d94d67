//! `rcni doctor`: diagnosis for operators. `explain` places an error message from kubelet
//! events or runtime logs in its CNI lifecycle stage.

mod explain;

pub use explain::{explain, Explanation};

/// Prints an explanation as text, or as one JSON object.
pub fn print(e: &Explanation, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(e).unwrap_or_else(|_| "{}".into())
        );
        return;
    }
    let stage = e
        .stage
        .map(|s| s.describe())
        .unwrap_or("unknown (the message names no CNI operation)");
    println!("stage:   {stage}");
    println!("cause:   {}", e.cause.unwrap_or("not recognised"));
    if let Some(p) = &e.plugin {
        println!("plugin:  {p}");
    }
    if let Some(c) = e.code {
        println!("code:    {c}");
    }
    println!("meaning: {}", e.meaning);
    println!("next:");
    for n in &e.next {
        println!("  - {n}");
    }
}
