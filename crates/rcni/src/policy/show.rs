//! `rcni policy get`, `list` and `delete`: stored objects shown as `kubectl` shows them;
//! NetworkPolicies here, ClusterNetworkPolicies and nodes in [`super::cluster`].

use cni_policy::selector::SelectorText;
use cni_types::code;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{json, Value};

use super::cluster;
use super::object::{Object, Resource};
use super::printer::{columns, list_of, render};
use super::store::Datastore;
use super::{Output, Problem};

/// `policy get [RESOURCE/]NAME`: the table row, or the object.
pub fn get(
    ds: &mut Datastore,
    namespace: &str,
    arg: &str,
    output: Option<Output>,
) -> Result<(), Problem> {
    let (resource, name) = Resource::split(arg).map_err(usage)?;
    match resource {
        Resource::NetworkPolicy => get_policy(ds, namespace, name, output),
        Resource::ClusterNetworkPolicy => cluster::get_policy(ds, name, output),
        Resource::Node => cluster::get_node(ds, name, output),
    }
}

/// A resource name the verbs do not know.
pub fn usage(text: String) -> Problem {
    Problem::new(code::INVALID_ENVIRONMENT, text)
}

fn get_policy(
    ds: &mut Datastore,
    namespace: &str,
    name: &str,
    output: Option<Output>,
) -> Result<(), Problem> {
    let target = Resource::NetworkPolicy.named(namespace, name);
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

/// `policy list [RESOURCE]`: the NetworkPolicies of `namespace` (`None`: of all), or every
/// object of a cluster-scoped resource.
pub fn list(
    ds: &mut Datastore,
    resource: Resource,
    namespace: Option<&str>,
    output: Option<Output>,
) -> Result<(), Problem> {
    match resource {
        Resource::NetworkPolicy => list_policies(ds, namespace, output),
        Resource::ClusterNetworkPolicy => cluster::list_policies(ds, output),
        Resource::Node => cluster::list_nodes(ds, output),
    }
}

fn list_policies(
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
        print!("{}", render(&list_of(items), format));
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

/// `policy delete [RESOURCE/]NAME`.
pub fn delete(ds: &mut Datastore, namespace: &str, arg: &str, json: bool) -> Result<(), Problem> {
    let (resource, name) = Resource::split(arg).map_err(usage)?;
    delete_objects(ds, &[resource.named(namespace, name)], json)
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
            SelectorText(&selector).to_string(),
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
}
