//! `kubectl releaseplan adopt DEPLOYMENT`: the ReleasePlan that takes a
//! running Deployment over (`spec.components[].adopt`), printed as YAML to
//! commit to git or pipe into `kubectl apply`. Reads the Deployment and the
//! HPA that scales it, if any; writes nothing.

use super::connect::Ctx;
use super::error::CliError;
use crate::api::LABEL_PLAN;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// Longest component name (the CRD's bound).
const MAX_COMPONENT: usize = 40;

/// A DNS label of at most `max` characters made from `name` (dots become
/// dashes).
fn label(name: &str, max: usize) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c == '.' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .take(max)
        .collect();
    s.trim_matches('-').to_string()
}

/// The plan adopting `d` (scaled by `hpa`, if any), named `plan`, with the
/// component `component`. The template is the Deployment's, less what the
/// API server and controllers add (`pod-template-hash`, a null
/// creationTimestamp), so the plan's first revision runs the same pods.
pub fn plan_for(
    d: &Deployment,
    hpa: Option<&HorizontalPodAutoscaler>,
    plan: &str,
    component: &str,
) -> Value {
    let mut template = d.spec.as_ref().map_or(Value::Null, |s| {
        serde_json::to_value(&s.template).unwrap_or(Value::Null)
    });
    if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("creationTimestamp");
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("pod-template-hash");
        }
    }
    let mut c = json!({"name": component, "adopt": {"deployment": d.name_any()}});
    // (The API server requires an HPA's spec; k8s-openapi's 1.33 types say Option.)
    match hpa.and_then(|h| h.spec.as_ref()) {
        Some(spec) => {
            let mut a = json!({"maxReplicas": spec.max_replicas});
            if let Some(min) = spec.min_replicas {
                a["minReplicas"] = json!(min);
            }
            if let Some(m) = &spec.metrics {
                a["metrics"] = serde_json::to_value(m).unwrap_or(Value::Null);
            }
            if let Some(b) = &spec.behavior {
                a["behavior"] = serde_json::to_value(b).unwrap_or(Value::Null);
            }
            // It starts where the Deployment is now.
            if let Some(r) = d.spec.as_ref().and_then(|s| s.replicas) {
                c["replicas"] = json!(r);
            }
            c["autoscaling"] = a;
        }
        None => {
            c["replicas"] = json!(d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
        }
    }
    c["template"] = template;
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": "ReleasePlan",
        "metadata": {"name": plan, "namespace": d.namespace()},
        "spec": {"components": [c]},
    })
}

/// What to do next, for stderr: the GitOps sequence of docs/operations.md.
fn next_steps(d: &str, hpa: Option<&str>, plan: &str) -> String {
    let mut out = format!(
        "# Next (docs/operations.md, \"Adopting a running Deployment\"):\n\
         #  1. commit this plan; remove `replicas` from deployment/{d}'s manifest\n"
    );
    if let Some(h) = hpa {
        let _ = write!(
            out,
            "#     and delete hpa/{h} in the same commit: the plan owns hpa/{plan}-<component>,\n\
             #     which scales every revision through the ComponentScale\n"
        );
    }
    let _ = write!(
        out,
        "#  2. wait: kubectl releaseplan wait {plan} (the Deployment is scaled down as the\n\
         #     plan's pods become ready; condition Adopted=True HandedOver at the end)\n\
         #  3. delete deployment/{d} from git (it runs no pod any more)\n"
    );
    out
}

/// Prints the plan adopting Deployment `name`.
pub(super) async fn run(
    ctx: &Ctx,
    name: &str,
    plan: Option<&str>,
    component: Option<&str>,
) -> Result<i32, CliError> {
    let name = name.strip_prefix("deployment/").unwrap_or(name);
    let name = name.strip_prefix("deployments/").unwrap_or(name);
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let d = match deployments.get_opt(name).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Err(CliError::Refused {
                what: format!("adopt deployment {name}"),
                reason: format!("no Deployment {name} in namespace {}", ctx.namespace),
            });
        }
        Err(e) => return Err(ctx.error(&format!("read deployment {name}"), e)),
    };
    if d.labels().contains_key(LABEL_PLAN) {
        return Err(CliError::Refused {
            what: format!("adopt deployment {name}"),
            reason: format!(
                "it is already a plan's (label {LABEL_PLAN}={})",
                d.labels()[LABEL_PLAN]
            ),
        });
    }
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let hpa = hpas
        .list(&ListParams::default())
        .await
        .map_err(|e| ctx.error("list horizontalpodautoscalers", e))?
        .items
        .into_iter()
        .find(|h| {
            h.spec.as_ref().is_some_and(|s| {
                let t = &s.scale_target_ref;
                t.kind == "Deployment" && t.name == name
            })
        });
    let plan = plan.map_or_else(|| label(name, 63), str::to_string);
    let component = component.map_or_else(|| label(name, MAX_COMPONENT), str::to_string);
    let doc = plan_for(&d, hpa.as_ref(), &plan, &component);
    let yaml = yaml_serde::to_string(&doc).map_err(|e| CliError::File {
        path: "-".into(),
        reason: e.to_string(),
    })?;
    print!("{yaml}");
    eprint!(
        "{}",
        next_steps(
            name,
            hpa.as_ref().map(ResourceExt::name_any).as_deref(),
            &plan
        )
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web.v2", "namespace": "shop"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "abc"},
                    "creationTimestamp": null},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_plan_runs_the_same_pods_and_adopts_the_deployment() {
        let doc = plan_for(&deployment(), None, "web-v2", &label("web.v2", 40));
        let c = &doc["spec"]["components"][0];
        assert_eq!(c["name"], "web-v2");
        assert_eq!(c["adopt"]["deployment"], "web.v2");
        assert_eq!(c["replicas"], 4);
        assert_eq!(c["template"]["metadata"], json!({"labels": {"app": "web"}}));
        assert_eq!(doc["metadata"]["namespace"], "shop");
        // It is a plan the API accepts as typed.
        let _: crate::api::ReleasePlan = serde_json::from_value(doc).unwrap();
    }

    #[test]
    fn an_hpa_becomes_the_plans_autoscaling() {
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"minReplicas": 2, "maxReplicas": 9,
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web.v2"},
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 70}}}]}
        }))
        .unwrap();
        let doc = plan_for(&deployment(), Some(&hpa), "web", "web");
        let a = &doc["spec"]["components"][0]["autoscaling"];
        assert_eq!(
            (a["minReplicas"].clone(), a["maxReplicas"].clone()),
            (json!(2), json!(9))
        );
        assert_eq!(
            a["metrics"][0]["resource"]["target"]["averageUtilization"],
            70
        );
        assert!(next_steps("web.v2", Some("web"), "web").contains("delete hpa/web"));
    }

    #[test]
    fn names_become_dns_labels() {
        assert_eq!(label("Web.Front-", 40), "web-front");
        assert_eq!(label(&"a".repeat(80), 40).len(), 40);
    }
}
