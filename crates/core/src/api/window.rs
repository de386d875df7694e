//! Release windows (`spec.strategy.windows`) and the administrator's
//! `ReleaseFreeze`: when a rollout may start or advance. The pure evaluation
//! (which window is open at `obs.now`, until when a freeze holds) is
//! `plan::windows`; rollback, abort and deletion are never held.

use chrono::{DateTime, Utc};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most windows of a plan.
pub const MAX_WINDOWS: u32 = 16;

/// A time of day, `HH:MM` on the 24-hour clock (`24:00` only as an `end`).
pub const TIME_OF_DAY_REGEX: &str = r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$";

fn time_of_day_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 5,
        "pattern": TIME_OF_DAY_REGEX
    })
}

/// A day of the week, as a window names it.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum Weekday {
    /// Monday.
    Mon,
    /// Tuesday.
    Tue,
    /// Wednesday.
    Wed,
    /// Thursday.
    Thu,
    /// Friday.
    Fri,
    /// Saturday.
    Sat,
    /// Sunday.
    Sun,
}

/// A weekly time range in which a rollout may start or take its next step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[x_kube(
    validation = Rule::new("self.start != self.end").message("windows[]: start and end must differ (an end before start spans midnight)"),
    validation = Rule::new("self.start != '24:00'").message("windows[]: start must be before 24:00").field_path(".start")
)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseWindow {
    /// The days the window opens on (`Mon` ... `Sun`); empty or absent: every day. A
    /// window whose `end` is not after its `start` spans midnight and closes the next day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(d, self.exists_one(e, e == d))").message("windows[].days: each day at most once"))]
    #[schemars(length(max = 7))]
    pub days: Vec<Weekday>,

    /// When the window opens, `HH:MM` local time of `timeZone`.
    #[schemars(schema_with = "time_of_day_schema")]
    pub start: String,

    /// When the window closes, `HH:MM` local time of `timeZone` (`24:00`: midnight).
    #[schemars(schema_with = "time_of_day_schema")]
    pub end: String,

    /// An IANA time zone name, such as `Europe/Paris`; default `UTC`. A name the operator
    /// does not know makes the spec invalid (condition `Stalled`, reason `InvalidSpec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

/// An administrator's freeze: while it holds, no rollout of the plans it
/// selects starts or advances (rollback, abort and deletion go on).
// Printer columns repeat `type_ = "string"`: they are columns, not duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "releaseplan.io",
    version = "v1alpha1",
    kind = "ReleaseFreeze",
    shortname = "rfz",
    doc = "A ReleaseFreeze holds every rollout of the ReleasePlans it selects from start until end: none starts or takes its next step (rollbacks, aborts and deletions are never held). `kubectl releaseplan promote --override-window` pushes one step through.",
    printcolumn(name = "Start", type_ = "string", json_path = ".spec.start"),
    printcolumn(name = "End", type_ = "string", json_path = ".spec.end"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".spec.reason"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!has(self.end) || self.end > self.start").message("end must be after start").field_path(".end")
)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseFreezeSpec {
    /// When the freeze begins (RFC 3339, such as `2026-12-24T00:00:00Z`).
    pub start: DateTime<Utc>,

    /// When it ends (RFC 3339); absent: until the freeze is deleted or given an end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<DateTime<Utc>>,

    /// Why, for the people whose rollouts wait (shown in the plans' conditions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub reason: Option<String>,

    /// The namespaces whose plans it holds; empty or absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// The plans it holds, by their labels; empty or absent: every plan of those namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// The ReleaseFreeze CRD as installed.
pub fn release_freeze_crd() -> CustomResourceDefinition {
    ReleaseFreeze::crd()
}
