//! Checks of a spec that the CRD's CEL rules cannot express, or that must hold
//! even for objects stored before a rule existed. The controller refuses to act
//! on a spec that fails them and says why in a `Stalled` condition.

use super::{ReleasePlanSpec, Step};
use std::str::FromStr;
use std::time::Duration;

/// A spec the operator cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// JSON path of the offending field, e.g. `spec.strategy.steps[1].pause.duration`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        message: message.into(),
    }
}

/// Parses a Go-style duration (`30s`, `1h30m`); negative durations are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d =
        kube::core::Duration::from_str(s).map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_negative() {
        return Err(format!("duration {s:?} must not be negative"));
    }
    Ok(d.into())
}

/// A step once validated: what the state machine works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckedStep {
    /// Move this percent of replicas to the new revision.
    SetWeight(i32),
    /// Hold for a time, or until promoted when `None`.
    Pause(Option<Duration>),
}

/// Validates the steps and returns them in checked form.
pub fn check_steps(steps: &[Step]) -> Result<Vec<CheckedStep>, SpecError> {
    let mut out = Vec::with_capacity(steps.len());
    let mut last_weight = 0;
    for (i, step) in steps.iter().enumerate() {
        let field = format!("spec.strategy.steps[{i}]");
        match (&step.set_weight, &step.pause) {
            (Some(w), None) => {
                if !(0..=100).contains(w) {
                    return Err(err(
                        format!("{field}.setWeight"),
                        "must be between 0 and 100",
                    ));
                }
                if *w < last_weight {
                    return Err(err(
                        format!("{field}.setWeight"),
                        "setWeight values must never decrease",
                    ));
                }
                last_weight = *w;
                out.push(CheckedStep::SetWeight(*w));
            }
            (None, Some(p)) => {
                let d = match &p.duration {
                    Some(s) => Some(
                        parse_duration(s).map_err(|m| err(format!("{field}.pause.duration"), m))?,
                    ),
                    None => None,
                };
                out.push(CheckedStep::Pause(d));
            }
            _ => {
                return Err(err(
                    field,
                    "each step must set exactly one of setWeight and pause",
                ));
            }
        }
    }
    Ok(out)
}

/// Validates what the state machine relies on.
pub fn check_spec(spec: &ReleasePlanSpec) -> Result<Vec<CheckedStep>, SpecError> {
    if spec.components.is_empty() {
        return Err(err("spec.components", "at least one component is required"));
    }
    for (i, c) in spec.components.iter().enumerate() {
        if spec.components[..i].iter().any(|d| d.name == c.name) {
            return Err(err(
                format!("spec.components[{i}].name"),
                format!("duplicate component name {:?}", c.name),
            ));
        }
        if c.replicas < 0 {
            return Err(err(
                format!("spec.components[{i}].replicas"),
                "must not be negative",
            ));
        }
        let containers = c.template.spec.as_ref().map_or(0, |s| s.containers.len());
        if containers == 0 {
            return Err(err(
                format!("spec.components[{i}].template.spec.containers"),
                "at least one container is required",
            ));
        }
    }
    for (i, g) in spec.health.prometheus.iter().enumerate() {
        if let Some(s) = &g.interval {
            parse_duration(s)
                .map_err(|m| err(format!("spec.health.prometheus[{i}].interval"), m))?;
        }
        crate::gates::threshold::Threshold::from_str(&g.threshold).map_err(|e| {
            err(
                format!("spec.health.prometheus[{i}].threshold"),
                e.to_string(),
            )
        })?;
    }
    check_steps(&spec.strategy.steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Pause;

    fn weight(w: i32) -> Step {
        Step {
            set_weight: Some(w),
            pause: None,
        }
    }
    fn pause(d: Option<&str>) -> Step {
        Step {
            set_weight: None,
            pause: Some(Pause {
                duration: d.map(str::to_string),
            }),
        }
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn checks_steps() {
        let steps = vec![weight(10), pause(Some("1m")), weight(50), pause(None)];
        assert_eq!(
            check_steps(&steps),
            Ok(vec![
                CheckedStep::SetWeight(10),
                CheckedStep::Pause(Some(Duration::from_secs(60))),
                CheckedStep::SetWeight(50),
                CheckedStep::Pause(None)
            ])
        );
    }

    #[test]
    fn refuses_decreasing_weights_and_bad_steps() {
        let e = check_steps(&[weight(50), weight(20)]).unwrap_err();
        assert_eq!(e.field, "spec.strategy.steps[1].setWeight");
        let e = check_steps(&[Step::default()]).unwrap_err();
        assert!(e.message.contains("exactly one"));
        let e = check_steps(&[pause(Some("later"))]).unwrap_err();
        assert_eq!(e.field, "spec.strategy.steps[0].pause.duration");
        assert!(check_steps(&[weight(101)]).is_err());
    }
}
