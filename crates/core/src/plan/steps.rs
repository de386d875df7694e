//! Canary steps: parsed once from `spec.strategy.steps` (a blue-green plan
//! runs one, [`strategy_steps`]), and the step a rollout is at. A step kind is
//! its field in `api::Step`, one arm of [`Step`] with its parse, kind and text
//! (what the plugin and the dashboard show), and one arm of [`CurrentStep`]
//! saying when the step is done and what it waits for; the machine, the
//! requeue and the status message ask `CurrentStep` and need no change.

use super::spec_error::SpecError;
use crate::api::time::parse_duration;
use std::time::Duration;

/// A canary step of the spec, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Move this percent of requests (with a router) or replicas to the new revision.
    SetWeight(i32),
    /// Hold for a time, or until promoted when `None`.
    Pause(Option<Duration>),
    /// The new revision's pod count from now on, apart from the weight.
    SetCanaryScale(CanaryScale),
    /// Requests with all these headers (name, exact value) go to the new
    /// revision; empty removes the header route.
    SetHeaderRoute(Vec<(String, String)>),
}

/// How many pods the new revision of a routed component runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CanaryScale {
    /// As many as the traffic weight asks (the default).
    #[default]
    MatchTraffic,
    /// A fixed count (capped at the component's replicas).
    Replicas(i32),
    /// A percent of the component's replicas, rounded up.
    Weight(i32),
}

impl Step {
    /// The kind of step, for the plugin and the dashboard: `weight`, `pause`,
    /// `scale` (setCanaryScale) or `header` (setHeaderRoute).
    pub fn kind(&self) -> &'static str {
        match self {
            Step::SetWeight(_) => "weight",
            Step::Pause(_) => "pause",
            Step::SetCanaryScale(_) => "scale",
            Step::SetHeaderRoute(_) => "header",
        }
    }

    /// The weight this step sets, if it sets one (later steps keep it).
    pub fn weight(&self) -> Option<i32> {
        match self {
            Step::SetWeight(w) => Some(*w),
            _ => None,
        }
    }

    /// The canary scale this step sets, if it sets one (later steps keep it).
    pub fn canary_scale(&self) -> Option<CanaryScale> {
        match self {
            Step::SetCanaryScale(c) => Some(*c),
            _ => None,
        }
    }

    /// The header route this step sets, if it sets one (later steps keep it).
    pub fn header_route(&self) -> Option<&[(String, String)]> {
        match self {
            Step::SetHeaderRoute(h) => Some(h),
            _ => None,
        }
    }
}

/// The step in a few words, as the plugin and the dashboard show it: `25%`,
/// `pause`, `pause 1m30s`, `scale 2 pods`, `scale 50%`, `scale with
/// traffic`, `header x-canary: yes`, `no header route`.
impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::SetWeight(w) => write!(f, "{w}%"),
            Step::Pause(None) => f.write_str("pause"),
            Step::Pause(Some(d)) => write!(f, "pause {}", GoDuration(*d)),
            Step::SetCanaryScale(CanaryScale::Replicas(1)) => f.write_str("scale 1 pod"),
            Step::SetCanaryScale(CanaryScale::Replicas(n)) => write!(f, "scale {n} pods"),
            Step::SetCanaryScale(CanaryScale::Weight(w)) => write!(f, "scale {w}%"),
            Step::SetCanaryScale(CanaryScale::MatchTraffic) => f.write_str("scale with traffic"),
            Step::SetHeaderRoute(h) if h.is_empty() => f.write_str("no header route"),
            Step::SetHeaderRoute(h) => {
                f.write_str(if h.len() == 1 { "header" } else { "headers" })?;
                for (i, (name, value)) in h.iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{name}: {value}")?;
                }
                Ok(())
            }
        }
    }
}

/// A duration as Go writes it, to the millisecond: `90s` is `1m30s`, `1h`,
/// `1.5s`, `250ms`, `0s`.
struct GoDuration(Duration);

impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (secs, ms) = (self.0.as_secs(), self.0.subsec_millis());
        if secs == 0 {
            return if ms == 0 {
                f.write_str("0s")
            } else {
                write!(f, "{ms}ms")
            };
        }
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if m > 0 {
            write!(f, "{m}m")?;
        }
        match (s, ms) {
            (0, 0) => Ok(()),
            (s, 0) => write!(f, "{s}s"),
            (s, ms) => {
                let frac = format!("{ms:03}");
                write!(f, "{s}.{}s", frac.trim_end_matches('0'))
            }
        }
    }
}

/// The steps the operator runs for a strategy: a blue-green release is one
/// implicit step, the preview, held until promoted (or for
/// `autoPromotionSeconds`); a canary release runs its steps, parsed. The
/// final step to 100% is implicit in both. The one count of steps: the
/// machine runs these, the plugin and the dashboard show these.
pub fn strategy_steps(strategy: &crate::api::Strategy) -> Result<Vec<Step>, SpecError> {
    match &strategy.blue_green {
        Some(bg) => {
            if !strategy.steps.is_empty() {
                return Err(SpecError::new(
                    "spec.strategy.blueGreen",
                    "blueGreen and steps exclude each other",
                ));
            }
            Ok(vec![Step::Pause(bg.auto_promotion_seconds.map(|s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            }))])
        }
        None => parse_steps(&strategy.steps),
    }
}

/// The last setting of a kind at or before step `index` (`get` picks it out
/// of a step); past the last step, none (the final step to 100% resets them).
pub fn in_force<T>(steps: &[Step], index: usize, get: impl Fn(&Step) -> Option<T>) -> Option<T> {
    steps.get(..=index)?.iter().rev().find_map(get)
}

/// Parses and validates the spec's steps: exactly one kind per step, weights
/// within 0..=100 and never decreasing, pause durations readable.
pub fn parse_steps(steps: &[crate::api::Step]) -> Result<Vec<Step>, SpecError> {
    let mut out = Vec::with_capacity(steps.len());
    let mut last_weight = 0;
    for (i, step) in steps.iter().enumerate() {
        let field = format!("spec.strategy.steps[{i}]");
        match (
            &step.set_weight,
            &step.pause,
            &step.set_canary_scale,
            &step.set_header_route,
        ) {
            (None, None, Some(c), None) => {
                let scale = match (c.replicas, c.weight, c.match_traffic_weight) {
                    (Some(r), None, None) if r >= 0 => CanaryScale::Replicas(r),
                    (None, Some(w), None) if (0..=100).contains(&w) => CanaryScale::Weight(w),
                    (None, None, Some(true)) => CanaryScale::MatchTraffic,
                    _ => {
                        return Err(SpecError::new(
                            format!("{field}.setCanaryScale"),
                            "must set exactly one of replicas (0 or more), weight (0 to 100) and matchTrafficWeight (true)",
                        ));
                    }
                };
                out.push(Step::SetCanaryScale(scale));
            }
            (None, None, None, Some(h)) => {
                out.push(Step::SetHeaderRoute(
                    h.headers
                        .iter()
                        .map(|m| (m.name.clone(), m.value.clone()))
                        .collect(),
                ));
            }
            (Some(w), None, None, None) => {
                if !(0..=100).contains(w) {
                    return Err(SpecError::new(
                        format!("{field}.setWeight"),
                        "must be between 0 and 100",
                    ));
                }
                if *w < last_weight {
                    return Err(SpecError::new(
                        format!("{field}.setWeight"),
                        "setWeight values must never decrease",
                    ));
                }
                last_weight = *w;
                out.push(Step::SetWeight(*w));
            }
            (None, Some(p), None, None) => {
                let d = match &p.duration {
                    Some(s) => Some(
                        parse_duration(s)
                            .map_err(|m| SpecError::new(format!("{field}.pause.duration"), m))?,
                    ),
                    None => None,
                };
                out.push(Step::Pause(d));
            }
            _ => {
                return Err(SpecError::new(
                    field,
                    "each step must set exactly one of setWeight, pause, setCanaryScale and setHeaderRoute",
                ));
            }
        }
    }
    Ok(out)
}

/// The step a rollout is at, with what it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurrentStep {
    /// A setWeight step: done once its pods are ready and its gates passed.
    SetWeight(i32),
    /// A setCanaryScale or setHeaderRoute step: done, like a setWeight step,
    /// once its pods and routes are in place and its gates passed.
    Setting,
    /// A timed pause: done once `remaining` is zero and pods and gates are good.
    Pause {
        /// Time left of the pause.
        remaining: Duration,
    },
    /// A pause without duration: holds until promoted.
    UntilPromoted,
    /// Past the last step: the implicit 100%, promoted to Stable when ready.
    Final,
}

impl CurrentStep {
    /// The step at `index` of `steps` after `age` in it; past the end is [`CurrentStep::Final`].
    pub fn at(steps: &[Step], index: usize, age: Duration) -> CurrentStep {
        match steps.get(index) {
            None => CurrentStep::Final,
            Some(Step::SetWeight(w)) => CurrentStep::SetWeight(*w),
            Some(Step::Pause(Some(d))) => CurrentStep::Pause {
                remaining: d.saturating_sub(age),
            },
            Some(Step::Pause(None)) => CurrentStep::UntilPromoted,
            Some(Step::SetCanaryScale(_) | Step::SetHeaderRoute(_)) => CurrentStep::Setting,
        }
    }

    /// Whether the step is done, given whether its pods are ready and its
    /// gates passed.
    pub fn done(&self, ready: bool) -> bool {
        match self {
            CurrentStep::SetWeight(_) | CurrentStep::Setting | CurrentStep::Final => ready,
            CurrentStep::Pause { remaining } => remaining.is_zero() && ready,
            CurrentStep::UntilPromoted => false,
        }
    }

    /// How long until time alone may finish the step (a timed pause).
    pub fn ends_in(&self) -> Option<Duration> {
        match self {
            CurrentStep::Pause { remaining } => Some(*remaining),
            _ => None,
        }
    }

    /// The step holds until a human promotes it.
    pub fn holds_until_promoted(&self) -> bool {
        matches!(self, CurrentStep::UntilPromoted)
    }

    /// What the rollout waits for at this step, for the status message.
    pub fn waiting_for(&self) -> &'static str {
        match self {
            CurrentStep::UntilPromoted => "waiting for promotion",
            CurrentStep::Pause { .. } => "pausing",
            CurrentStep::SetWeight(_) | CurrentStep::Setting | CurrentStep::Final => {
                "waiting for pods and gates"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Pause;

    fn weight(w: i32) -> crate::api::Step {
        crate::api::Step {
            set_weight: Some(w),
            ..Default::default()
        }
    }
    fn pause(d: Option<&str>) -> crate::api::Step {
        crate::api::Step {
            pause: Some(Pause {
                duration: d.map(str::to_string),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn parses_steps() {
        let steps = vec![weight(10), pause(Some("1m")), weight(50), pause(None)];
        assert_eq!(
            parse_steps(&steps),
            Ok(vec![
                Step::SetWeight(10),
                Step::Pause(Some(Duration::from_secs(60))),
                Step::SetWeight(50),
                Step::Pause(None)
            ])
        );
    }

    #[test]
    fn refuses_decreasing_weights_and_bad_steps() {
        let e = parse_steps(&[weight(50), weight(20)]).unwrap_err();
        assert_eq!(e.field, "spec.strategy.steps[1].setWeight");
        let e = parse_steps(&[crate::api::Step::default()]).unwrap_err();
        assert!(e.message.contains("exactly one"));
        let e = parse_steps(&[pause(Some("later"))]).unwrap_err();
        assert_eq!(e.field, "spec.strategy.steps[0].pause.duration");
        assert!(parse_steps(&[weight(101)]).is_err());
    }

    #[test]
    fn labels_and_kinds() {
        let label = |d: &str| Step::Pause(Some(parse_duration(d).unwrap())).to_string();
        assert_eq!(label("90s"), "pause 1m30s");
        assert_eq!(label("1h"), "pause 1h");
        assert_eq!(label("1h0m5s"), "pause 1h5s");
        assert_eq!(label("1.5s"), "pause 1.5s");
        assert_eq!(label("250ms"), "pause 250ms");
        assert_eq!(label("0s"), "pause 0s");
        assert_eq!(
            Step::SetCanaryScale(CanaryScale::Replicas(1)).to_string(),
            "scale 1 pod"
        );
        let two = Step::SetHeaderRoute(vec![("a".into(), "1".into()), ("b".into(), "2".into())]);
        assert_eq!(two.to_string(), "headers a: 1, b: 2");
        assert_eq!(two.kind(), "header");
    }

    #[test]
    fn blue_green_is_one_step() {
        let bg = |seconds| crate::api::Strategy {
            blue_green: Some(crate::api::BlueGreen {
                auto_promotion_seconds: seconds,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(strategy_steps(&bg(None)), Ok(vec![Step::Pause(None)]));
        assert_eq!(
            strategy_steps(&bg(Some(60))),
            Ok(vec![Step::Pause(Some(Duration::from_secs(60)))])
        );
        let mut both = bg(None);
        both.steps = vec![weight(10)];
        assert_eq!(
            strategy_steps(&both).unwrap_err().field,
            "spec.strategy.blueGreen"
        );
        let canary = crate::api::Strategy {
            steps: vec![weight(10), pause(None)],
            ..Default::default()
        };
        assert_eq!(strategy_steps(&canary).map(|s| s.len()), Ok(2));
    }

    #[test]
    fn current_step_knows_when_it_is_done() {
        let steps = [
            Step::SetWeight(10),
            Step::Pause(Some(Duration::from_secs(30))),
            Step::Pause(None),
        ];
        let at = |i, age| CurrentStep::at(&steps, i, Duration::from_secs(age));
        assert_eq!(at(0, 5), CurrentStep::SetWeight(10));
        assert!(at(0, 0).done(true) && !at(0, 0).done(false));
        assert_eq!(at(1, 10).ends_in(), Some(Duration::from_secs(20)));
        assert!(!at(1, 10).done(true));
        assert!(at(1, 40).done(true) && !at(1, 40).done(false));
        assert!(at(2, 1000).holds_until_promoted() && !at(2, 1000).done(true));
        assert_eq!(at(3, 0), CurrentStep::Final);
        assert!(at(3, 0).done(true));
    }
}
