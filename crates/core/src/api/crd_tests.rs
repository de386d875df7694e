//! Checks of the generated CRD: what `kubectl get rp` shows, the status
//! subresource, and that the checked-in `crds/releaseplan.yaml` is current.
//! (tests/it/admission.rs proves the rules against a real API server.)

use super::{MAX_CONTAINERS, MAX_TEMPLATE_LABELS, crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

fn version(crd: &CustomResourceDefinition) -> &CustomResourceDefinitionVersion {
    assert_eq!(crd.spec.versions.len(), 1, "one served version");
    &crd.spec.versions[0]
}

fn root_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    version(crd)
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the version has an openAPIV3Schema")
}

/// The schema at a path of property names below the root.
fn schema_at<'a>(mut s: &'a JSONSchemaProps, path: &[&str]) -> &'a JSONSchemaProps {
    for (i, p) in path.iter().enumerate() {
        s = if *p == "[]" {
            match s.items.as_ref() {
                Some(JSONSchemaPropsOrArray::Schema(item)) => item,
                other => panic!("{}: no items schema: {other:?}", path[..=i].join(".")),
            }
        } else {
            s.properties
                .as_ref()
                .and_then(|props| props.get(*p))
                .unwrap_or_else(|| panic!("no property {}", path[..=i].join(".")))
        };
    }
    s
}

fn rules(s: &JSONSchemaProps) -> Vec<&str> {
    s.x_kubernetes_validations
        .iter()
        .flatten()
        .map(|r| r.rule.as_str())
        .collect()
}

#[test]
fn names_group_and_scope() {
    let crd = crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("releaseplans.releaseplan.io")
    );
    assert_eq!(crd.spec.group, "releaseplan.io");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "ReleasePlan");
    assert_eq!(crd.spec.names.plural, "releaseplans");
    assert_eq!(crd.spec.names.short_names, Some(vec!["rp".to_string()]));
    let v = version(&crd);
    assert_eq!(v.name, "v1alpha1");
    assert!(v.served && v.storage);
}

#[test]
fn printer_columns_are_phase_step_weight_traffic_stable_current_age() {
    let crd = crd();
    let columns = version(&crd)
        .additional_printer_columns
        .as_ref()
        .expect("printer columns");
    let got: Vec<(&str, &str, &str)> = columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Phase", "string", ".status.phase"),
            ("Step", "integer", ".status.currentStep"),
            ("Weight", "integer", ".status.weight"),
            ("Traffic", "integer", ".status.trafficWeight"),
            ("Stable", "string", ".status.stableRevision"),
            ("Current", "string", ".status.currentRevision"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ]
    );
}

#[test]
fn has_the_status_subresource() {
    let crd = crd();
    let sub = version(&crd).subresources.as_ref().expect("subresources");
    assert!(sub.status.is_some(), "status subresource");
    assert!(sub.scale.is_none(), "no scale subresource");
}

#[test]
fn carries_the_cel_rules_and_bounds() {
    let crd = crd();
    let root = root_schema(&crd);
    assert_eq!(rules(root)[0], "size(self.metadata.name) <= 63");
    assert!(
        rules(root)[1].contains("size(self.metadata.name) + size(c.name) <= 55"),
        "default Service names must fit"
    );
    let name_rule = &root.x_kubernetes_validations.as_ref().expect("root rules")[0];
    assert_eq!(name_rule.field_path.as_deref(), Some(".metadata.name"));
    assert_eq!(
        schema_at(root, &["metadata", "name"]).type_.as_deref(),
        Some("string"),
        "the fieldPath must name a property of the schema"
    );
    let spec = schema_at(root, &["spec"]);
    assert_eq!(spec.required, Some(vec!["components".to_string()]));
    assert_eq!(
        rules(spec).len(),
        12,
        "unique component names, blue-green needs traffic, routed steps need a router, gate components exist, \
         dependsOn: known, not itself, listed before, named step exists, not with blue-green, \
         no capacity with blue-green, no baseline with blue-green"
    );
    let component = schema_at(spec, &["components", "[]"]);
    assert_eq!(
        rules(component).len(),
        13,
        "replicas or autoscaling (or a DaemonSet), containers, reserved labels, unique container and init container names, \
         statefulSet only with its kind, traffic/autoscaling/adopt only for Deployments, kind kept, \
         no replicas for a DaemonSet, daemonSet only with its kind, capacity only for Deployments, \
         baseline only for Deployments, serving not with hostNetwork"
    );
    assert_eq!(
        component.required,
        Some(vec!["name".to_string(), "template".to_string()]),
        "replicas is optional (required by a rule unless autoscaling is set)"
    );
    assert_eq!(
        rules(schema_at(component, &["autoscaling"])).len(),
        2,
        "min and metrics need max, min <= max"
    );
    assert_eq!(rules(schema_at(component, &["name"])).len(), 1);
    let labels = schema_at(component, &["template", "metadata", "labels"]);
    assert_eq!(labels.max_properties, Some(i64::from(MAX_TEMPLATE_LABELS)));
    assert_eq!(rules(labels).len(), 1, "label keys");
    let value = match labels.additional_properties.as_ref() {
        Some(JSONSchemaPropsOrBool::Schema(value)) => value,
        other => panic!("labels: no value schema: {other:?}"),
    };
    assert_eq!(value.max_length, Some(63));
    assert_eq!(rules(value).len(), 1, "label values");
    let pod = schema_at(component, &["template", "spec"]);
    assert_eq!(schema_at(pod, &["ephemeralContainers"]).max_items, Some(0));
    for list in ["containers", "initContainers"] {
        let containers = schema_at(pod, &[list]);
        assert_eq!(
            containers.max_items,
            Some(i64::from(MAX_CONTAINERS)),
            "{list}"
        );
        let container = schema_at(containers, &["[]"]);
        assert_eq!(
            container.required,
            Some(vec!["image".to_string(), "name".to_string()]),
            "{list}"
        );
        let name = schema_at(container, &["name"]);
        assert_eq!(
            (name.max_length, rules(name).len()),
            (Some(63), 1),
            "{list}"
        );
        let image = schema_at(container, &["image"]);
        assert_eq!(image.min_length, Some(1), "{list}");
        assert!(image.pattern.is_some(), "{list}: image without whitespace");
        let port = schema_at(container, &["ports", "[]"]);
        let range = |field: &str| {
            let s = schema_at(port, &[field]);
            (s.minimum, s.maximum)
        };
        assert_eq!(range("containerPort"), (Some(1.0), Some(65535.0)), "{list}");
        assert_eq!(range("hostPort"), (Some(0.0), Some(65535.0)), "{list}");
    }
    assert_eq!(
        schema_at(component, &["template"]).required,
        Some(vec!["spec".to_string()])
    );
    assert_eq!(
        rules(schema_at(spec, &["strategy"])).len(),
        3,
        "weights, blue-green without steps, unique step names"
    );
    assert_eq!(
        rules(schema_at(spec, &["strategy", "steps", "[]"])).len(),
        1
    );
    assert_eq!(
        rules(schema_at(spec, &["health"])).len(),
        1,
        "gate names unique across gates and the deprecated lists"
    );
    let gate = schema_at(spec, &["health", "gates", "[]"]);
    assert_eq!(
        rules(gate).len(),
        4,
        "one kind, access only on HTTP kinds, auth or Authorization, no consecutive counts on Job gates"
    );
    assert_eq!(rules(schema_at(gate, &["name"])).len(), 1, "gate name");
    for (kind, field) in [
        ("prometheus", "address"),
        ("prometheus", "threshold"),
        ("prometheus", "interval"),
        ("webhook", "url"),
        ("template", "name"),
    ] {
        assert_eq!(
            rules(schema_at(gate, &[kind, field])).len(),
            1,
            "{kind}.{field}"
        );
    }
    let job_check = schema_at(gate, &["job", "template", "spec", "template", "spec"]);
    assert!(
        job_check
            .properties
            .as_ref()
            .is_some_and(|p| p.contains_key("containers"))
    );
    let prometheus = schema_at(spec, &["health", "prometheus", "[]"]);
    for field in ["name", "address", "threshold", "interval"] {
        assert_eq!(rules(schema_at(prometheus, &[field])).len(), 1, "{field}");
    }
    let webhook = schema_at(spec, &["health", "webhooks", "[]"]);
    for field in ["name", "url"] {
        assert_eq!(rules(schema_at(webhook, &[field])).len(), 1, "{field}");
    }
    let job = schema_at(spec, &["health", "jobs", "[]"]);
    assert_eq!(rules(schema_at(job, &["name"])).len(), 1, "job gate name");
    // The Job template: what the operator reads is typed, the rest kept as written.
    let pod = schema_at(job, &["template", "spec", "template", "spec"]);
    assert_eq!(pod.required, Some(vec!["containers".to_string()]));
    assert_eq!(pod.x_kubernetes_preserve_unknown_fields, Some(true));
    let containers = schema_at(pod, &["containers"]);
    assert_eq!(
        (containers.min_items, containers.max_items),
        (Some(1), Some(i64::from(super::MAX_JOB_CONTAINERS)))
    );
    let restart = schema_at(pod, &["restartPolicy"]);
    assert_eq!(restart.enum_.as_ref().map(Vec::len), Some(2));
}

#[test]
fn checked_in_crd_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds/releaseplan.yaml");
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}; run `make crds`"));
    let fresh = yaml_serde::to_string(&crd()).expect("CRD as YAML");
    assert!(
        committed == fresh,
        "crds/releaseplan.yaml is stale: it differs from what `cargo run --bin crdgen` prints; \
         run `make crds` and commit the result"
    );
}

/// Property names below a schema, skipping `skip` (embedded Kubernetes types).
fn property_names(s: &JSONSchemaProps, skip: &[&str], out: &mut Vec<String>) {
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = s.items.as_ref() {
        property_names(item, skip, out);
    }
    for (name, prop) in s.properties.iter().flatten() {
        if skip.contains(&name.as_str()) {
            out.push(name.clone());
            continue;
        }
        out.push(name.clone());
        property_names(prop, skip, out);
    }
}

#[test]
fn api_docs_show_the_full_example_and_every_field() {
    // the repository: this crate sits in crates/core
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let docs = std::fs::read_to_string(format!("{root}/docs/api.md")).expect("docs/api.md");
    let example =
        std::fs::read_to_string(format!("{root}/examples/full.yaml")).expect("examples/full.yaml");
    assert!(
        docs.contains(&format!("```yaml\n{example}```")),
        "docs/api.md must show examples/full.yaml verbatim"
    );

    let crd = crd();
    let mut names = Vec::new();
    let schema = root_schema(&crd);
    // Kubernetes' own types (a pod template, an HPA's metrics and behavior)
    // are documented by Kubernetes.
    property_names(
        schema_at(schema, &["spec"]),
        &["template", "metrics", "behavior", "volumeClaimTemplates"],
        &mut names,
    );
    property_names(schema_at(schema, &["status"]), &["conditions"], &mut names);
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            // `name`, `name[]`, or the end of a path such as `steps[].pause.duration`.
            ![
                format!("`{n}`"),
                format!("`{n}[]`"),
                format!(".{n}`"),
                format!(".{n}[]`"),
            ]
            .iter()
            .any(|form| docs.contains(form))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md does not describe {missing:?}"
    );
}

#[test]
fn checked_in_template_crds_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds/gatetemplates.yaml");
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}; run `make crds`"));
    let fresh = format!(
        "{}---\n{}",
        yaml_serde::to_string(&super::template::gate_template_crd()).unwrap(),
        yaml_serde::to_string(&super::template::cluster_gate_template_crd()).unwrap()
    );
    assert!(
        committed == fresh,
        "crds/gatetemplates.yaml is stale: it differs from what `cargo run --bin crdgen templates` prints; \
         run `make crds` and commit the result"
    );
}

#[test]
fn checked_in_policy_crd_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds/gatepolicies.yaml");
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}; run `make crds`"));
    let fresh = yaml_serde::to_string(&super::policy::gate_policy_crd()).unwrap();
    assert!(
        committed == fresh,
        "crds/gatepolicies.yaml is stale: it differs from what `cargo run --bin crdgen policies` prints; \
         run `make crds` and commit the result"
    );
}

#[test]
fn checked_in_freeze_crd_is_current() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/releasefreezes.yaml"
    );
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}; run `make crds`"));
    let fresh = yaml_serde::to_string(&super::window::release_freeze_crd()).unwrap();
    assert!(
        committed == fresh,
        "crds/releasefreezes.yaml is stale: it differs from what `cargo run --bin crdgen freezes` prints; \
         run `make crds` and commit the result"
    );
}

#[test]
fn template_kinds_share_the_gate_schemas_of_plans() {
    // A rule or field added to a gate struct reaches templates by construction.
    let plan = crd();
    let plan_spec = &plan.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
        .properties
        .as_ref()
        .unwrap()["spec"];
    let plan_prom = schema_at(plan_spec, &["health", "prometheus", "[]"]);
    let plan_hook = schema_at(plan_spec, &["health", "webhooks", "[]"]);
    let plan_job = schema_at(plan_spec, &["health", "jobs", "[]"]);
    for crd in [
        super::template::gate_template_crd(),
        super::template::cluster_gate_template_crd(),
    ] {
        let root = crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        let spec = &root.properties.as_ref().unwrap()["spec"];
        assert_eq!(
            schema_at(spec, &["prometheus"]).properties,
            plan_prom.properties
        );
        assert_eq!(
            schema_at(spec, &["webhook"]).properties,
            plan_hook.properties
        );
        assert_eq!(schema_at(spec, &["job"]).properties, plan_job.properties);
        // A template's analysis: the plan gate's analysis, with the access fields beside it.
        let plan_analysis = schema_at(plan_spec, &["health", "gates", "[]", "analysis"]);
        let template_analysis = schema_at(spec, &["analysis"]).properties.as_ref().unwrap();
        for (field, schema) in plan_analysis.properties.as_ref().unwrap() {
            assert_eq!(
                template_analysis.get(field),
                Some(schema),
                "analysis.{field}"
            );
        }
        for field in ["auth", "headers", "tls"] {
            assert!(template_analysis.contains_key(field), "analysis.{field}");
        }
        assert_eq!(rules(spec).len(), 8, "template rules");
    }
}

/// Every list in `s` (recursively) with `x-kubernetes-list-type: map`: path -> keys.
fn map_lists(s: &JSONSchemaProps, path: &str, out: &mut Vec<(String, Vec<String>)>) {
    if s.x_kubernetes_list_type.as_deref() == Some("map") {
        let keys = s.x_kubernetes_list_map_keys.clone().unwrap_or_default();
        // The API server refuses a map list whose keys the items do not require.
        if let Some(JSONSchemaPropsOrArray::Schema(item)) = s.items.as_ref() {
            let required = item.required.clone().unwrap_or_default();
            for key in &keys {
                assert!(
                    required.contains(key),
                    "{path}: map key {key} is not required"
                );
            }
        } else {
            panic!("{path}: a map list without an items schema");
        }
        out.push((path.to_string(), keys));
    }
    for (name, p) in s.properties.iter().flatten() {
        map_lists(p, &format!("{path}.{name}"), out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = s.items.as_ref() {
        map_lists(item, &format!("{path}[]"), out);
    }
}

#[test]
fn lists_with_a_unique_key_merge_under_server_side_apply() {
    let crd = crd();
    let mut lists = Vec::new();
    map_lists(root_schema(&crd), "", &mut lists);
    let got: Vec<String> = lists
        .iter()
        .map(|(path, keys)| format!("{path} by {}", keys.join(",")))
        .collect();
    let tpl = ".spec.components[].template.spec";
    let mut want = vec![
        ".spec.components by name".to_string(),
        format!("{tpl}.containers by name"),
        format!("{tpl}.containers[].env by name"),
        format!("{tpl}.containers[].volumeMounts by mountPath"),
        format!("{tpl}.initContainers by name"),
        format!("{tpl}.initContainers[].env by name"),
        format!("{tpl}.initContainers[].volumeMounts by mountPath"),
        format!("{tpl}.volumes by name"),
    ];
    for list in ["gates", "jobs", "prometheus", "templates", "webhooks"] {
        want.push(format!(".spec.health.{list} by name"));
    }
    // Conditions by type, as Kubernetes' own.
    want.push(".status.conditions by type".to_string());
    let mut got_sorted = got.clone();
    got_sorted.sort();
    want.sort();
    assert_eq!(got_sorted, want);
    // Steps have no key: they stay atomic, replaced whole by their manager.
    let steps = schema_at(root_schema(&crd), &["spec", "strategy", "steps"]);
    assert_eq!(steps.x_kubernetes_list_type, None);
}

/// The dependsOn ordering rule walks a literal list of indexes: it must
/// cover every index `spec.components` may have (its `maxItems`), or the
/// components past it would escape the rule.
#[test]
fn the_listed_before_rule_covers_every_component_index() {
    let crd = serde_json::to_value(super::crd()).unwrap();
    let max =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["components"]["maxItems"]
            .as_u64()
            .expect("components maxItems");
    let list: Vec<String> = (0..max).map(|i| i.to_string()).collect();
    let literal = format!("[{}]", list.join(", "));
    for text in [
        super::order::LISTED_BEFORE_RULE,
        super::order::LISTED_BEFORE_MESSAGE,
    ] {
        assert!(text.contains(&literal), "not over {literal}: {text}");
    }
}
