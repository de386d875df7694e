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

/// Longest template accepted, in bytes: `template.<trigger>` is written by
/// anyone who can edit the namespace's ConfigMap, and the operator serves
/// every namespace.
pub const MAX_TEMPLATE_BYTES: usize = 4096;
/// Instructions of the template engine one render may run (minijinja's
/// fuel): a deterministic time budget. The built-in texts take under 100.
pub const FUEL: u64 = 10_000;
/// Most bytes one render may write before it is stopped (the text sent is
/// cut to [`MAX_TEXT`] characters anyway).
pub const MAX_RENDERED_BYTES: usize = 16 * 1024;
/// Most items of `range()` in a template.
pub const MAX_RANGE: usize = 100;
/// The only statements a template may hold: no `set`, `macro`, `call`,
/// `filter` or `include`, which build text in memory, out of the output's
/// reach.
const STATEMENTS: [&str; 6] = ["if", "elif", "else", "endif", "for", "endfor"];

/// The template engine of notification texts. Tenants write the templates
/// and one operator renders them for every namespace, so it holds only what
/// cannot grow a value past its inputs: no filter that repeats, joins,
/// replaces, pads or lists (`join`, `replace`, `indent`, `format`, `list`,
/// `tojson`...), `range()` of at most [`MAX_RANGE`] items, the tests, and a
/// [`FUEL`] budget. With the statements and operators [`check_budget`]
/// refuses, the largest value a render can build is a few times the
/// template's size, and its time is bounded by the fuel.
fn env() -> minijinja::Environment<'static> {
    use minijinja::{filters as f, tests as t};
    let mut env = minijinja::Environment::empty();
    // Message text is plain text: nothing is HTML-escaped, undefined
    // fields are errors (a typo shows at once, not as an empty string).
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.add_filter("upper", f::upper);
    env.add_filter("lower", f::lower);
    env.add_filter("title", f::title);
    env.add_filter("capitalize", f::capitalize);
    env.add_filter("trim", f::trim);
    env.add_filter("default", f::default);
    env.add_filter("d", f::default);
    env.add_filter("length", f::length);
    env.add_filter("count", f::length);
    env.add_filter("round", f::round);
    env.add_filter("abs", f::abs);
    env.add_filter("int", f::int);
    env.add_filter("float", f::float);
    env.add_filter("first", f::first);
    env.add_filter("last", f::last);
    env.add_test("none", t::is_none);
    env.add_test("defined", t::is_defined);
    env.add_test("undefined", t::is_undefined);
    env.add_test("number", t::is_number);
    env.add_test("string", t::is_string);
    env.add_test("true", t::is_true);
    env.add_test("false", t::is_false);
    env.add_test("odd", t::is_odd);
    env.add_test("even", t::is_even);
    env.add_test("divisibleby", t::is_divisibleby);
    env.add_test("eq", t::is_eq);
    env.add_test("ne", t::is_ne);
    env.add_test("lt", t::is_lt);
    env.add_test("le", t::is_le);
    env.add_test("gt", t::is_gt);
    env.add_test("ge", t::is_ge);
    env.add_test("in", t::is_in);
    env.add_test("startingwith", t::is_startingwith);
    env.add_test("endingwith", t::is_endingwith);
    env.add_function("range", range);
    env
}

/// minijinja's `range()`, refused past [`MAX_RANGE`] items.
fn range(
    lower: isize,
    upper: Option<isize>,
    step: Option<isize>,
) -> Result<minijinja::Value, minijinja::Error> {
    let r = minijinja::functions::range(lower, upper, step)?;
    if r.len().is_some_and(|n| n > MAX_RANGE) {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("range() of more than {MAX_RANGE} items is over the notification budget"),
        ));
    }
    Ok(r)
}

/// Whether a template stays within the budget before it is compiled: at
/// most [`MAX_TEMPLATE_BYTES`], only the statements `if` and `for` (with
/// their `elif`, `else`, `end…`), and no `*` operator (string and list
/// repetition). The error says what is over.
pub fn check_budget(text: &str) -> Result<(), String> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_TEMPLATE_BYTES} allowed",
            text.len()
        ));
    }
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = match after.chars().next() {
            Some('{') => "}}",
            Some('%') => "%}",
            Some('#') => "#}",
            _ => {
                rest = after;
                continue;
            }
        };
        let body = &after[1..];
        let end = tag_end(body, close).unwrap_or(body.len());
        let inside = &body[..end];
        if close == "%}" {
            let word: String = inside
                .trim_start_matches(['-', '+'])
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !STATEMENTS.contains(&word.as_str()) {
                return Err(format!(
                    "statement {{% {word} %}} is not allowed (only if and for)"
                ));
            }
        }
        if close != "#}" && outside_strings(inside).any(|c| c == '*') {
            return Err("the * operator (repetition) is not allowed".into());
        }
        rest = body.get(end + close.len()..).unwrap_or_default();
    }
    Ok(())
}

/// Where a scan of a tag's body is: inside a string literal (its quote, and
/// whether the last character escaped the next) or not.
#[derive(Default)]
struct Literals {
    quote: Option<char>,
    escaped: bool,
}

impl Literals {
    /// Takes the next character; whether it is code (outside a string
    /// literal and not one of its quotes).
    fn code(&mut self, c: char) -> bool {
        match self.quote {
            Some(q) => {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == q {
                    self.quote = None;
                }
                false
            }
            None if c == '"' || c == '\'' => {
                self.quote = Some(c);
                false
            }
            None => true,
        }
    }
}

/// Where a tag's body ends: the first `close` outside a string literal.
fn tag_end(body: &str, close: &str) -> Option<usize> {
    let mut literals = Literals::default();
    body.char_indices()
        .find(|&(i, c)| literals.code(c) && body[i..].starts_with(close))
        .map(|(i, _)| i)
}

/// The characters of a tag's body outside string literals.
fn outside_strings(body: &str) -> impl Iterator<Item = char> + '_ {
    let mut literals = Literals::default();
    body.chars().filter(move |&c| literals.code(c))
}

/// Whether a template is within the budget and compiles; the error says
/// what is over or where it does not compile.
pub fn check_template(text: &str) -> Result<(), String> {
    check_budget(text).map_err(|e| format!("over the notification budget: {e}"))?;
    env()
        .template_from_str(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Output past [`MAX_RENDERED_BYTES`]: the render stops there.
#[derive(Debug, thiserror::Error)]
#[error("the text is longer than {MAX_RENDERED_BYTES} bytes")]
struct TooLong;

/// Where a render writes: refuses bytes past [`MAX_RENDERED_BYTES`].
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            return Err(std::io::Error::other(TooLong));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Renders `template` over `ctx`'s fields (`plan.name`, `revision`, `step`...)
/// within the budget: its size and statements ([`check_budget`]), [`FUEL`]
/// and [`MAX_RENDERED_BYTES`]. The error says which budget was exceeded.
pub fn render(template: &str, ctx: &impl Serialize) -> Result<String, String> {
    check_budget(template).map_err(|e| format!("over the notification budget: {e}"))?;
    let env = env();
    let tmpl = env.template_from_str(template).map_err(|e| e.to_string())?;
    let mut out = Capped(Vec::new());
    if let Err(e) = tmpl.render_captured_to(ctx, &mut out) {
        return Err(match e.kind() {
            minijinja::ErrorKind::OutOfFuel => {
                format!("over the notification budget: more than {FUEL} template instructions")
            }
            minijinja::ErrorKind::WriteFailure => format!(
                "over the notification budget: the text is longer than {MAX_RENDERED_BYTES} bytes"
            ),
            _ => e.to_string(),
        });
    }
    let text = String::from_utf8_lossy(&out.0);
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
                    "ConfigMap {} key \"{}{}\" (template of {}) does not render: {e}",
                    super::config::CONFIG_MAP,
                    super::config::TEMPLATE_PREFIX,
                    msg.notice.trigger,
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
            (ReceiverKind::GithubStatus, _) => (
                super::commit_status::body(super::commit_status::Forge::GitHub, self)
                    .unwrap_or(Value::Null),
                "application/json",
            ),
            (ReceiverKind::GitlabStatus, _) => (
                super::commit_status::body(super::commit_status::Forge::GitLab, self)
                    .unwrap_or(Value::Null),
                "application/json",
            ),
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
        if let Some(a) = &n.analysis {
            facts.push(("Analysis", a.summary()));
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
                // No `style: heading`: that is schema 1.5, and the card is
                // 1.4, what every Teams client renders (the Adaptive Cards
                // SDK refuses it: tests/it/notifications.rs).
                {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "wrap": true,
                 "text": self.title(),
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
