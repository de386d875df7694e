//! `set image` and `restart`: spec edits as JSON patches addressed by
//! component name, guarded so that they cannot change the wrong component
//! (built by pure functions), and their application, retried when the
//! plan changed under it.
//!
//! A JSON patch addresses list items by index, and the components list may
//! change between our read and our write (a GitOps sync, another CI job). So
//! every patch starts with `test` ops on the names at the indexes it writes:
//! when the list was reordered, the API server refuses the whole patch (422)
//! and the caller reads the plan again. Server-side apply was the other choice;
//! but `spec.components` is an atomic list in the CRD schema, so an apply would
//! own and replace the whole list, and a stale copy would revert a concurrent
//! change to another component.

use super::connect::Ctx;
use super::error::{CliError, EditError};
use super::text::stamp;
use super::wait::{WaitArgs, wait_for};
use crate::api::ReleasePlan;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// The pod-template annotation `restart` bumps: a changed template is a new
/// revision, so the same images roll out through the normal steps.
pub const ANNOTATION_RESTARTED_AT: &str = "releaseplan.io/restartedAt";

/// One `COMPONENT[/CONTAINER]=IMAGE` argument of `set image`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSet {
    /// The component, by name.
    pub component: String,
    /// The container within it; `None`: the only container.
    pub container: Option<String>,
    /// The new image reference.
    pub image: String,
}

impl std::str::FromStr for ImageSet {
    type Err = EditError;

    /// Parses `COMPONENT=IMAGE` or `COMPONENT/CONTAINER=IMAGE`. The image may
    /// itself hold `/`, `:` and `@`: only the text before the first `=` names
    /// the target.
    fn from_str(s: &str) -> Result<ImageSet, EditError> {
        let bad = || EditError::BadPair(s.to_string());
        let (target, image) = s.split_once('=').ok_or_else(bad)?;
        let (component, container) = match target.split_once('/') {
            Some((c, k)) => (c, Some(k)),
            None => (target, None),
        };
        if component.is_empty() || image.is_empty() || container.is_some_and(str::is_empty) {
            return Err(bad());
        }
        Ok(ImageSet {
            component: component.to_string(),
            container: container.map(str::to_string),
            image: image.to_string(),
        })
    }
}

/// JSON-pointer escaping of one path segment (RFC 6901).
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn names(items: &[Value]) -> String {
    let list: Vec<&str> = items
        .iter()
        .map(|c| c["name"].as_str().unwrap_or("?"))
        .collect();
    list.join(", ")
}

fn components(spec: &Value) -> Result<&Vec<Value>, EditError> {
    spec["components"]
        .as_array()
        .ok_or_else(|| EditError::Shape("components list".into()))
}

/// The index of component `name` in `spec.components`.
fn component_index(plan: &str, spec: &Value, name: &str) -> Result<usize, EditError> {
    let list = components(spec)?;
    list.iter()
        .position(|c| c["name"] == name)
        .ok_or_else(|| EditError::NoComponent {
            plan: plan.to_string(),
            component: name.to_string(),
            known: names(list),
        })
}

/// What `set image` changes: the JSON patch, and one line per container
/// (`web/app: shop:1 -> shop:2`, or `unchanged`).
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// The JSON patch (test ops first, then the changes).
    pub patch: Value,
    /// What changes, for the user.
    pub lines: Vec<String>,
    /// False when every image is already the one asked for.
    pub changes: bool,
}

/// Builds the JSON patch of `set image` against the spec as read (`spec`, the
/// plan's raw JSON spec): for each pair, a `test` of the component's name at
/// its index and of the container's name at its index, then a `replace` of the
/// image.
pub fn set_image_patch(plan: &str, spec: &Value, sets: &[ImageSet]) -> Result<Edit, EditError> {
    let mut ops = Vec::new();
    let mut lines = Vec::new();
    let mut changes = false;
    for set in sets {
        let i = component_index(plan, spec, &set.component)?;
        let base = format!("/spec/components/{i}");
        let containers = spec["components"][i]["template"]["spec"]["containers"]
            .as_array()
            .ok_or_else(|| {
                EditError::Shape(format!("containers in component {}", set.component))
            })?;
        let j = match &set.container {
            Some(name) => containers
                .iter()
                .position(|c| c["name"] == name.as_str())
                .ok_or_else(|| EditError::NoContainer {
                    component: set.component.clone(),
                    container: name.clone(),
                    known: names(containers),
                })?,
            None if containers.len() == 1 => 0,
            None => {
                return Err(EditError::WhichContainer {
                    component: set.component.clone(),
                    count: containers.len(),
                    known: names(containers),
                });
            }
        };
        let container = &containers[j];
        let cname = container["name"].as_str().unwrap_or_default();
        let old = container["image"].as_str().unwrap_or_default();
        let path = format!("{base}/template/spec/containers/{j}");
        ops.push(json!({"op": "test", "path": format!("{base}/name"), "value": set.component}));
        ops.push(json!({"op": "test", "path": format!("{path}/name"), "value": cname}));
        ops.push(json!({"op": "replace", "path": format!("{path}/image"), "value": set.image}));
        if old == set.image {
            lines.push(format!("{}/{cname}: {old} (unchanged)", set.component));
        } else {
            changes = true;
            lines.push(format!("{}/{cname}: {old} -> {}", set.component, set.image));
        }
    }
    Ok(Edit {
        patch: Value::Array(ops),
        lines,
        changes,
    })
}

/// Builds the JSON patch of `restart`: sets the pod-template annotation
/// [`ANNOTATION_RESTARTED_AT`] to `stamp` on the named components (all when
/// `only` is `None`). Guarded by a `test` of each name; where the template has
/// no annotations map yet, the patch also tests the whole metadata as read, so
/// that adding the map cannot overwrite annotations written meanwhile.
pub fn restart_patch(
    plan: &str,
    spec: &Value,
    only: Option<&str>,
    stamp: &str,
) -> Result<Value, EditError> {
    let list = components(spec)?;
    let indexes: Vec<usize> = match only {
        Some(name) => vec![component_index(plan, spec, name)?],
        None => (0..list.len()).collect(),
    };
    let mut ops = Vec::new();
    for i in indexes {
        let c = &list[i];
        let base = format!("/spec/components/{i}");
        ops.push(json!({"op": "test", "path": format!("{base}/name"), "value": c["name"]}));
        let meta = &c["template"]["metadata"];
        let key = escape(ANNOTATION_RESTARTED_AT);
        if meta["annotations"].is_object() {
            ops.push(json!({"op": "add",
                "path": format!("{base}/template/metadata/annotations/{key}"), "value": stamp}));
        } else if meta.is_object() {
            ops.push(
                json!({"op": "test", "path": format!("{base}/template/metadata"), "value": meta}),
            );
            ops.push(
                json!({"op": "add", "path": format!("{base}/template/metadata/annotations"),
                "value": {ANNOTATION_RESTARTED_AT: stamp}}),
            );
        } else {
            ops.push(
                json!({"op": "test", "path": format!("{base}/template"), "value": c["template"]}),
            );
            ops.push(
                json!({"op": "add", "path": format!("{base}/template/metadata"),
                "value": {"annotations": {ANNOTATION_RESTARTED_AT: stamp}}}),
            );
        }
    }
    Ok(Value::Array(ops))
}

/// How many times a guarded patch is rebuilt when the plan changed under it.
const PATCH_ATTEMPTS: u32 = 3;

/// Applies a JSON patch built from the plan's raw spec by `build`; when the
/// API server refuses it (422: a `test` op failed because the list changed),
/// reads the plan again and rebuilds it. A patch refused twice in the same
/// form is a real refusal and reported as such. Returns the patched plan.
async fn guarded_patch<B>(ctx: &Ctx, name: &str, mut build: B) -> Result<ReleasePlan, CliError>
where
    B: FnMut(&serde_json::Value) -> Result<Option<serde_json::Value>, CliError>,
{
    let raw: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &ctx.namespace,
        &ApiResource::erase::<ReleasePlan>(&()),
    );
    let mut previous: Option<serde_json::Value> = None;
    for _ in 0..PATCH_ATTEMPTS {
        let obj = match raw.get_opt(name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Err(ctx.not_found(name).await),
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(ctx.not_found(name).await),
            Err(e) => return Err(ctx.error(&format!("read releaseplan {name}"), e)),
        };
        let Some(patch) = build(&obj.data["spec"])? else {
            return ctx.plan(name).await;
        };
        let ops: json_patch::Patch =
            serde_json::from_value(patch.clone()).map_err(|e| CliError::Refused {
                what: format!("build a JSON patch for releaseplan {name}"),
                reason: e.to_string(),
            })?;
        match ctx
            .plans()
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
            .await
        {
            Ok(p) => return Ok(p),
            Err(kube::Error::Api(s)) if s.code == 422 && previous.as_ref() != Some(&patch) => {
                previous = Some(patch);
            }
            Err(e) => return Err(ctx.error(&format!("patch the spec of releaseplan {name}"), e)),
        }
    }
    Err(CliError::Conflict(name.to_string(), PATCH_ATTEMPTS))
}

/// After a spec change: say where it stands and, with `--wait`, wait for it.
async fn after_edit(
    ctx: &Ctx,
    name: &str,
    before_generation: Option<i64>,
    patched: &ReleasePlan,
    wait: &WaitArgs,
) -> Result<i32, CliError> {
    let generation = patched.metadata.generation.unwrap_or(0);
    if patched.metadata.generation == before_generation {
        say(
            wait,
            &format!(
                "releaseplan {}/{name} unchanged (generation {generation})",
                ctx.namespace
            ),
        );
    } else {
        say(
            wait,
            &format!(
                "releaseplan {}/{name} patched (generation {generation}); the operator rolls it out",
                ctx.namespace
            ),
        );
    }
    if wait.wait {
        return wait_for(ctx, name, wait.timeout, wait.output).await;
    }
    Ok(0)
}

/// A line about an edit: on stdout, or on stderr when stdout is for the
/// `-o` document of `--wait`.
fn say(wait: &WaitArgs, line: &str) {
    if wait.output.is_some() {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// `set image`: a guarded JSON patch of the named containers' images.
pub(super) async fn set_image(
    ctx: &Ctx,
    name: &str,
    images: &[ImageSet],
    wait: &WaitArgs,
) -> Result<i32, CliError> {
    let before = ctx.plan(name).await?;
    let mut lines = Vec::new();
    let patched = guarded_patch(ctx, name, |spec| {
        let e = set_image_patch(name, spec, images)?;
        lines = e.lines;
        Ok(e.changes.then_some(e.patch))
    })
    .await?;
    for line in &lines {
        say(wait, line);
    }
    after_edit(ctx, name, before.metadata.generation, &patched, wait).await
}

/// `restart`: a guarded JSON patch of the restartedAt annotation.
pub(super) async fn restart(
    ctx: &Ctx,
    name: &str,
    component: Option<&str>,
    wait: &WaitArgs,
) -> Result<i32, CliError> {
    let before = ctx.plan(name).await?;
    let at = stamp();
    let patched = guarded_patch(ctx, name, |spec| {
        Ok(Some(restart_patch(name, spec, component, &at)?))
    })
    .await?;
    say(
        wait,
        &format!(
            "{}={at} set on the pod template of {}",
            ANNOTATION_RESTARTED_AT,
            component.map_or_else(|| "every component".into(), |c| format!("component {c}"))
        ),
    );
    after_edit(ctx, name, before.metadata.generation, &patched, wait).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Value {
        json!({"components": [
            {"name": "web", "replicas": 2, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "web:1"}]}}},
            {"name": "worker", "replicas": 1, "template": {
                "metadata": {"annotations": {"a": "b"}},
                "spec": {"containers": [
                    {"name": "main", "image": "worker:1"},
                    {"name": "sidecar", "image": "proxy:1"}]}}},
            {"name": "bare", "replicas": 1, "template": {
                "spec": {"containers": [{"name": "x", "image": "x:1"}]}}}
        ]})
    }

    fn set(s: &str) -> ImageSet {
        s.parse().unwrap()
    }

    #[test]
    fn parses_pairs() {
        assert_eq!(
            set("web=registry.example.com:5000/shop/web:2@sha256:ab"),
            ImageSet {
                component: "web".into(),
                container: None,
                image: "registry.example.com:5000/shop/web:2@sha256:ab".into()
            }
        );
        assert_eq!(
            set("worker/sidecar=proxy:2").container.as_deref(),
            Some("sidecar")
        );
        for bad in ["web", "=x", "web=", "web/=x"] {
            assert_eq!(
                bad.parse::<ImageSet>(),
                Err(EditError::BadPair(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn set_image_tests_the_names_at_the_indexes_it_replaces() {
        let edit = set_image_patch("shop", &spec(), &[set("worker/sidecar=proxy:2")]).unwrap();
        assert_eq!(
            edit.patch,
            json!([
                {"op": "test", "path": "/spec/components/1/name", "value": "worker"},
                {"op": "test", "path": "/spec/components/1/template/spec/containers/1/name", "value": "sidecar"},
                {"op": "replace", "path": "/spec/components/1/template/spec/containers/1/image", "value": "proxy:2"}
            ])
        );
        assert_eq!(edit.lines, ["worker/sidecar: proxy:1 -> proxy:2"]);
        assert!(edit.changes);
        let edit = set_image_patch("shop", &spec(), &[set("web=web:1")]).unwrap();
        assert!(!edit.changes);
        assert_eq!(edit.lines, ["web/app: web:1 (unchanged)"]);
    }

    #[test]
    fn set_image_errors_name_what_exists() {
        let e = set_image_patch("shop", &spec(), &[set("api=x")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "releaseplan shop has no component \"api\" (components: web, worker, bare)"
        );
        let e = set_image_patch("shop", &spec(), &[set("worker=x")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "component worker has 2 containers (main, sidecar): name one, as worker/CONTAINER=IMAGE"
        );
        let e = set_image_patch("shop", &spec(), &[set("web/nope=x")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("component web has no container \"nope\" (containers: app;")
        );
    }

    #[test]
    fn restart_adds_the_annotation_without_overwriting_others() {
        let p = restart_patch("shop", &spec(), None, "2026-11-30T15:00:00Z").unwrap();
        let key = "releaseplan.io~1restartedAt";
        assert_eq!(
            p,
            json!([
                {"op": "test", "path": "/spec/components/0/name", "value": "web"},
                {"op": "test", "path": "/spec/components/0/template/metadata", "value": {"labels": {"app": "web"}}},
                {"op": "add", "path": "/spec/components/0/template/metadata/annotations",
                 "value": {"releaseplan.io/restartedAt": "2026-11-30T15:00:00Z"}},
                {"op": "test", "path": "/spec/components/1/name", "value": "worker"},
                {"op": "add", "path": format!("/spec/components/1/template/metadata/annotations/{key}"),
                 "value": "2026-11-30T15:00:00Z"},
                {"op": "test", "path": "/spec/components/2/name", "value": "bare"},
                {"op": "test", "path": "/spec/components/2/template",
                 "value": {"spec": {"containers": [{"name": "x", "image": "x:1"}]}}},
                {"op": "add", "path": "/spec/components/2/template/metadata",
                 "value": {"annotations": {"releaseplan.io/restartedAt": "2026-11-30T15:00:00Z"}}}
            ])
        );
        let p = restart_patch("shop", &spec(), Some("worker"), "t").unwrap();
        assert_eq!(p.as_array().unwrap().len(), 2);
        assert!(restart_patch("shop", &spec(), Some("nope"), "t").is_err());
    }
}
