//! The one place where domain time (chrono) meets Kubernetes time (jiff).

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
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or(DateTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_second_precision() {
        let t = DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        assert_eq!(from_k8s(&to_k8s(t)), t);
        let with_nanos = DateTime::from_timestamp(1_780_000_000, 500).unwrap();
        assert_eq!(from_k8s(&to_k8s(with_nanos)), t);
    }
}
