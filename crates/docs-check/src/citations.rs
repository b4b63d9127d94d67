//! The doc sections source comments cite: `docs/<file>.md, "Section name"` (or without the
//! comma) and `docs/<file>.md#anchor`, read from the comment text of a file with its `//`
//! lines joined, so that a citation wrapped over two lines is still one.

/// One citation: the doc file and the section as written (a quoted heading or an anchor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    pub file: String,
    pub section: Section,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Section {
    Heading(String),
    Anchor(String),
}

/// The comment text of a Rust source: every run of `//` lines joined with spaces.
fn comment_text(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        let t = line.trim_start();
        match t.strip_prefix("//") {
            Some(rest) => {
                let rest = rest.trim_start_matches(['/', '!']).trim();
                out.push_str(rest);
                out.push(' ');
            }
            None => out.push('\n'),
        }
    }
    out
}

/// Every citation of a doc section in the comments of `source`.
pub fn citations(source: &str) -> Vec<Citation> {
    let text = comment_text(source);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("docs/") {
        rest = &rest[at + "docs/".len()..];
        let Some(end) = rest.find(".md") else { break };
        let name = &rest[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            continue;
        }
        let file = format!("docs/{name}.md");
        let after = &rest[end + ".md".len()..];
        if let Some(anchor) = after.strip_prefix('#') {
            let anchor: String = anchor
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            out.push(Citation {
                file,
                section: Section::Anchor(anchor),
            });
            continue;
        }
        let quoted = after
            .trim_start_matches('`')
            .trim_start_matches(',')
            .trim_start_matches([' ', '(']);
        if let Some(q) = quoted.strip_prefix('"') {
            if let Some(close) = q.find('"') {
                let heading = q[..close].split_whitespace().collect::<Vec<_>>().join(" ");
                out.push(Citation {
                    file,
                    section: Section::Heading(heading),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_citation_wrapped_over_two_comment_lines_is_read_whole() {
        let src = "/// As measured (docs/performance.md, \"Pod sandboxes\n/// at scale\"), we ...\nfn f() {}\n// docs/architecture.md#wireguard\n";
        let c = citations(src);
        assert_eq!(
            c,
            [
                Citation {
                    file: "docs/performance.md".into(),
                    section: Section::Heading("Pod sandboxes at scale".into())
                },
                Citation {
                    file: "docs/architecture.md".into(),
                    section: Section::Anchor("wireguard".into())
                },
            ]
        );
    }

    #[test]
    fn code_is_not_a_comment() {
        assert!(citations("let p = \"docs/performance.md, \\\"x\\\"\";").is_empty());
    }
}
