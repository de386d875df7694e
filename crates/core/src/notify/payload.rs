//! What receivers are sent: the message text (a minijinja template over the
//! notice's fields), and the body of each receiver kind. Pure: the operator
//! sends the bytes.
//!
//! The generic webhook's body is versioned by its `schema` field
//! ([`SCHEMA`]); fields are only ever added within a version.

use super::Notice;
use super::Trigger;
use super::config::{Format, ReceiverKind};
use serde::Serialize;
use serde_json::{Value, json};

/// Version of the generic webhook body (and of CloudEvents' `data`).
pub const SCHEMA: &str = "releaseplan.io/notification/v1";
/// Prefix of a CloudEvent's `type`; the trigger follows.
pub const CLOUDEVENT_TYPE_PREFIX: &str = "io.releaseplan.release.";
/// Content type of a CloudEvents 1.0 structured-mode request.
pub const CLOUDEVENTS_CONTENT_TYPE: &str = "application/cloudevents+json";
/// Longest message text sent (Slack's section text limit).
pub const MAX_TEXT: usize = 3000;

/// The plan a notice is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

/// A notice ready to send: the notice, its plan, its id, text and link.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Unique per transition: the plan's uid and the notice's key. A receiver
    /// may drop a second delivery of an id it has seen.
    pub id: String,
    /// The plan.
    pub plan: PlanRef,
    /// The transition and the status fields.
    #[serde(flatten)]
    pub notice: Notice,
    /// The rendered message text.
    pub text: String,
    /// Link to the plan in a dashboard (the operator's `--dashboard-url`).
    pub link: Option<String>,
}

/// The built-in message template of a trigger.
pub fn default_template(trigger: Trigger) -> &'static str {
    match trigger {
        Trigger::Paused => {
            "{{ plan.namespace }}/{{ plan.name }} paused at step {{ step }}/{{ steps }} (weight {{ weight }}%), waiting for you: kubectl releaseplan promote {{ plan.name }} -n {{ plan.namespace }} (or abort)"
        }
        Trigger::Promoted => {
            "{{ plan.namespace }}/{{ plan.name }}: revision {{ revision }} promoted{% if durationSeconds is not none %} in {{ durationSeconds // 60 }} min {{ durationSeconds % 60 }} s{% endif %}"
        }
        Trigger::RolledBack => {
            "{{ plan.namespace }}/{{ plan.name }}: rolled back{% if gate %} ({{ gate }}: {{ reason }}){% endif %}; stable revision {{ stableRevision }} serves"
        }
        Trigger::GateFailed => {
            "{{ plan.namespace }}/{{ plan.name }}: gate {{ gate }} failed at step {{ step }}/{{ steps }}: {{ message }}"
        }
        _ => "{{ plan.namespace }}/{{ plan.name }}: {{ message }}",
    }
}

fn env() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    // Message text is plain text: nothing is HTML-escaped, undefined
    // fields are errors (a typo shows at once, not as an empty string).
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env
}

/// Whether a template compiles; the error says where it does not.
pub fn check_template(text: &str) -> Result<(), String> {
    env()
        .template_from_str(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Renders `template` over `ctx`'s fields (`plan.name`, `revision`, `step`...).
pub fn render(template: &str, ctx: &impl Serialize) -> Result<String, String> {
    let text = env().render_str(template, ctx).map_err(|e| e.to_string())?;
    Ok(text.chars().take(MAX_TEXT).collect())
}

/// The dashboard link: `--dashboard-url` rendered over `namespace`, `name`
/// and `uid` of the plan.
pub fn link(template: &str, plan: &PlanRef) -> Result<String, String> {
    render(template, plan)
}

impl Message {
    /// The message of `notice` about `plan`, with `template` (the namespace's,
    /// else the built-in one) rendered. A template that fails to render
    /// falls back to the built-in one, whose fields always exist, and says so.
    pub fn new(
        plan: PlanRef,
        notice: Notice,
        template: Option<&str>,
        link: Option<String>,
    ) -> (Message, Option<String>) {
        let id = format!("{}-{}", plan.uid, notice.key());
        let mut msg = Message {
            schema: SCHEMA,
            id,
            plan,
            notice,
            text: String::new(),
            link,
        };
        let built_in = default_template(msg.notice.trigger);
        let (text, problem) = match render(template.unwrap_or(built_in), &msg) {
            Ok(t) => (t, None),
            Err(e) => (
                render(built_in, &msg).unwrap_or_else(|_| msg.notice.message.clone()),
                Some(format!(
                    "template of {} does not render: {e}",
                    msg.notice.trigger
                )),
            ),
        };
        msg.text = text;
        (msg, problem)
    }

    /// The request body for a receiver of `kind` (with `format`), and its
    /// content type.
    pub fn body(&self, kind: ReceiverKind, format: Format) -> (Value, &'static str) {
        match (kind, format) {
            (ReceiverKind::Webhook, Format::Json) => (self.json(), "application/json"),
            (ReceiverKind::Webhook, Format::CloudEvents) => {
                (self.cloud_event(), CLOUDEVENTS_CONTENT_TYPE)
            }
            (ReceiverKind::Slack, _) => (self.slack(), "application/json"),
            (ReceiverKind::Teams, _) => (self.teams(), "application/json"),
            (ReceiverKind::Alertmanager, _) => (self.alertmanager(), "application/json"),
        }
    }

    /// The generic webhook body: this message as JSON.
    pub fn json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A CloudEvents 1.0 event in structured mode, the message as `data`.
    pub fn cloud_event(&self) -> Value {
        json!({
            "specversion": "1.0",
            "id": self.id,
            "source": format!(
                "/apis/releaseplan.io/v1alpha1/namespaces/{}/releaseplans/{}",
                self.plan.namespace, self.plan.name
            ),
            "type": format!("{CLOUDEVENT_TYPE_PREFIX}{}", self.notice.trigger),
            "subject": self.notice.revision,
            "time": self.notice.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "datacontenttype": "application/json",
            "dataschema": format!("https://releaseplan.io/schemas/{SCHEMA}"),
            "data": self.json(),
        })
    }

    /// A one-line title: plan and trigger.
    pub fn title(&self) -> String {
        format!(
            "{} {}/{}: {}",
            if self.notice.trigger.is_bad() {
                "\u{1f534}"
            } else {
                "\u{1f7e2}"
            },
            self.plan.namespace,
            self.plan.name,
            self.notice.trigger
        )
    }

    /// `(label, value)` pairs shown beside the text.
    fn facts(&self) -> Vec<(&'static str, String)> {
        let n = &self.notice;
        let mut facts = vec![
            (
                "Plan",
                format!("{}/{}", self.plan.namespace, self.plan.name),
            ),
            ("Revision", n.revision.clone().unwrap_or_else(|| "-".into())),
            (
                "Step",
                format!(
                    "{}/{} (weight {}%)",
                    n.step.min(n.steps + 1),
                    n.steps,
                    n.weight
                ),
            ),
            ("Phase", n.phase.as_str().to_string()),
        ];
        if let Some(s) = &n.stable_revision {
            facts.push(("Stable", s.clone()));
        }
        if let Some(g) = &n.gate {
            let reason = n.reason.as_deref().unwrap_or("-");
            facts.push(("Reason", format!("{g}: {reason}")));
        }
        facts
    }

    /// A Slack incoming-webhook body: `text` (notifications, fallbacks) and
    /// Block Kit blocks (header, text, fields, context, link button).
    pub fn slack(&self) -> Value {
        let fields: Vec<Value> = self
            .facts()
            .into_iter()
            .map(|(k, v)| json!({"type": "mrkdwn", "text": format!("*{k}*\n{}", slack_escape(&v))}))
            .collect();
        let mut blocks = vec![
            json!({"type": "header", "text": {"type": "plain_text", "text": cut(&self.title(), 150), "emoji": true}}),
            json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(&slack_escape(&self.text), MAX_TEXT)}}),
            json!({"type": "section", "fields": fields}),
            json!({"type": "context", "elements": [{"type": "mrkdwn", "text": format!("rollout #{} \u{b7} {}", self.notice.rollout, self.id)}]}),
        ];
        if let Some(url) = &self.link {
            blocks.push(json!({"type": "actions", "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": "Open plan"},
                "url": url,
            }]}));
        }
        json!({"text": self.text, "blocks": blocks})
    }

    /// A Microsoft Teams workflow-webhook body: one Adaptive Card.
    pub fn teams(&self) -> Value {
        let facts: Vec<Value> = self
            .facts()
            .into_iter()
            .map(|(k, v)| json!({"title": k, "value": v}))
            .collect();
        let mut card = json!({
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [
                {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "wrap": true,
                 "style": "heading", "text": self.title(),
                 "color": if self.notice.trigger.is_bad() { "Attention" } else { "Good" }},
                {"type": "TextBlock", "wrap": true, "text": self.text},
                {"type": "FactSet", "facts": facts},
            ],
        });
        if let Some(url) = &self.link {
            card["actions"] = json!([{"type": "Action.OpenUrl", "title": "Open plan", "url": url}]);
        }
        json!({
            "type": "message",
            "attachments": [{
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": null,
                "content": card,
            }],
        })
    }
}

/// Slack's mrkdwn control characters, escaped as Slack asks.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
