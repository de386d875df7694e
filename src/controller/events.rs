//! Kubernetes Events, published beside the reconciles.
//!
//! An Event is one more round trip to the API server, and a reconcile that
//! waited for each of its Events held one of the `--concurrency` slots for
//! nothing: nothing the reconcile decides depends on them. So a reconcile only
//! queues its Events (after its status write succeeded) and one task
//! publishes them, in the order they were queued. An Event that cannot be
//! recorded never fails a rollout.

use crate::ops::metrics::Metrics;
use crate::plan::{EventIntent, EventReason, EventType};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

/// How long a stopping operator waits for its queued Events.
const FLUSH: Duration = Duration::from_secs(5);

/// An Event and the object it is about.
struct Outgoing {
    reference: ObjectReference,
    event: Event,
}

/// The queue of Events to publish; cheap to use from any reconcile.
pub struct Events {
    tx: mpsc::UnboundedSender<Outgoing>,
}

/// The task that publishes the queued Events; see [`Publisher::flush`].
pub struct Publisher {
    task: JoinHandle<()>,
}

impl Events {
    /// The queue, and the task publishing from it with `recorder`.
    pub fn start(recorder: Recorder, metrics: Arc<Metrics>) -> (Events, Publisher) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        let task = tokio::spawn(async move {
            while let Some(o) = rx.recv().await {
                match recorder.publish(&o.event, &o.reference).await {
                    Ok(()) => metrics.write("event"),
                    Err(e) => {
                        warn!(error = %e, reason = %o.event.reason, "could not record event");
                    }
                }
            }
        });
        (Events { tx }, Publisher { task })
    }

    /// Queues the Events a written decision announces.
    pub fn planned(&self, reference: &ObjectReference, events: &[EventIntent]) {
        for e in events {
            self.send(reference, e.type_, e.reason, &e.message, &e.message);
        }
    }

    /// Queues one Event. `key` tells Events apart: the recorder merges
    /// Events with the same reason and action into one series that keeps the
    /// first note, so the action is keyed on it and only true repeats merge.
    pub fn send(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: EventReason,
        note: &str,
        key: &str,
    ) {
        let event = Event {
            type_: match type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action(reason.as_str(), key),
            secondary: None,
        };
        // The publisher stops only after every sender is gone.
        let _ = self.tx.send(Outgoing {
            reference: reference.clone(),
            event,
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

/// `<reason>-<hash of the message>`: distinct messages make distinct events.
fn action(reason: &str, message: &str) -> String {
    let h = crate::api::revision::hash_value(&serde_json::Value::String(message.to_string()));
    format!("{}-{h}", reason.chars().take(100).collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_actions_differ_by_message() {
        assert_ne!(
            action("StepAdvanced", "step 1"),
            action("StepAdvanced", "step 2")
        );
        assert_eq!(
            action("StepAdvanced", "step 1"),
            action("StepAdvanced", "step 1")
        );
        assert!(action(&"R".repeat(300), "m").len() <= 128);
    }
}
