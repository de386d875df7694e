//! The one place where domain time (chrono) meets Kubernetes time (jiff),
//! and where the API's duration strings (`30s`, `1h30m`) are read.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Converts a domain time to a Kubernetes `Time`, at whole-second precision
/// (what the API server stores).
pub fn to_k8s(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(t.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Converts a Kubernetes `Time` to a domain time.
pub fn from_k8s(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(
        t.0.as_second(),
        u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0),
    )
    .unwrap_or(DateTime::UNIX_EPOCH)
}

/// Parses a Go-style duration (`30s`, `1h30m`), the format the CRD's rules
/// admit for `pause.duration` and gate intervals; negative durations are refused.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = <kube::core::Duration as std::str::FromStr>::from_str(s)
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_negative() {
        return Err(format!("duration {s:?} must not be negative"));
    }
    Ok(d.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn round_trips_at_second_precision() {
        let t = DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        assert_eq!(from_k8s(&to_k8s(t)), t);
        let with_nanos = DateTime::from_timestamp(1_780_000_000, 500).unwrap();
        assert_eq!(from_k8s(&to_k8s(with_nanos)), t);
    }
}
