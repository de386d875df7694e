//! Kubernetes Events, published beside the reconciles.
//!
//! An Event is one more round trip to the API server, and a reconcile that
//! waited for each of its Events held one of the `--concurrency` slots for
//! nothing: nothing the reconcile decides depends on them. So a reconcile only
//! queues its Events (after its status write succeeded) and one task
//! publishes them, a few at once. Each is stamped when it is queued, so the
//! Events of a plan keep the order of its transitions whatever order their
//! creates land in (one at a time, a cold start of thousands of plans left
//! the Events minutes behind the transitions they announce). An Event that
//! cannot be recorded never fails a rollout.
//!
//! Each Event is created as a new `events.k8s.io/v1` object, as kube's
//! `Recorder` does for a first occurrence, but without its series cache: the
//! Recorder keeps every Event it published for six minutes (to count repeats
//! into a series) and scans them all on each publish. Our Events announce
//! written transitions, which do not repeat as such, and a cold start of
//! 5000 plans publishes 10,000 of them: megabytes held, and a scan of
//! thousands per Event, for series that would never form.
//!
//! A create that gets no answer (a connection reset, a timeout) or a 5xx is
//! retried with backoff under the same name: a 409 then means the first one
//! landed, so a blip neither loses a transition's Event nor doubles it.

use crate::ops::metrics::Metrics;
use crate::plan::{EventIntent, EventReason, EventType};
use backon::Retryable;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType as KubeEventType, Reporter};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

/// How long a stopping operator waits for its queued Events.
const FLUSH: Duration = Duration::from_secs(5);

/// Event creates in flight at once.
const IN_FLIGHT: usize = 8;
/// How long an Event is retried after a failure that may clear (no answer,
/// 429, 5xx): longer than any blip, short enough that an API server gone for
/// good does not pile Events up.
const RETRY_FOR: Duration = Duration::from_secs(300);

/// An Event, the object it is about and when it was queued.
struct Outgoing {
    reference: ObjectReference,
    event: Event,
    at: Timestamp,
}

/// The time of an Event queued now: later than the one queued before, so two
/// Events of one object never get the same name or the same time.
fn stamp() -> Timestamp {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = Timestamp::now().as_nanosecond();
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    let prev = LAST
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        .unwrap_or(now);
    let at = now.max(prev.saturating_add(1));
    Timestamp::from_nanosecond(i128::from(at)).unwrap_or_else(|_| Timestamp::now())
}

/// The queue of Events to publish; cheap to use from any reconcile.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::UnboundedSender<Outgoing>,
}

/// The task that publishes the queued Events; see [`Publisher::flush`].
pub struct Publisher {
    task: JoinHandle<()>,
}

impl Events {
    /// The queue, and the task publishing from it through `client` as
    /// `reporter`.
    pub fn start(client: Client, reporter: Reporter, metrics: Arc<Metrics>) -> (Events, Publisher) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        let queued = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let task = tokio::spawn(queued.for_each_concurrent(IN_FLIGHT, move |o| {
            let (client, reporter, metrics) =
                (client.clone(), reporter.clone(), Arc::clone(&metrics));
            async move {
                let event = to_k8s(&reporter, &o.event, o.reference, o.at);
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<K8sEvent> = Api::namespaced(client, &ns);
                let params = PostParams::default();
                let create = || api.create(&params, &event);
                let tries = crate::ops::backoff::event(RETRY_FOR);
                let res = create
                    .retry(tries)
                    .sleep(tokio::time::sleep)
                    .when(retried)
                    .notify(|e, wait| {
                        tracing::debug!(error = %e, reason = %o.event.reason, retry_in = ?wait, "event not recorded yet");
                    })
                    .await;
                match res {
                    Ok(_) => metrics.write("event"),
                    // The same name: an earlier try landed, its answer was lost.
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => {
                        warn!(error = %e, reason = %o.event.reason, "could not record event");
                    }
                }
            }
        }));
        (Events { tx }, Publisher { task })
    }

    /// Queues the Events a written decision announces.
    pub fn planned(&self, reference: &ObjectReference, events: &[EventIntent]) {
        for e in events {
            self.send(reference, e.type_, e.reason, &e.message);
        }
    }

    /// Queues one Event, its `action` what the operator did
    /// ([`EventReason::action`]). Every Event is a new object (named by its
    /// time), so distinct messages are never folded into one series.
    pub fn send(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: EventReason,
        note: &str,
    ) {
        let event = Event {
            type_: match type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.action().to_string(),
            secondary: None,
        };
        // The publisher stops only after every sender is gone.
        let _ = self.tx.send(Outgoing {
            reference: reference.clone(),
            event,
            at: stamp(),
        });
    }
}

impl Publisher {
    /// Waits until the Events queued so far are published (the queue closes
    /// once the controller and its context are gone), for a few seconds at
    /// most: an API server that is gone must not hold up a shutdown.
    pub async fn flush(self) {
        if tokio::time::timeout(FLUSH, self.task).await.is_err() {
            warn!("stopped before every Event was published");
        }
    }
}

/// Whether a failed create may succeed when tried again: no answer, or the
/// API server busy or failing (429, 5xx).
fn retried(e: &kube::Error) -> bool {
    super::error::is_transport(e)
        || matches!(e, kube::Error::Api(s) if s.code == 429 || s.code >= 500)
}

/// The Event object for `ev` about `reference`, named `<object>.<time in
/// hex nanoseconds>` like kube's `Recorder` names a new one.
fn to_k8s(reporter: &Reporter, ev: &Event, reference: ObjectReference, now: Timestamp) -> K8sEvent {
    let object = reference
        .name
        .clone()
        .unwrap_or_else(|| reporter.controller.clone());
    K8sEvent {
        metadata: ObjectMeta {
            namespace: reference.namespace.clone(),
            name: Some(format!("{object}.{:x}", now.as_nanosecond())),
            ..ObjectMeta::default()
        },
        action: Some(ev.action.clone()),
        reason: Some(ev.reason.clone()),
        note: ev.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference),
        related: ev.secondary.clone(),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(
            match ev.type_ {
                KubeEventType::Normal => "Normal",
                KubeEventType::Warning => "Warning",
            }
            .into(),
        ),
        ..K8sEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_queued_in_a_row_get_distinct_increasing_times() {
        let times: Vec<i128> = (0..1000).map(|_| stamp().as_nanosecond()).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn event_actions_say_what_the_operator_did() {
        for r in EventReason::ALL {
            let a = r.action();
            // Kubernetes keeps an action of at most 128 characters; a verb,
            // never a hash or a message.
            assert!(
                a.len() <= 128 && a.starts_with(char::is_uppercase),
                "{r}: {a}"
            );
            assert!(a.chars().all(|c| c.is_ascii_alphabetic()), "{r}: {a}");
        }
        assert_eq!(EventReason::RollbackStarted.action(), "StartRollback");
    }

    #[test]
    fn events_are_new_objects_about_the_plan() {
        let reporter = Reporter {
            controller: "releaseplan".into(),
            instance: Some("pod-1".into()),
        };
        let ev = Event {
            type_: KubeEventType::Warning,
            reason: "RolledBack".into(),
            note: Some("gate failed".into()),
            action: EventReason::RolledBack.action().into(),
            secondary: None,
        };
        let reference = ObjectReference {
            kind: Some("ReleasePlan".into()),
            name: Some("shop".into()),
            namespace: Some("prod".into()),
            ..ObjectReference::default()
        };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let e = to_k8s(&reporter, &ev, reference.clone(), now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(
            e.metadata.name,
            Some(format!("shop.{:x}", now.as_nanosecond()))
        );
        assert_eq!(e.regarding, Some(reference));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("RolledBack"));
        assert_eq!(e.note.as_deref(), Some("gate failed"));
        assert_eq!(e.reporting_instance.as_deref(), Some("pod-1"));
        assert!(e.series.is_none() && e.event_time.is_some());
    }
}
