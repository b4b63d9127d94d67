//! How `rcni policy` prints objects and tables, as `kubectl` prints them.

use serde_json::{json, Value};

use super::Output;

/// The object as `kubectl -o json` (four-space indent) or `-o yaml` prints it.
pub fn render(value: &Value, format: Output) -> String {
    match format {
        Output::Json => {
            let mut out = Vec::new();
            let style = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut out, style);
            serde::Serialize::serialize(value, &mut ser).expect("a Value serializes");
            String::from_utf8_lossy(&out).into_owned() + "\n"
        }
        Output::Yaml => serde_norway::to_string(value).unwrap_or_default(),
    }
}

/// `kubectl get -o`'s list of `items`.
pub fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "items": items, "kind": "List",
        "metadata": {"resourceVersion": ""}})
}

/// Rows aligned as kubectl's tabwriter aligns them (k8s.io/cli-runtime
/// `pkg/printers/tabwriter.go`: minimum width 6, padding 3): every column but the last 3
/// wider than its widest cell, and at least 6 wide.
pub fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            let widest = rows.iter().map(|r| r[i].chars().count()).max();
            (widest.unwrap_or(0) + 3).max(6)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == n {
                out += cell;
            } else {
                out += &format!("{cell:<width$}", width = widths[i]);
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_render_as_kubectl_json_and_yaml() {
        let v = json!({"kind": "NetworkPolicy", "metadata": {"name": "a"}});
        assert_eq!(
            render(&v, Output::Json),
            "{\n    \"kind\": \"NetworkPolicy\",\n    \"metadata\": {\n        \"name\": \"a\"\n    }\n}\n"
        );
        assert_eq!(
            render(&v, Output::Yaml),
            "kind: NetworkPolicy\nmetadata:\n  name: a\n"
        );
    }
}
