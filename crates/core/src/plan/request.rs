//! Plugin requests as the core knows them: the request annotation
//! (`<action>/<id>`, written by the plugin and the dashboard, read by the
//! operator) and the rule of when a request applies (the machine ignores it
//! otherwise, and the plugin warns before sending it). One home, so the two
//! sides cannot drift.

use crate::api::{ANNOTATION_REQUEST, Phase, ReleasePlanStatus};

/// A plugin request, as the annotation `releaseplan.io/request:
/// <action>/<id>` carries it: written with [`Request::new`] and
/// [`Request::to_annotation`], read with [`Request::from_annotation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The annotation's whole value, `<action>/<id>`: unique per request.
    /// `status.acknowledgedRequest` records it once applied, and an
    /// acknowledged value is never applied again.
    pub id: String,
    /// What is asked.
    pub action: Action,
}

/// A request annotation that could not be parsed: acknowledged once, with a
/// Warning, so it is neither retried nor silently dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRequest {
    /// The annotation's value, acknowledged as it is.
    pub raw: String,
    /// Why it is not a request.
    pub message: String,
}

impl Request {
    /// A request of `action` whose `<id>` is `unique` (not empty, and unique
    /// to this request: the plugin takes the time and a nonce).
    pub fn new(action: Action, unique: &str) -> Request {
        Request {
            id: format!("{}/{unique}", action.word()),
            action,
        }
    }

    /// The annotation's value, `<action>/<id>`.
    pub fn to_annotation(&self) -> &str {
        &self.id
    }

    /// Reads the annotation's value: an action word ([`Action::word`]), then
    /// `/` and an id. A bare action word is read too, as it always was (a
    /// hand-written `promote` keeps working), though without an id the same
    /// value cannot be asked twice: once acknowledged it is not applied again.
    pub fn from_annotation(raw: &str) -> Result<Request, InvalidRequest> {
        let word = raw.split_once('/').map_or(raw, |(word, _)| word);
        let parsed = Action::parse(word);
        let request = parsed.map(|action| Request {
            id: raw.to_string(),
            action,
        });
        request.ok_or_else(|| {
            let words: Vec<&str> = Action::ALL
                .iter()
                .chain(&[Action::OverrideWindow])
                .map(|a| a.word())
                .collect();
            InvalidRequest {
                raw: raw.to_string(),
                message: format!(
                    "invalid request {raw:?} in annotation {ANNOTATION_REQUEST}: expected <action>/<id>, where <action> is one of {} and <id> is unique to the request",
                    words.join(", ")
                ),
            }
        })
    }
}

/// A request made through the plugin, applied exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Skip the current pause or step; with `full`, go straight to 100%.
    Promote {
        /// Go to 100% at once.
        full: bool,
    },
    /// Roll back now.
    Abort,
    /// Roll out the desired revision again after a rollback or a failure.
    Retry,
    /// Hold the rollout.
    Pause,
    /// Lift a pause request.
    Resume,
    /// Promote through a closed release window or a freeze, once: start a
    /// held rollout, or take one step of a held one (`promote
    /// --override-window`). Not in [`Action::ALL`]: no dashboard button or
    /// Argo CD action offers it, only the plugin (audited by a Warning Event).
    OverrideWindow,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 6] = [
        Action::Promote { full: false },
        Action::Promote { full: true },
        Action::Abort,
        Action::Retry,
        Action::Pause,
        Action::Resume,
    ];

    /// The action word of the annotation (`<word>/<id>`).
    pub fn word(self) -> &'static str {
        match self {
            Action::Promote { full: false } => "promote",
            Action::Promote { full: true } => "promote-full",
            Action::Abort => "abort",
            Action::Retry => "retry",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::OverrideWindow => "override-window",
        }
    }

    /// Parses a request's action word, as [`Action::word`] prints it.
    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL
            .into_iter()
            .chain([Action::OverrideWindow])
            .find(|a| a.word() == s)
    }

    /// Whether the request applies to a plan in this state; the machine
    /// ignores (and reports) one that does not. Pause and resume always
    /// apply; promote only while rolling out and not halted; abort only while
    /// rolling out; retry after a rollback or while halted on a failure.
    pub fn applies_in(self, status: &ReleasePlanStatus) -> Result<(), NotApplicable> {
        let phase = status.phase;
        let halted = status.is_halted();
        let applies = match self {
            Action::Pause | Action::Resume => true,
            Action::Promote { .. } => phase == Phase::RollingOut && !halted,
            Action::Abort => phase == Phase::RollingOut,
            Action::Retry => phase == Phase::RolledBack || halted || status.awaits_decision(),
            // Also where a held rollout waits to start.
            Action::OverrideWindow => {
                (phase == Phase::RollingOut && !halted)
                    || matches!(phase, Phase::Stable | Phase::RolledBack)
            }
        };
        if applies {
            Ok(())
        } else {
            Err(NotApplicable {
                action: self,
                phase,
                halted,
            })
        }
    }
}

/// Why a request does not apply; its text says what would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotApplicable {
    /// The request.
    pub action: Action,
    /// The plan's phase.
    pub phase: Phase,
    /// The rollout is halted on a failure.
    pub halted: bool,
}

impl std::fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (word, phase) = (self.action.word(), self.phase);
        match self.action {
            Action::Promote { .. } if self.halted => write!(
                f,
                "{word} does not apply: the rollout is halted on a failure; use `retry` to re-run the step or `abort` to roll back"
            ),
            Action::Retry => write!(
                f,
                "retry applies only when RolledBack, when a rollout is halted on a failure or when it waits on an inconclusive gate; the plan is {phase}"
            ),
            Action::OverrideWindow => write!(
                f,
                "{word} applies only while RollingOut (not halted) or to a rollout held before it starts; the plan is {phase}"
            ),
            _ => write!(
                f,
                "{word} applies only while RollingOut; the plan is {phase}"
            ),
        }
    }
}

impl std::error::Error for NotApplicable {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Failure;

    #[test]
    fn words_round_trip() {
        for a in Action::ALL {
            assert_eq!(Action::parse(a.word()), Some(a));
        }
        assert_eq!(Action::parse("explode"), None);
    }

    #[test]
    fn annotations_round_trip() {
        for a in Action::ALL {
            let r = Request::new(a, "20250102T090000.123Z-0007");
            assert_eq!(
                r.to_annotation(),
                format!("{}/20250102T090000.123Z-0007", a.word())
            );
            assert_eq!(Request::from_annotation(r.to_annotation()), Ok(r));
        }
        // The id may hold a slash: only the first one separates.
        let r = Request::from_annotation("abort/argocd/42").unwrap();
        assert_eq!(
            (r.action, r.id.as_str()),
            (Action::Abort, "abort/argocd/42")
        );
        // A bare word, as written by hand before ids were documented.
        let r = Request::from_annotation("promote").unwrap();
        assert_eq!(
            (r.action, r.id.as_str()),
            (Action::Promote { full: false }, "promote")
        );
        for bad in ["/1", "explode/1", "Promote/1", ""] {
            let e = Request::from_annotation(bad).unwrap_err();
            assert_eq!(e.raw, bad);
            assert!(
                e.message
                    .contains("promote, promote-full, abort, retry, pause, resume"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn override_window_is_read_but_offered_by_no_button() {
        let r = Request::from_annotation("override-window/1").unwrap();
        assert_eq!(r.action, Action::OverrideWindow);
        assert!(!Action::ALL.contains(&Action::OverrideWindow));
        let e = Request::from_annotation("explode/1").unwrap_err();
        assert!(
            e.message.contains("resume, override-window"),
            "{}",
            e.message
        );
        let mut s = ReleasePlanStatus::default();
        for (phase, applies) in [
            (Phase::RollingOut, true),
            (Phase::Stable, true),
            (Phase::RolledBack, true),
            (Phase::RollbackInProgress, false),
            (Phase::Pending, false),
        ] {
            s.phase = phase;
            assert_eq!(Action::OverrideWindow.applies_in(&s).is_ok(), applies);
        }
        s.phase = Phase::RollingOut;
        s.failure = Some(Failure::default());
        assert!(Action::OverrideWindow.applies_in(&s).is_err());
    }

    #[test]
    fn applicability() {
        let mut s = ReleasePlanStatus {
            phase: Phase::RollingOut,
            ..Default::default()
        };
        for a in Action::ALL {
            assert_eq!(a.applies_in(&s).is_ok(), a != Action::Retry, "{a:?}");
        }
        s.failure = Some(Failure::default());
        // Halted: promote no, abort yes, retry yes.
        let e = Action::Promote { full: false }.applies_in(&s).unwrap_err();
        assert!(e.to_string().contains("halted"), "{e}");
        assert!(Action::Abort.applies_in(&s).is_ok());
        assert!(Action::Retry.applies_in(&s).is_ok());
        for phase in [Phase::Stable, Phase::Pending, Phase::RollbackInProgress] {
            s.phase = phase;
            s.failure = None;
            let e = Action::Promote { full: true }.applies_in(&s).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("promote-full applies only while RollingOut; the plan is {phase}")
            );
            assert!(Action::Abort.applies_in(&s).is_err());
            assert!(Action::Retry.applies_in(&s).is_err());
            assert!(Action::Pause.applies_in(&s).is_ok());
            assert!(Action::Resume.applies_in(&s).is_ok());
        }
        s.phase = Phase::RolledBack;
        assert!(Action::Retry.applies_in(&s).is_ok());
        assert!(Action::Abort.applies_in(&s).is_err());
    }
}
