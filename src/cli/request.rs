//! Plugin requests (promote, abort, retry, pause, resume): the annotation value
//! and the metadata-only patch, and [`send`], the one request of the verbs and
//! of the dashboard's buttons. The annotation's format (`<action>/<id>`) and
//! whether a request applies are the core's (`plan::request`), shared with
//! the operator.

use super::complete;
use super::connect::Ctx;
use super::error::CliError;
use super::text::summary;
use crate::api::time::parse_duration;
use crate::api::{ANNOTATION_REQUEST, ReleasePlan};
use crate::plan::{Action, Request};
use chrono::{DateTime, Utc};
use clap::Args;
use clap_complete::ArgValueCompleter;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;

/// The annotation value of a request: `<action>/<id>`, where the id is the UTC
/// time to the millisecond plus a nonce, e.g. `promote/20250102T090000.123Z-3f2a`.
/// The operator applies each distinct value once and records it in
/// `status.acknowledgedRequest`.
pub fn request_value(action: Action, now: DateTime<Utc>, nonce: u16) -> String {
    let unique = format!("{}-{nonce:04x}", now.format("%Y%m%dT%H%M%S%.3fZ"));
    Request::new(action, &unique).to_annotation().to_string()
}

/// A nonce for [`request_value`] from the process id and the clock, so two
/// plugin runs in the same millisecond still differ.
pub fn nonce() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mixed = std::process::id().wrapping_mul(2_654_435_761) ^ nanos;
    u16::try_from(mixed & 0xffff).unwrap_or(0)
}

/// The JSON merge patch that sets the request annotation. It touches metadata
/// only: the spec belongs to its author (often a GitOps tool).
pub fn request_patch(value: &str) -> Value {
    json!({"metadata": {"annotations": {ANNOTATION_REQUEST: value}}})
}

/// A note when a pause or resume changes nothing.
pub fn no_op_note(action: Action, plan: &ReleasePlan) -> Option<&'static str> {
    let requested = plan.status.as_ref().is_some_and(|s| s.pause_requested);
    match action {
        Action::Pause if requested => Some("a pause request already holds the plan"),
        Action::Resume if !requested && plan.spec.paused => Some(
            "no pause request to lift; the plan is held by spec.paused, which only a spec change lifts",
        ),
        Action::Resume if !requested => Some("no pause request to lift"),
        _ => None,
    }
}

/// Arguments of the request commands.
#[derive(Args, Debug)]
pub struct RequestArgs {
    /// Name of the ReleasePlan.
    #[arg(add = ArgValueCompleter::new(complete::plan_names))]
    pub name: String,
    /// How long to wait for the operator to acknowledge the request.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ack_timeout: Duration,
}

/// A request sent by [`send`].
pub struct Sent {
    /// The annotation value; the operator acknowledges exactly this value.
    pub value: String,
    /// The plan before the request.
    pub before: ReleasePlan,
    /// Why the operator will ignore it, when it does not apply now.
    pub ignored: Option<String>,
}

/// Sends a request (promote, abort...) to the operator: the metadata-only
/// patch of the request annotation, the one request of the plugin's verbs
/// and of the dashboard's buttons. Warns on stderr when the operator will
/// ignore it or when it changes nothing; does not wait for the operator.
pub async fn send(ctx: &Ctx, name: &str, action: Action) -> Result<Sent, CliError> {
    let before = ctx.plan(name).await?;
    let ignored = action
        .applies_in(&before.status.clone().unwrap_or_default())
        .err()
        .map(|why| why.to_string());
    if let Some(why) = &ignored {
        eprintln!("warning: {why}; sending it anyway, the operator will ignore it");
    }
    if let Some(note) = no_op_note(action, &before) {
        eprintln!("note: {note}");
    }
    let value = request_value(action, Utc::now(), nonce());
    ctx.plans()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(request_patch(&value)),
        )
        .await
        .map_err(|e| ctx.error(&format!("annotate releaseplan {name}"), e))?;
    Ok(Sent {
        value,
        before,
        ignored,
    })
}

/// The request commands: sends the request, then waits for the operator to
/// acknowledge it and prints where the plan stood before and stands now.
pub(super) async fn run(ctx: &Ctx, args: &RequestArgs, action: Action) -> Result<i32, CliError> {
    let name = args.name.as_str();
    let Sent {
        value,
        before,
        ignored,
    } = send(ctx, name, action).await?;
    println!("requested {value} on releaseplan {}/{name}", ctx.namespace);

    let deadline = tokio::time::Instant::now() + args.ack_timeout;
    let after = loop {
        let plan = ctx.plan(name).await?;
        let acked = plan
            .status
            .as_ref()
            .and_then(|s| s.acknowledged_request.as_deref())
            == Some(value.as_str());
        if acked {
            break plan;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::NotAcknowledged {
                value,
                seconds: args.ack_timeout.as_secs(),
                namespace: ctx.namespace.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    if let Some(why) = ignored {
        println!("now:    {}", summary(&after));
        return Err(CliError::Ignored(why));
    }
    println!("acknowledged by the operator");
    println!("before: {}", summary(&before));
    println!("now:    {}", summary(&after));
    if let Some(m) = after.status.as_ref().and_then(|s| s.message.as_deref()) {
        println!("        {m}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::plan;
    use crate::plan::Action;

    #[test]
    fn request_value_format_round_trips() {
        let now: DateTime<Utc> = "2025-01-02T09:00:00.123Z".parse().unwrap();
        assert_eq!(
            request_value(Action::Promote { full: false }, now, 0x3f2a),
            "promote/20250102T090000.123Z-3f2a"
        );
        assert_eq!(
            request_value(Action::Promote { full: true }, now, 1),
            "promote-full/20250102T090000.123Z-0001"
        );
        for a in Action::ALL {
            let v = request_value(a, now, 7);
            assert_eq!(Request::from_annotation(&v).map(|r| r.action), Ok(a));
            assert!(v.len() <= 63, "{v}");
        }
        assert_ne!(
            request_value(Action::Abort, now, 1),
            request_value(Action::Abort, now, 2)
        );
    }

    #[test]
    fn the_operator_reads_exactly_what_the_plugin_writes() {
        use crate::controller::observe::pending_request;
        let annotated = |value: &str| {
            let mut v = crate::cli::fixtures::plan_json();
            v["metadata"]["annotations"] = json!({ANNOTATION_REQUEST: value});
            serde_json::from_value::<ReleasePlan>(v).unwrap()
        };
        let now: DateTime<Utc> = "2025-01-02T09:00:00.123Z".parse().unwrap();
        for a in Action::ALL {
            let v = request_value(a, now, 7);
            let r = pending_request(&annotated(&v)).unwrap().unwrap();
            assert_eq!((r.action, r.id.as_str()), (a, v.as_str()));
        }
        // A bare action word is still read (hand-written annotations from
        // before ids were documented keep working).
        let r = pending_request(&annotated("promote")).unwrap().unwrap();
        assert_eq!(
            (r.action, r.id.as_str()),
            (Action::Promote { full: false }, "promote")
        );
        // What names no action is not a request: acknowledged once, with a
        // Warning that lists the actions.
        for bad in ["/7", "explode/7", ""] {
            let e = pending_request(&annotated(bad)).unwrap_err();
            assert_eq!(e.raw, bad);
            for a in Action::ALL {
                assert!(e.message.contains(a.word()), "{bad:?}: {}", e.message);
            }
        }
    }

    #[test]
    fn patch_touches_metadata_only() {
        let p = request_patch("abort/x");
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {"releaseplan.io/request": "abort/x"}}})
        );
        assert!(p.get("spec").is_none());
    }

    #[test]
    fn pause_resume_notes() {
        let mut p = plan();
        assert_eq!(no_op_note(Action::Pause, &p), None);
        assert_eq!(
            no_op_note(Action::Resume, &p),
            Some("no pause request to lift")
        );
        p.spec.paused = true;
        assert!(
            no_op_note(Action::Resume, &p)
                .unwrap()
                .contains("spec.paused")
        );
        p.status.as_mut().unwrap().pause_requested = true;
        assert!(no_op_note(Action::Pause, &p).is_some());
        assert_eq!(no_op_note(Action::Resume, &p), None);
    }
}
