//! Release windows and freezes, evaluated purely at `obs.now`: whether a
//! rollout may start or take its next step now, and if not, until when it
//! waits. The machine asks only "is a hold in force" ([`Hold`]); what is never
//! held (rollback, abort, deletion, a crash-loop rollback) never asks.

use super::machine::{Cause, Facts};
use super::reasons::ConditionReason;
use super::{Action, EventIntent, EventReason, EventType, Observation, SpecError};
use crate::api::window::{ReleaseWindow, Weekday};
use crate::api::{Phase, ReleasePlanStatus};
use chrono::{DateTime, Datelike, Days, NaiveDateTime, NaiveTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use std::time::Duration;

/// Minutes in a day: `24:00` as an end.
const DAY: u32 = 24 * 60;

/// How far ahead the next opening of a window is searched: two weeks covers a
/// one-day window whose start falls in a daylight-saving gap once.
const SEARCH_DAYS: u64 = 15;

/// One window of `spec.strategy.windows`, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Days it opens on; empty: every day.
    days: Vec<chrono::Weekday>,
    /// Opens at, minutes after local midnight.
    start: u32,
    /// Closes at, minutes after local midnight (at or before `start`: the next day).
    end: u32,
    /// Its time zone.
    tz: Tz,
}

/// A freeze that applies to the plan (the controller matched its selectors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freeze {
    /// Name of the ReleaseFreeze.
    pub name: String,
    /// When it begins.
    pub start: DateTime<Utc>,
    /// When it ends; `None`: until it is deleted or given an end.
    pub end: Option<DateTime<Utc>>,
    /// Why, as the administrator wrote it.
    pub reason: Option<String>,
}

/// What holds a rollout now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// No window of the plan is open.
    OutsideWindow,
    /// A ReleaseFreeze is in force.
    Frozen,
}

/// A hold in force at `obs.now`: the rollout neither starts nor advances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Window or freeze.
    pub kind: HoldKind,
    /// When it ends, as known now (`None`: a freeze without an end).
    pub until: Option<DateTime<Utc>>,
    /// For conditions and Events: what holds and until when.
    pub message: String,
}

impl Hold {
    /// How long until the hold ends, if it is known to end.
    pub fn left(&self, now: DateTime<Utc>) -> Option<Duration> {
        self.until
            .map(|u| (u - now).to_std().unwrap_or(Duration::ZERO))
    }
}

/// Parses `spec.strategy.windows` (the schema already checked the formats;
/// the time zone's name is checked here).
pub fn parse(windows: &[ReleaseWindow]) -> Result<Vec<Window>, SpecError> {
    windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let field = |f: &str| format!("spec.strategy.windows[{i}].{f}");
            let tz = match w.time_zone.as_deref() {
                None => Tz::UTC,
                Some(name) => name.parse::<Tz>().map_err(|_| {
                    SpecError::new(
                        field("timeZone"),
                        format!(
                            "unknown time zone {name:?}: use an IANA name such as \"Europe/Paris\""
                        ),
                    )
                })?,
            };
            let start = minutes(&w.start).ok_or_else(|| {
                SpecError::new(field("start"), format!("{:?} is not HH:MM", w.start))
            })?;
            let end = minutes(&w.end)
                .ok_or_else(|| SpecError::new(field("end"), format!("{:?} is not HH:MM", w.end)))?;
            if start >= DAY || start == end {
                return Err(SpecError::new(
                    field("start"),
                    "start must be before 24:00 and differ from end",
                ));
            }
            Ok(Window {
                days: w.days.iter().map(|d| weekday(*d)).collect(),
                start,
                end,
                tz,
            })
        })
        .collect()
}

/// `HH:MM` as minutes after midnight (`24:00` is [`DAY`]).
fn minutes(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    let total = h * 60 + m;
    (m < 60 && total <= DAY).then_some(total)
}

fn weekday(d: Weekday) -> chrono::Weekday {
    match d {
        Weekday::Mon => chrono::Weekday::Mon,
        Weekday::Tue => chrono::Weekday::Tue,
        Weekday::Wed => chrono::Weekday::Wed,
        Weekday::Thu => chrono::Weekday::Thu,
        Weekday::Fri => chrono::Weekday::Fri,
        Weekday::Sat => chrono::Weekday::Sat,
        Weekday::Sun => chrono::Weekday::Sun,
    }
}

impl Window {
    fn on(&self, d: chrono::Weekday) -> bool {
        self.days.is_empty() || self.days.contains(&d)
    }

    /// Whether the window is open at `now` (local wall-clock time of its zone).
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        let local = now.with_timezone(&self.tz);
        let t = local.hour() * 60 + local.minute();
        let today = local.weekday();
        if self.start < self.end {
            self.on(today) && (self.start..self.end).contains(&t)
        } else {
            // Spans midnight: opened today, or opened yesterday and not closed yet.
            (self.on(today) && t >= self.start) || (self.on(today.pred()) && t < self.end)
        }
    }

    fn first_instant(&self, local: NaiveDateTime) -> Option<DateTime<Tz>> {
        first_local(self.tz, local)
    }

    /// The first opening after `now`, within [`SEARCH_DAYS`].
    pub fn next_opening(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let today = now.with_timezone(&self.tz).date_naive();
        let at = NaiveTime::from_hms_opt(self.start / 60, self.start % 60, 0)?;
        (0..=SEARCH_DAYS)
            .filter_map(|d| today.checked_add_days(Days::new(d)))
            .filter(|date| self.on(date.weekday()))
            .filter_map(|date| self.first_instant(date.and_time(at)))
            .map(|t| t.with_timezone(&Utc))
            // A window that lies wholly in a daylight-saving gap does not
            // open that day.
            .find(|t| *t > now && self.is_open(*t))
    }
}

/// The first instant of a local time, or, when it falls in a
/// daylight-saving gap, of the first local minute after the gap.
fn first_local(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Tz>> {
    (0..=GAP_MINUTES).find_map(|m| {
        tz.from_local_datetime(&(local + chrono::Duration::minutes(m)))
            .earliest()
    })
}

/// Longest daylight-saving gap searched past (two hours covers every zone).
const GAP_MINUTES: i64 = 120;

/// What holds a rollout at `now`, if anything: a freeze in force first (it
/// overrides any window), else the plan's windows when none is open.
pub fn hold(windows: &[Window], freezes: &[Freeze], now: DateTime<Utc>) -> Option<Hold> {
    let active: Vec<&Freeze> = freezes
        .iter()
        .filter(|f| f.start <= now && f.end.is_none_or(|e| now < e))
        .collect();
    if !active.is_empty() {
        let until = active
            .iter()
            .map(|f| f.end)
            .collect::<Option<Vec<_>>>()
            .and_then(|ends| ends.into_iter().max());
        let names: Vec<String> = active
            .iter()
            .map(|f| match &f.reason {
                Some(r) => format!("{} ({r})", f.name),
                None => f.name.clone(),
            })
            .collect();
        let when = until.map_or_else(
            || "until it is lifted".to_string(),
            |u| format!("until {}", u.to_rfc3339()),
        );
        return Some(Hold {
            kind: HoldKind::Frozen,
            until,
            message: format!("frozen by ReleaseFreeze {} {when}", names.join(", ")),
        });
    }
    if windows.is_empty() || windows.iter().any(|w| w.is_open(now)) {
        return None;
    }
    let until = windows.iter().filter_map(|w| w.next_opening(now)).min();
    let when = until.map_or_else(
        || "no window opens in the next two weeks".to_string(),
        |u| format!("the next window opens at {}", u.to_rfc3339()),
    );
    Some(Hold {
        kind: HoldKind::OutsideWindow,
        until,
        message: format!("outside every release window: {when}"),
    })
}

/// When a held plan looks again: as its window opens or its freeze ends
/// (bounded, so a clock that jumps is caught; a freeze without an end wakes
/// the plan when it changes).
pub fn wake_after(facts: &Facts, now: DateTime<Utc>) -> Option<Duration> {
    let left = facts.held.as_ref()?.left(now)?;
    Some((left + Duration::from_millis(500)).min(MAX_WAKE))
}

/// Longest a held plan sleeps without looking again.
const MAX_WAKE: Duration = Duration::from_secs(3600);

/// The hold the next status waits on, as a condition reason and text: only
/// when the decision stays in its phase (an override that starts the
/// rollout, or a rollback, leaves it) and the plan goes on by itself when
/// the hold ends.
pub fn waiting(
    obs: &Observation,
    facts: &Facts,
    next: &ReleasePlanStatus,
) -> Option<(ConditionReason, String)> {
    let h = facts.held.as_ref()?;
    // Only what goes on by itself once the hold ends: a held retry was
    // acknowledged, and is not retried when the window opens.
    let goes_on = match next.phase {
        Phase::RollingOut => next.failure.is_none(),
        Phase::Stable => true,
        Phase::RolledBack => next.observed_generation != Some(obs.generation),
        Phase::Pending | Phase::RollbackInProgress => false,
    };
    if next.phase != obs.status.phase || !goes_on {
        return None;
    }
    let reason = match h.kind {
        HoldKind::OutsideWindow => ConditionReason::OutsideReleaseWindow,
        HoldKind::Frozen => ConditionReason::ReleaseFrozen,
    };
    let text = if next.phase == Phase::RollingOut {
        format!("the next step waits: {}", h.message)
    } else {
        let rev = obs.target.as_ref().map_or("?", |t| t.revision.as_str());
        format!("revision {rev} waits to start: {}", h.message)
    };
    Some((reason, text))
}

/// Events of a decision under a hold: a `promote --override-window` that
/// moved the plan (audited, Warning), and a promote or retry the hold kept
/// from acting (so the human learns why nothing moved).
pub fn events(obs: &Observation, facts: &Facts, cause: &Cause) -> Vec<EventIntent> {
    let Some(h) = &facts.held else {
        return Vec::new();
    };
    let id = obs.request.as_ref().map_or("", |r| r.id.as_str());
    let event = match (facts.request, cause) {
        (
            Some(Action::OverrideWindow),
            Cause::Start { .. } | Cause::Advance { .. } | Cause::Promoted,
        ) => EventIntent {
            type_: EventType::Warning,
            reason: EventReason::WindowOverridden,
            message: format!("request {id} overrode the hold: {}", h.message),
        },
        (Some(a @ (Action::Promote { .. } | Action::Retry)), Cause::None) => EventIntent {
            type_: EventType::Warning,
            reason: EventReason::RequestIgnored,
            message: format!(
                "request {} held: {}; `kubectl releaseplan promote --override-window` passes it",
                a.word(),
                h.message
            ),
        },
        _ => return Vec::new(),
    };
    vec![event]
}

/// A Normal Event when a hold begins or changes (the `Progressing`
/// condition written with a hold reason and a new text).
pub fn held_event(before: &ReleasePlanStatus, after: &ReleasePlanStatus) -> Option<EventIntent> {
    let progressing = |s: &ReleasePlanStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == super::conditions::PROGRESSING)
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let (reason, message) = progressing(after)?;
    let held = [
        ConditionReason::OutsideReleaseWindow,
        ConditionReason::ReleaseFrozen,
    ]
    .iter()
    .any(|r| r.as_str() == reason);
    let new = progressing(before) != Some((reason, message.clone()));
    (held && new).then_some(EventIntent {
        type_: EventType::Normal,
        reason: EventReason::RolloutHeld,
        message,
    })
}

#[cfg(test)]
#[path = "windows_tests.rs"]
mod tests;
