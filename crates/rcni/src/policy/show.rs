//! `rcni policy get`, `list` and `delete`: stored policies shown as `kubectl` shows them.

use cni_types::code;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use super::object::{policy_named, Object};
use super::store::Datastore;
use super::{Output, Problem};

/// `policy get`: the table row, or the object.
pub fn get(
    ds: &mut Datastore,
    namespace: &str,
    name: &str,
    output: Option<Output>,
) -> Result<(), Problem> {
    let target = policy_named(namespace, name);
    let key = target.key(&ds.keys);
    let entry = ds
        .get(&key)?
        .ok_or_else(|| Problem::new(code::UNKNOWN_CONTAINER, target.not_found()))?;
    let policy = decode(&key, &entry.value)?;
    match output {
        Some(format) => print!("{}", render(&to_value(&policy), format)),
        None => print!("{}", table(&[policy], false)),
    }
    Ok(())
}

/// `policy list`: the policies of `namespace` (`None`: of all).
pub fn list(
    ds: &mut Datastore,
    namespace: Option<&str>,
    output: Option<Output>,
) -> Result<(), Problem> {
    let entries = ds.list(&ds.keys.policies(namespace))?;
    let mut policies = Vec::new();
    for e in &entries {
        match decode(&e.key, &e.value) {
            Ok(p) => policies.push(p),
            Err(problem) => eprintln!("warning: {}", problem.text),
        }
    }
    if let Some(format) = output {
        let items: Vec<Value> = policies.iter().map(to_value).collect();
        let list = json!({"apiVersion": "v1", "items": items, "kind": "List",
            "metadata": {"resourceVersion": ""}});
        print!("{}", render(&list, format));
    } else if policies.is_empty() {
        match namespace {
            Some(ns) => eprintln!("No resources found in {ns} namespace."),
            None => eprintln!("No resources found"),
        }
    } else {
        print!("{}", table(&policies, namespace.is_none()));
    }
    Ok(())
}

/// `policy delete NAME`.
pub fn delete(ds: &mut Datastore, namespace: &str, name: &str, json: bool) -> Result<(), Problem> {
    delete_objects(ds, &[policy_named(namespace, name)], json)
}

/// `policy delete -f`: the objects the documents of `text` name.
pub fn delete_documents(ds: &mut Datastore, text: &str, json: bool) -> Result<(), Problem> {
    let docs = cni_policy::parse_documents(text)
        .map_err(|e| Problem::new(code::DECODING_FAILURE, format!("error: {e}")))?;
    let objects = docs
        .iter()
        .map(Object::named)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Problem::new(code::DECODING_FAILURE, e))?;
    delete_objects(ds, &objects, json)
}

/// Deletes each of `objects`, printing each deletion; the missing ones are the error.
fn delete_objects(ds: &mut Datastore, objects: &[Object], json: bool) -> Result<(), Problem> {
    let mut missing = Vec::new();
    let mut report = Vec::new();
    for o in objects {
        let key = o.key(&ds.keys);
        let deleted = ds.delete(&key)?;
        if !deleted {
            missing.push(o.not_found());
        } else if json {
            report.push(json!({"key": key, "object": o.label(), "action": "deleted"}));
        } else {
            println!("{}", o.deleted());
        }
    }
    if json {
        println!("{}", Value::Array(report));
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Problem::new(code::UNKNOWN_CONTAINER, missing.join("\n"))),
    }
}

fn decode(key: &str, value: &[u8]) -> Result<NetworkPolicy, Problem> {
    serde_json::from_slice(value)
        .map_err(|e| Problem::new(code::DECODING_FAILURE, format!("error: {key}: {e}")))
}

fn to_value(policy: &NetworkPolicy) -> Value {
    serde_json::to_value(policy).unwrap_or(Value::Null)
}

/// The object as `kubectl -o json` (four-space indent) or `-o yaml` prints it.
fn render(value: &Value, format: Output) -> String {
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

/// `kubectl get networkpolicy`'s table (NAMESPACE only with `all_namespaces`), without AGE:
/// the store keeps no creation time.
pub fn table(policies: &[NetworkPolicy], all_namespaces: bool) -> String {
    let mut rows = vec![vec!["NAME".to_string(), "POD-SELECTOR".to_string()]];
    for p in policies {
        let selector = p
            .spec
            .as_ref()
            .and_then(|s| s.pod_selector.clone())
            .unwrap_or_default();
        rows.push(vec![
            p.metadata.name.clone().unwrap_or_default(),
            selector_text(&selector),
        ]);
    }
    if all_namespaces {
        rows[0].insert(0, "NAMESPACE".into());
        for (row, p) in rows[1..].iter_mut().zip(policies) {
            row.insert(0, cni_policy::effective::policy_namespace(p).to_string());
        }
    }
    columns(&rows)
}

/// Rows aligned as kubectl's tabwriter aligns them (k8s.io/cli-runtime
/// `pkg/printers/tabwriter.go`: minimum width 6, padding 3): every column but the last 3
/// wider than its widest cell, and at least 6 wide.
fn columns(rows: &[Vec<String>]) -> String {
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

/// A label selector as Kubernetes prints one (`metav1.FormatLabelSelector`): requirements
/// sorted by key, `<none>` for the empty selector.
pub fn selector_text(selector: &LabelSelector) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        requirements.push((k.clone(), format!("{k}={v}")));
    }
    for e in selector.match_expressions.iter().flatten() {
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        let k = &e.key;
        let text = match e.operator.as_str() {
            "In" => format!("{k} in ({})", values.join(",")),
            "NotIn" => format!("{k} notin ({})", values.join(",")),
            "Exists" => k.clone(),
            "DoesNotExist" => format!("!{k}"),
            _ => return "<error>".into(),
        };
        requirements.push((k.clone(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    let texts: Vec<String> = requirements.into_iter().map(|(_, t)| t).collect();
    match texts.is_empty() {
        true => "<none>".into(),
        false => texts.join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policies(text: &str) -> Vec<NetworkPolicy> {
        cni_policy::parse_documents(text)
            .unwrap()
            .into_iter()
            .map(|d| match d {
                cni_policy::Document::NetworkPolicy(p) => *p,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn selectors_print_as_kubernetes_formats_them() {
        let p = policies(
            "kind: NetworkPolicy\nmetadata: {name: a}\nspec:\n  podSelector:\n    matchLabels: {tier: web, app: shop}\n    matchExpressions:\n    - {key: env, operator: In, values: [prod, dev]}\n    - {key: zone, operator: DoesNotExist}\n    - {key: canary, operator: Exists}\n    - {key: x, operator: NotIn, values: [b, a]}\n",
        );
        let sel = p[0].spec.as_ref().unwrap().pod_selector.clone().unwrap();
        assert_eq!(
            selector_text(&sel),
            "app=shop,canary,env in (dev,prod),tier=web,x notin (a,b),!zone"
        );
        assert_eq!(selector_text(&LabelSelector::default()), "<none>");
    }

    #[test]
    fn the_table_has_kubectls_columns_and_alignment() {
        let p = policies(
            "kind: NetworkPolicy\nmetadata: {name: deny-all, namespace: x}\nspec: {podSelector: {}}\n---\nkind: NetworkPolicy\nmetadata: {name: allow-web-from-frontend}\nspec: {podSelector: {matchLabels: {app: web}}}\n",
        );
        assert_eq!(
            table(&p, false),
            "NAME                      POD-SELECTOR\n\
             deny-all                  <none>\n\
             allow-web-from-frontend   app=web\n"
        );
        assert_eq!(
            table(&p[..1], true),
            "NAMESPACE   NAME       POD-SELECTOR\n\
             x           deny-all   <none>\n"
        );
    }

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
