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

/// The longest duration a spec may give (ten years): a deadline computed
/// from it stays far from any overflow.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(87_600 * 3600);

/// Seconds a Go-style duration string stands for, summed in floating point so
/// that any number of digits is safe (infinite when huge); unknown units
/// count as seconds, and the real parser reports them.
fn upper_bound_secs(s: &str) -> f64 {
    let mut total = 0.0;
    let mut rest = s.trim_start_matches(['+', '-']);
    while !rest.is_empty() {
        let is_num = |c: char| c.is_ascii_digit() || c == '.';
        let num_end = rest.find(|c: char| !is_num(c)).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        let unit_end = tail.find(is_num).unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let scale = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "ms" => 1e-3,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e-6,
            "ns" => 1e-9,
            _ => 1.0,
        };
        total += num.parse::<f64>().unwrap_or(0.0) * scale;
        rest = next;
    }
    total
}

/// Parses a Go-style duration (`30s`, `1h30m`), the format the CRD's rules
/// admit for `pause.duration` and gate intervals; negative durations are refused.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    // kube's parser panics on a value past u64 seconds (the CRD's pattern
    // admits any number of digits): bound it first.
    if upper_bound_secs(s) > MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "duration {s:?} is too long: at most 87600h (ten years)"
        ));
    }
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
    fn refuses_durations_too_long_instead_of_panicking() {
        assert_eq!(parse_duration("87600h"), Ok(MAX_DURATION));
        assert!(parse_duration("87600h1s").is_err());
        assert!(parse_duration("5256001m").is_err());
        let huge = parse_duration("99999999999999999999h").unwrap_err();
        assert!(huge.contains("too long"), "{huge}");
        assert!(parse_duration(&format!("{}s", "9".repeat(400))).is_err());
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn round_trips_at_second_precision() {
        let t = DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        assert_eq!(from_k8s(&to_k8s(t)), t);
        let with_nanos = DateTime::from_timestamp(1_780_000_000, 500).unwrap();
        assert_eq!(from_k8s(&to_k8s(with_nanos)), t);
    }
}
