//! Label selectors as Kubernetes evaluates them: every `matchLabels` pair and every
//! `matchExpressions` requirement must hold (AND); an empty selector selects everything.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector Kubernetes would have refused (validation catches these before they are stored;
/// evaluation refuses them too rather than guess).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{0:?} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)")]
    Operator(String),
}

/// The labels of a pod or namespace.
pub type Labels = BTreeMap<String, String>;

/// Where a selector reads labels from: a [`Labels`] map, or the compact label sets the
/// incremental pipeline keeps ([`crate::compact::LabelSet`]).
pub trait LabelLookup {
    /// The value of label `key`, if set.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Whether `selector` selects an object with `labels`.
pub fn matches(
    selector: &LabelSelector,
    labels: &(impl LabelLookup + ?Sized),
) -> Result<bool, SelectorError> {
    let pairs = selector.match_labels.iter().flatten();
    if !pairs
        .into_iter()
        .all(|(k, v)| labels.label(k) == Some(v.as_str()))
    {
        return Ok(false);
    }
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        let value = labels.label(&req.key);
        let holds = match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => return Err(SelectorError::Operator(other.to_string())),
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Refuses a selector with an operator Kubernetes does not know ([`matches`] refuses it only
/// when evaluation gets to it).
pub fn check(selector: &LabelSelector) -> Result<(), SelectorError> {
    for req in selector.match_expressions.iter().flatten() {
        if !matches!(
            req.operator.as_str(),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        ) {
            return Err(SelectorError::Operator(req.operator.clone()));
        }
    }
    Ok(())
}

/// A label selector as Kubernetes prints it (`metav1.FormatLabelSelector`, the text of
/// `kubectl get networkpolicy`'s POD-SELECTOR column and of `kubectl describe`): the
/// requirements sorted by key, `matchLabels` as `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`
/// (Exists), `!k` (DoesNotExist), values sorted; `<none>` for the empty selector, which
/// selects everything.
pub struct SelectorText<'a>(pub &'a LabelSelector);

impl SelectorText<'_> {
    /// Whether the selector selects everything (prints as `<none>`).
    pub fn is_everything(&self) -> bool {
        self.0.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && self
                .0
                .match_expressions
                .as_ref()
                .is_none_or(|e| e.is_empty())
    }
}

impl fmt::Display for SelectorText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut requirements: Vec<(&str, String)> = Vec::new();
        for (k, v) in self.0.match_labels.iter().flatten() {
            requirements.push((k, format!("{k}={v}")));
        }
        for e in self.0.match_expressions.iter().flatten() {
            let mut values = e.values.clone().unwrap_or_default();
            values.sort();
            let k = &e.key;
            let text = match e.operator.as_str() {
                "In" => format!("{k} in ({})", values.join(",")),
                "NotIn" => format!("{k} notin ({})", values.join(",")),
                "Exists" => k.clone(),
                "DoesNotExist" => format!("!{k}"),
                _ => return f.write_str("<error>"),
            };
            requirements.push((k, text));
        }
        if requirements.is_empty() {
            return f.write_str("<none>");
        }
        requirements.sort_by(|a, b| a.0.cmp(b.0));
        let texts: Vec<String> = requirements.into_iter().map(|(_, t)| t).collect();
        f.write_str(&texts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn empty_selector_selects_everything() {
        let s = LabelSelector::default();
        assert_eq!(matches(&s, &labels(&[])), Ok(true));
        assert_eq!(matches(&s, &labels(&[("pod", "a")])), Ok(true));
    }

    #[test]
    fn match_labels_and_expressions_all_hold() {
        let s = LabelSelector {
            match_labels: Some(labels(&[("pod", "a")])),
            match_expressions: Some(vec![expr("tier", "In", &["web", "api"])]),
        };
        assert_eq!(
            matches(&s, &labels(&[("pod", "a"), ("tier", "web")])),
            Ok(true)
        );
        assert_eq!(
            matches(&s, &labels(&[("pod", "a"), ("tier", "db")])),
            Ok(false)
        );
        assert_eq!(
            matches(&s, &labels(&[("pod", "b"), ("tier", "web")])),
            Ok(false)
        );
        assert_eq!(matches(&s, &labels(&[("pod", "a")])), Ok(false));
    }

    #[test]
    fn not_in_exists_and_does_not_exist() {
        let not_in = LabelSelector {
            match_expressions: Some(vec![expr("pod", "NotIn", &["a", "b"])]),
            ..Default::default()
        };
        assert_eq!(matches(&not_in, &labels(&[("pod", "c")])), Ok(true));
        assert_eq!(matches(&not_in, &labels(&[("pod", "a")])), Ok(false));
        // NotIn also selects objects without the key, as Kubernetes does.
        assert_eq!(matches(&not_in, &labels(&[])), Ok(true));

        let exists = LabelSelector {
            match_expressions: Some(vec![expr("pod", "Exists", &[])]),
            ..Default::default()
        };
        assert_eq!(matches(&exists, &labels(&[("pod", "")])), Ok(true));
        assert_eq!(matches(&exists, &labels(&[])), Ok(false));

        let absent = LabelSelector {
            match_expressions: Some(vec![expr("pod", "DoesNotExist", &[])]),
            ..Default::default()
        };
        assert_eq!(matches(&absent, &labels(&[])), Ok(true));
        assert_eq!(matches(&absent, &labels(&[("pod", "x")])), Ok(false));
    }

    #[test]
    fn selectors_print_as_kubernetes_formats_them() {
        let s = LabelSelector {
            match_labels: Some(labels(&[("tier", "web"), ("app", "shop")])),
            match_expressions: Some(vec![
                expr("env", "In", &["prod", "dev"]),
                expr("zone", "DoesNotExist", &[]),
                expr("canary", "Exists", &[]),
                expr("x", "NotIn", &["b", "a"]),
            ]),
        };
        assert_eq!(
            SelectorText(&s).to_string(),
            "app=shop,canary,env in (dev,prod),tier=web,x notin (a,b),!zone"
        );
        assert!(!SelectorText(&s).is_everything());
        let empty = LabelSelector::default();
        assert_eq!(SelectorText(&empty).to_string(), "<none>");
        assert!(SelectorText(&empty).is_everything());
        let bad = LabelSelector {
            match_expressions: Some(vec![expr("pod", "Like", &["a"])]),
            ..Default::default()
        };
        assert_eq!(SelectorText(&bad).to_string(), "<error>");
    }

    #[test]
    fn an_unknown_operator_is_an_error() {
        let s = LabelSelector {
            match_expressions: Some(vec![expr("pod", "Like", &["a"])]),
            ..Default::default()
        };
        assert_eq!(
            matches(&s, &labels(&[("pod", "a")])),
            Err(SelectorError::Operator("Like".into()))
        );
    }
}
