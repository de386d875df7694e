//! `components[].dependsOn`: the order components of a plan start in (and the
//! reverse order they roll back in). The schema type and the CEL rules that
//! refuse bad references at admission; the core's timeline is
//! `plan::order`.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// One component another waits for.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// The component waited for: one listed before this one in `spec.components`.
    #[schemars(length(min = 1, max = 40))]
    pub component: String,
    /// The step of `spec.strategy.steps` (by `name`) that component must have finished
    /// (its pods ready, its pause over, its gates passed). Unset: it must be fully
    /// promoted (its own final step to 100% done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub step: Option<String>,
}

/// Every `dependsOn[].component` names a component of the plan.
pub const KNOWN_RULE: &str = "self.components.all(c, !has(c.dependsOn) || c.dependsOn.all(d, self.components.exists(o, o.name == d.component)))";
/// What [`KNOWN_RULE`] says when it fails.
pub const KNOWN_MESSAGE: &str =
    "spec.components[].dependsOn[].component must name one of spec.components";

/// No component depends on itself.
pub const NOT_SELF_RULE: &str =
    "self.components.all(c, !has(c.dependsOn) || c.dependsOn.all(d, d.component != c.name))";
/// What [`NOT_SELF_RULE`] says when it fails.
pub const NOT_SELF_MESSAGE: &str =
    "spec.components[].dependsOn[].component: a component cannot depend on itself (a cycle)";

/// No two components depend on each other (the shortest cycle, named as
/// such; [`LISTED_BEFORE_RULE`] refuses every cycle).
pub const MUTUAL_RULE: &str = "self.components.all(c, !has(c.dependsOn) || c.dependsOn.all(d, !self.components.exists(o, o.name == d.component && has(o.dependsOn) && o.dependsOn.exists(e, e.component == c.name))))";
/// What [`MUTUAL_RULE`] says when it fails.
pub const MUTUAL_MESSAGE: &str = "spec.components[].dependsOn: two components depend on each other (a cycle); a component may only depend on components listed before it";

/// Every `dependsOn[].component` is listed before the component: no cycle of
/// any length can form. CEL cannot walk a graph, but it can compare
/// positions: `[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]` (the list's `maxItems`, a literal so the
/// API server's cost estimate stays bounded) gives each index.
pub const LISTED_BEFORE_RULE: &str = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].all(i, i >= size(self.components) || !has(self.components[i].dependsOn) || self.components[i].dependsOn.all(d, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].exists(j, j < i && self.components[j].name == d.component)))";
/// What [`LISTED_BEFORE_RULE`] says when it fails: the first component
/// with such a dependency, by name. The API server's cost estimate refuses a
/// richer message: `string(int)` and `join` count as unbounded, so neither
/// the index nor the list of names can be said.
pub const LISTED_BEFORE_MESSAGE: &str = "'spec.components[].dependsOn: ' + self.components[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].filter(i, i < size(self.components) && has(self.components[i].dependsOn) && self.components[i].dependsOn.exists(d, ![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].exists(j, j < i && self.components[j].name == d.component)))[0]].name + ' depends on a component that is not listed before it: a component may depend only on components listed before it, so dependsOn has no cycle of any length; list the components in dependency order'";
/// A named step exists in `strategy.steps`.
pub const STEP_RULE: &str = "self.components.all(c, !has(c.dependsOn) || c.dependsOn.all(d, !has(d.step) || self.strategy.steps.exists(s, has(s.name) && s.name == d.step)))";
/// What [`STEP_RULE`] says when it fails.
pub const STEP_MESSAGE: &str =
    "spec.components[].dependsOn[].step must be the name of a step in spec.strategy.steps";

/// Blue-green switches every component at once: no order to keep.
pub const BLUE_GREEN_RULE: &str = "!has(self.strategy.blueGreen) || self.components.all(c, !has(c.dependsOn) || size(c.dependsOn) == 0)";
/// What [`BLUE_GREEN_RULE`] says when it fails.
pub const BLUE_GREEN_MESSAGE: &str = "spec.components[].dependsOn is not supported with strategy.blueGreen: its switch moves every component at once";

/// Step names are unique.
pub const STEP_NAMES_RULE: &str =
    "self.steps.all(s, !has(s.name) || self.steps.exists_one(t, has(t.name) && t.name == s.name))";
