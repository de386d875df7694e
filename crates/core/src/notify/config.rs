//! Who hears about which transitions: the namespace's ConfigMap
//! `releaseplan-notifications` (receivers, namespace-wide subscriptions,
//! message templates), which the namespace's owners edit themselves and the
//! operator reads at each delivery (no restart), and a plan's own
//! subscriptions by annotation, as Argo Rollouts has them:
//! `notifications.releaseplan.io/subscribe.<trigger>.<receiver>`.
//!
//! Receivers name their URL and token by Secret key only; the Secrets follow
//! the gates' credential rules (the operator's credentials namespace, shared
//! with the plan's namespace by `releaseplan.io/gate-namespaces`).

use super::Trigger;
use crate::api::access::SecretKeyRef;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Name of the namespace's notification ConfigMap.
pub const CONFIG_MAP: &str = "releaseplan-notifications";
/// Prefix of a plan's subscription annotations.
pub const SUBSCRIBE_PREFIX: &str = "notifications.releaseplan.io/subscribe.";
/// The trigger of a subscription to every trigger.
pub const ANY_TRIGGER: &str = "any";
/// Prefix of the ConfigMap keys holding a trigger's message template.
pub const TEMPLATE_PREFIX: &str = "template.";
/// Most receivers one namespace may configure.
pub const MAX_RECEIVERS: usize = 32;

/// What a receiver is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReceiverKind {
    /// A generic webhook: a JSON body (`format` says which).
    Webhook,
    /// A Slack (or Slack-compatible, e.g. Mattermost) incoming webhook: Block Kit.
    Slack,
    /// A Microsoft Teams workflow webhook: an Adaptive Card.
    Teams,
    /// Alertmanager's API (`<url>/api/v2/alerts`): an alert per notice.
    Alertmanager,
    /// A GitHub commit status on the plan's commit (`commit_status`): the
    /// URL is the REST API's (`https://api.github.com`, or a GitHub
    /// Enterprise Server's `https://<host>/api/v3`).
    GithubStatus,
    /// A GitLab commit status on the plan's commit: the URL is the GitLab
    /// instance's (`https://gitlab.com`); the API path follows.
    GitlabStatus,
}

/// The body of a generic webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum Format {
    /// The versioned releaseplan notification (`payload::SCHEMA`).
    #[default]
    Json,
    /// The same, as the `data` of a CloudEvents 1.0 event in structured mode.
    CloudEvents,
}

/// A value read from a Secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FromSecret {
    /// The Secret and key.
    pub secret_key_ref: SecretKeyRef,
}

/// One receiver of the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Receiver {
    /// Name subscriptions use.
    pub name: String,
    /// What it is sent.
    #[serde(rename = "type")]
    pub kind: ReceiverKind,
    /// Body of a `webhook` receiver.
    #[serde(default)]
    pub format: Format,
    /// The URL (a Secret: webhook URLs are credentials).
    pub url_from: FromSecret,
    /// A bearer token sent as `Authorization`, if the receiver wants one
    /// (required by `githubStatus` and `gitlabStatus`).
    #[serde(default)]
    pub token_from: Option<FromSecret>,
    /// The repository whose commits get statuses: `owner/name` on GitHub, a
    /// project id or `group/project` path on GitLab. Only for those kinds.
    #[serde(default)]
    pub repository: Option<String>,
}

/// A namespace-wide subscription: every plan of the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Subscription {
    triggers: Vec<String>,
    receivers: Vec<String>,
}

/// The namespace's notification settings, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotifyConfig {
    /// Receivers by name.
    pub receivers: BTreeMap<String, Receiver>,
    /// Namespace-wide subscriptions, `(trigger, receiver)`.
    pub subscriptions: BTreeSet<(Trigger, String)>,
    /// Message templates by trigger (minijinja), replacing the built-in ones.
    pub templates: BTreeMap<Trigger, String>,
    /// Templates refused as over the budget (`payload::check_budget`), by
    /// trigger, with why (naming the ConfigMap and key): their trigger's
    /// notices are sent with the built-in text, and the plan is warned.
    pub refused_templates: BTreeMap<Trigger, String>,
}

/// What is wrong with a notification setting; names the key and the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A key's YAML does not parse as the documented shape.
    #[error("ConfigMap releaseplan-notifications key {key:?}: {message}")]
    Yaml {
        /// The ConfigMap key.
        key: String,
        /// The parser's message.
        message: String,
    },
    /// A trigger name that is not one.
    #[error(
        "{place}: unknown trigger {trigger:?} (one of {}, or any)",
        trigger_names()
    )]
    UnknownTrigger {
        /// Where it is written.
        place: String,
        /// The name.
        trigger: String,
    },
    /// A subscription names a receiver the namespace does not configure.
    #[error(
        "{place}: no receiver {receiver:?} in ConfigMap releaseplan-notifications key \"receivers\""
    )]
    UnknownReceiver {
        /// Where it is written.
        place: String,
        /// The name.
        receiver: String,
    },
    /// Two receivers share a name, or there are too many.
    #[error("ConfigMap releaseplan-notifications key \"receivers\": {0}")]
    Receivers(String),
    /// A template does not compile.
    #[error("ConfigMap releaseplan-notifications key {key:?}: {message}")]
    Template {
        /// The ConfigMap key.
        key: String,
        /// The template engine's message.
        message: String,
    },
}

/// What a receiver of its kind needs: a commit status a repository and a
/// token; other kinds no repository.
fn check_receiver(r: &Receiver) -> Result<(), ConfigError> {
    use super::commit_status::{Forge, check_repository};
    let bad = |why: String| {
        Err(ConfigError::Receivers(format!(
            "receiver {:?}: {why}",
            r.name
        )))
    };
    match (Forge::of(r.kind), &r.repository) {
        (Some(_), None) => bad("a commit status receiver needs repository".into()),
        (Some(forge), Some(repo)) => match check_repository(forge, repo) {
            Err(e) => bad(e.to_string()),
            Ok(()) if r.token_from.is_none() => {
                bad("a commit status receiver needs tokenFrom (the API token)".into())
            }
            Ok(()) => Ok(()),
        },
        (None, Some(_)) => bad("repository is only for githubStatus and gitlabStatus".into()),
        (None, None) => Ok(()),
    }
}

fn trigger_names() -> String {
    Trigger::ALL
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The triggers a subscription's trigger name stands for.
fn triggers_of(place: &str, name: &str) -> Result<Vec<Trigger>, ConfigError> {
    if name == ANY_TRIGGER {
        return Ok(Trigger::ALL.to_vec());
    }
    Trigger::parse(name)
        .map(|t| vec![t])
        .ok_or_else(|| ConfigError::UnknownTrigger {
            place: place.to_string(),
            trigger: name.to_string(),
        })
}

fn yaml<T: serde::de::DeserializeOwned>(key: &str, text: &str) -> Result<T, ConfigError> {
    yaml_serde::from_str(text).map_err(|e| ConfigError::Yaml {
        key: key.to_string(),
        message: e.to_string(),
    })
}

impl NotifyConfig {
    /// Parses the ConfigMap's data: `receivers` (a YAML list), `subscriptions`
    /// (a YAML list of `{triggers, receivers}`), `template.<trigger>`. Unknown
    /// keys are errors too, so a typo is not a silent no-op.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<NotifyConfig, ConfigError> {
        let mut cfg = NotifyConfig::default();
        for (key, text) in data {
            match key.as_str() {
                "receivers" => {
                    let list: Vec<Receiver> = yaml(key, text)?;
                    if list.len() > MAX_RECEIVERS {
                        return Err(ConfigError::Receivers(format!(
                            "at most {MAX_RECEIVERS} receivers"
                        )));
                    }
                    for r in list {
                        if r.name.is_empty() || r.name.contains(['.', '/']) {
                            return Err(ConfigError::Receivers(format!(
                                "receiver name {:?} must be non-empty, without '.' or '/'",
                                r.name
                            )));
                        }
                        check_receiver(&r)?;
                        if let Some(dup) = cfg.receivers.insert(r.name.clone(), r) {
                            return Err(ConfigError::Receivers(format!(
                                "two receivers are named {:?}",
                                dup.name
                            )));
                        }
                    }
                }
                "subscriptions" => {}
                k if k.starts_with(TEMPLATE_PREFIX) => {
                    let name = k.trim_start_matches(TEMPLATE_PREFIX);
                    let trigger =
                        Trigger::parse(name).ok_or_else(|| ConfigError::UnknownTrigger {
                            place: format!("ConfigMap {CONFIG_MAP} key {k:?}"),
                            trigger: name.to_string(),
                        })?;
                    // Over the budget: refused alone (the built-in text is
                    // sent), not the whole ConfigMap.
                    if let Err(why) = super::payload::check_budget(text) {
                        cfg.refused_templates.insert(
                            trigger,
                            format!(
                                "ConfigMap {CONFIG_MAP} key {k:?} is over the notification budget ({why}): refused"
                            ),
                        );
                        continue;
                    }
                    super::payload::check_template(text).map_err(|message| {
                        ConfigError::Template {
                            key: k.to_string(),
                            message,
                        }
                    })?;
                    cfg.templates.insert(trigger, text.clone());
                }
                other => {
                    return Err(ConfigError::Yaml {
                        key: other.to_string(),
                        message: "unknown key (receivers, subscriptions, template.<trigger>)"
                            .into(),
                    });
                }
            }
        }
        if let Some(text) = data.get("subscriptions") {
            let subs: Vec<Subscription> = yaml("subscriptions", text)?;
            for (i, s) in subs.iter().enumerate() {
                let place = format!("ConfigMap {CONFIG_MAP} key \"subscriptions\" item {i}");
                for r in &s.receivers {
                    cfg.known(&place, r)?;
                }
                for t in &s.triggers {
                    for trigger in triggers_of(&place, t)? {
                        cfg.subscriptions
                            .extend(s.receivers.iter().map(|r| (trigger, r.clone())));
                    }
                }
            }
        }
        Ok(cfg)
    }

    fn known(&self, place: &str, receiver: &str) -> Result<(), ConfigError> {
        if self.receivers.contains_key(receiver) {
            Ok(())
        } else {
            Err(ConfigError::UnknownReceiver {
                place: place.to_string(),
                receiver: receiver.to_string(),
            })
        }
    }

    /// The receivers a plan's notice of `trigger` goes to: the namespace's
    /// subscriptions and the plan's annotations, each receiver once. A bad
    /// annotation is returned beside the receivers the rest select, so one
    /// typo does not silence the others.
    pub fn receivers_for<'a>(
        &'a self,
        annotations: &BTreeMap<String, String>,
        trigger: Trigger,
    ) -> (Vec<&'a Receiver>, Vec<ConfigError>) {
        let mut names: BTreeSet<&str> = self
            .subscriptions
            .iter()
            .filter(|(t, _)| *t == trigger)
            .map(|(_, r)| r.as_str())
            .collect();
        let mut problems = Vec::new();
        for key in annotations.keys() {
            let Some(rest) = key.strip_prefix(SUBSCRIBE_PREFIX) else {
                continue;
            };
            let place = format!("annotation {key}");
            let Some((t, receiver)) = rest.split_once('.') else {
                problems.push(ConfigError::UnknownTrigger {
                    place,
                    trigger: rest.to_string(),
                });
                continue;
            };
            match triggers_of(&place, t) {
                Ok(ts) if ts.contains(&trigger) => match self.known(&place, receiver) {
                    Ok(()) => {
                        names.insert(receiver);
                    }
                    Err(e) => problems.push(e),
                },
                Ok(_) => {}
                Err(e) => problems.push(e),
            }
        }
        let receivers = names
            .into_iter()
            .filter_map(|n| self.receivers.get(n))
            .collect();
        (receivers, problems)
    }
}

/// Whether a plan has any subscription annotation (then a missing ConfigMap
/// is worth a Warning: its receivers cannot exist).
pub fn subscribes(annotations: &BTreeMap<String, String>) -> bool {
    annotations.keys().any(|k| k.starts_with(SUBSCRIBE_PREFIX))
}
