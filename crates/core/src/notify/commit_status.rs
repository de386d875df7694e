//! Commit statuses: the receiver CI pipelines ask for most. The commit that
//! started a release shows it as pending while it rolls out, then success or
//! failure, on GitHub (`POST /repos/{owner}/{repo}/statuses/{sha}`) or GitLab
//! (`POST /api/v4/projects/{id}/statuses/{sha}`), one status per plan (its
//! context), overwritten at each transition as both forges do for a context.
//!
//! The commit is the plan's annotation [`COMMIT_ANNOTATION`], which the
//! pipeline that applies the plan sets (beside the new image). A transition
//! is marked on the commit of the revision it is about: the notifier
//! remembers the commit each revision started with, so a rollout superseded
//! by a newer commit is marked on its own commit, not on the newer one.

use super::Trigger;
use super::config::ReceiverKind;
use super::payload::Message;
use serde_json::{Value, json};

/// The plan annotation naming the commit a release comes from.
pub const COMMIT_ANNOTATION: &str = "releaseplan.io/commit";
/// Longest description GitHub accepts (GitLab takes more).
pub const MAX_DESCRIPTION: usize = 140;

/// Which forge a commit-status receiver speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    /// GitHub and GitHub Enterprise Server's REST API.
    GitHub,
    /// GitLab's REST API v4.
    GitLab,
}

impl Forge {
    /// The forge of a receiver kind; `None` for other receivers.
    pub fn of(kind: ReceiverKind) -> Option<Forge> {
        match kind {
            ReceiverKind::GithubStatus => Some(Forge::GitHub),
            ReceiverKind::GitlabStatus => Some(Forge::GitLab),
            _ => None,
        }
    }

    /// The state a transition sets on the commit; `None`: the transition
    /// sets none (a deletion held). GitLab's statuses are a state machine: a
    /// running status cannot be set to running again (GitLab answers 400),
    /// so only the start, the end and a failure are marked there, each once;
    /// GitHub keeps every status, so each transition updates its description.
    pub fn state(self, trigger: Trigger) -> Option<&'static str> {
        use Trigger as T;
        match (self, trigger) {
            (Forge::GitHub, T::RolloutStarted | T::StepAdvanced | T::Paused) => Some("pending"),
            (Forge::GitLab, T::RolloutStarted) => Some("running"),
            (_, T::Promoted) => Some("success"),
            (Forge::GitHub, T::GateFailed | T::Halted | T::RollbackStarted | T::RolledBack) => {
                Some("failure")
            }
            // The failure once: a rollback's start (its end follows), or a
            // halt (a person decides); the gate that failed comes just before
            // either of them.
            (Forge::GitLab, T::RollbackStarted | T::Halted) => Some("failed"),
            (Forge::GitHub, T::Superseded) => Some("error"),
            (Forge::GitLab, T::Superseded) => Some("canceled"),
            // A deletion held, and GitLab's repeats.
            (_, T::DeletionBlocked)
            | (Forge::GitLab, T::StepAdvanced | T::Paused | T::GateFailed | T::RolledBack) => None,
        }
    }
}

/// What is wrong with a repository or commit; names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The receiver's repository is not `owner/name` (GitHub) or a
    /// project id or path (GitLab).
    #[error("repository {0:?} is not {1}")]
    Repository(String, &'static str),
    /// The annotation is not a commit hash.
    #[error("annotation {COMMIT_ANNOTATION} is {0:?}, not a commit hash (7 to 64 hex digits)")]
    Commit(String),
}

fn name_part(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks a receiver's `repository` for its forge.
pub fn check_repository(forge: Forge, repository: &str) -> Result<(), CommitError> {
    let parts: Vec<&str> = repository.split('/').collect();
    let ok = match forge {
        Forge::GitHub => parts.len() == 2 && parts.iter().all(|p| name_part(p)),
        // A numeric project id, or a path of groups and the project.
        Forge::GitLab => {
            repository.chars().all(|c| c.is_ascii_digit()) && !repository.is_empty()
                || parts.len() >= 2 && parts.iter().all(|p| name_part(p))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(CommitError::Repository(
            repository.to_string(),
            match forge {
                Forge::GitHub => "owner/name",
                Forge::GitLab => "a project id or group/project path",
            },
        ))
    }
}

/// The commit of an annotation's value, lowercase; refused unless hex.
pub fn commit_of(value: &str) -> Result<String, CommitError> {
    let v = value.trim();
    if (7..=64).contains(&v.len()) && v.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(v.to_ascii_lowercase())
    } else {
        Err(CommitError::Commit(value.chars().take(80).collect()))
    }
}

/// The request path below the receiver's API URL, for `commit` of
/// `repository` (checked by [`check_repository`] and [`commit_of`]).
pub fn path(forge: Forge, repository: &str, commit: &str) -> String {
    match forge {
        Forge::GitHub => format!("repos/{repository}/statuses/{commit}"),
        // A project path is one URL-encoded segment.
        Forge::GitLab => format!(
            "api/v4/projects/{}/statuses/{commit}",
            repository.replace('/', "%2F")
        ),
    }
}

/// The status's name: one per plan, so two plans released from one commit
/// show side by side.
pub fn context(message: &Message) -> String {
    format!(
        "releaseplan/{}/{}",
        message.plan.namespace, message.plan.name
    )
}

/// One line: what happened, cut to what GitHub accepts.
fn description(message: &Message) -> String {
    let n = &message.notice;
    let what = match n.trigger {
        Trigger::RolloutStarted => "rollout started".to_string(),
        Trigger::StepAdvanced => format!(
            "step {}/{} at {}%",
            n.step.min(n.steps + 1),
            n.steps,
            n.weight
        ),
        Trigger::Paused => format!(
            "waits at step {}/{} for a person",
            n.step.min(n.steps + 1),
            n.steps
        ),
        Trigger::Promoted => "promoted: the new revision is stable".to_string(),
        Trigger::Superseded => "superseded by a newer revision".to_string(),
        Trigger::DeletionBlocked => "deletion blocked".to_string(),
        Trigger::GateFailed | Trigger::Halted | Trigger::RollbackStarted | Trigger::RolledBack => {
            let why = match (&n.gate, &n.reason) {
                (Some(g), Some(r)) => format!(" ({g}: {r})"),
                (Some(g), None) => format!(" ({g})"),
                _ => String::new(),
            };
            let t = match n.trigger {
                Trigger::GateFailed => "gate failed",
                Trigger::Halted => "halted, waits for a person",
                Trigger::RollbackStarted => "rolling back",
                _ => "rolled back",
            };
            format!("{t}{why}")
        }
    };
    let text = format!("{what}, {}", n.revision.as_deref().unwrap_or("-"));
    if text.chars().count() <= MAX_DESCRIPTION {
        text
    } else {
        let mut cut: String = text.chars().take(MAX_DESCRIPTION - 1).collect();
        cut.push('\u{2026}');
        cut
    }
}

/// The JSON body of the status; `None` when the transition sets none.
pub fn body(forge: Forge, message: &Message) -> Option<Value> {
    let state = forge.state(message.notice.trigger)?;
    let mut b = match forge {
        Forge::GitHub => json!({
            "state": state,
            "context": context(message),
            "description": description(message),
        }),
        Forge::GitLab => json!({
            "state": state,
            "name": context(message),
            "description": description(message),
        }),
    };
    if let Some(link) = &message.link {
        b["target_url"] = Value::String(link.clone());
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Phase;
    use crate::notify::Notice;
    use crate::notify::payload::PlanRef;

    fn message(trigger: Trigger, link: Option<&str>) -> Message {
        let notice = Notice {
            trigger,
            rollout: 2,
            phase: Phase::RollingOut,
            revision: Some("5d8f7c".into()),
            stable_revision: Some("77aa01".into()),
            step: 2,
            steps: 3,
            weight: 25,
            gate: Some("errors".into()),
            reason: Some("Threshold".into()),
            message: String::new(),
            started_at: None,
            at: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            duration_seconds: None,
            analysis: None,
        };
        let plan = PlanRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u".into(),
        };
        Message::new(plan, notice, None, link.map(str::to_string)).0
    }

    #[test]
    fn states_follow_each_forges_vocabulary() {
        for t in Trigger::ALL {
            if let Some(s) = Forge::GitHub.state(*t) {
                assert!(
                    ["pending", "success", "failure", "error"].contains(&s),
                    "{t}: {s}"
                );
            }
            if let Some(s) = Forge::GitLab.state(*t) {
                assert!(
                    ["pending", "running", "success", "failed", "canceled"].contains(&s),
                    "{t}: {s}"
                );
            }
            // A bad transition never reads as success.
            if t.is_bad() && *t != Trigger::DeletionBlocked {
                assert_eq!(Forge::GitHub.state(*t), Some("failure"), "{t}");
                assert_ne!(Forge::GitLab.state(*t), Some("success"), "{t}");
            }
        }
        assert_eq!(Forge::GitHub.state(Trigger::Promoted), Some("success"));
        assert_eq!(Forge::GitLab.state(Trigger::Superseded), Some("canceled"));
        // GitLab: each of a rollout's sequences sets no state twice in a row.
        use Trigger as T;
        for seq in [
            &[
                T::RolloutStarted,
                T::StepAdvanced,
                T::Paused,
                T::StepAdvanced,
                T::Promoted,
            ][..],
            &[
                T::RolloutStarted,
                T::StepAdvanced,
                T::GateFailed,
                T::RollbackStarted,
                T::RolledBack,
            ],
            &[T::RolloutStarted, T::GateFailed, T::Halted],
            &[T::RolloutStarted, T::StepAdvanced, T::Superseded],
        ] {
            let states: Vec<&str> = seq.iter().filter_map(|t| Forge::GitLab.state(*t)).collect();
            assert!(
                states.windows(2).all(|w| w[0] != w[1]),
                "{seq:?}: {states:?}"
            );
            assert_eq!(states.len(), 2, "{seq:?}: {states:?}");
        }
    }

    #[test]
    fn bodies_carry_state_context_description_and_link() {
        let m = message(Trigger::RolledBack, Some("https://dash.example/shop/web"));
        let gh = body(Forge::GitHub, &m).unwrap();
        assert_eq!(gh["state"], "failure");
        assert_eq!(gh["context"], "releaseplan/shop/web");
        assert_eq!(gh["description"], "rolled back (errors: Threshold), 5d8f7c");
        assert_eq!(gh["target_url"], "https://dash.example/shop/web");
        let gl = body(Forge::GitLab, &message(Trigger::RolloutStarted, None)).unwrap();
        assert_eq!(gl["state"], "running");
        assert_eq!(gl["name"], "releaseplan/shop/web");
        assert_eq!(gl["description"], "rollout started, 5d8f7c");
        let gh = body(Forge::GitHub, &message(Trigger::StepAdvanced, None)).unwrap();
        assert_eq!(gh["description"], "step 2/3 at 25%, 5d8f7c");
        assert!(body(Forge::GitLab, &message(Trigger::StepAdvanced, None)).is_none());
        assert!(gl.get("target_url").is_none());
        assert!(body(Forge::GitHub, &message(Trigger::DeletionBlocked, None)).is_none());
        let mut long = message(Trigger::GateFailed, None);
        long.notice.reason = Some("x".repeat(300));
        let d = body(Forge::GitHub, &long).unwrap()["description"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(d.chars().count(), MAX_DESCRIPTION);
    }

    #[test]
    fn repositories_and_commits_are_checked() {
        assert!(check_repository(Forge::GitHub, "acme/shop").is_ok());
        assert!(check_repository(Forge::GitHub, "acme/shop/x").is_err());
        assert!(check_repository(Forge::GitHub, "acme/../x").is_err());
        assert!(check_repository(Forge::GitHub, "acme").is_err());
        assert!(check_repository(Forge::GitLab, "1234").is_ok());
        assert!(check_repository(Forge::GitLab, "group/sub/shop").is_ok());
        assert!(check_repository(Forge::GitLab, "group/a b").is_err());
        assert_eq!(commit_of(" ABCDEF1 ").unwrap(), "abcdef1");
        assert!(commit_of("main").is_err());
        assert!(commit_of("abc").is_err());
        assert_eq!(
            path(Forge::GitLab, "group/shop", "abcdef1"),
            "api/v4/projects/group%2Fshop/statuses/abcdef1"
        );
        assert_eq!(
            path(Forge::GitHub, "acme/shop", "abcdef1"),
            "repos/acme/shop/statuses/abcdef1"
        );
    }
}
