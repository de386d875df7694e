//! HTTP helpers shared by the Prometheus and webhook gates.

use std::time::Duration;

use super::DEFAULT_TIMEOUT;

/// A gate's `timeoutSeconds` as a duration: default 10s, at least 1s.
pub(crate) fn timeout_of(seconds: Option<i32>) -> Duration {
    match seconds {
        Some(s) => Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1)),
        None => DEFAULT_TIMEOUT,
    }
}

/// Reads at most `max` bytes of a response body; the flag says whether that
/// was all of it.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max {
            let room = max - body.len();
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

/// The first 200 characters of a body, for messages.
pub(crate) fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut out: String = text.chars().take(200).collect();
    if text.chars().nth(200).is_some() {
        out.push('…');
    }
    out
}

/// Describes a transport error with its causes ("connection refused" is in
/// the source chain, not in reqwest's own message), without repeating the
/// full request URL (the query would make the message long).
pub(crate) fn transport_error(
    what: &str,
    target: &str,
    timeout: Duration,
    e: reqwest::Error,
) -> String {
    if e.is_timeout() {
        return format!(
            "{what} at {target} did not answer within {}s",
            timeout.as_secs()
        );
    }
    let e = e.without_url();
    let mut msg = format!("cannot reach {what} at {target}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_short() {
        let long = "x".repeat(500);
        let s = snippet(long.as_bytes());
        assert_eq!(s.chars().count(), 201);
        assert_eq!(snippet(b"  short \n"), "short");
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout_of(None), Duration::from_secs(10));
        assert_eq!(timeout_of(Some(0)), Duration::from_secs(1));
        assert_eq!(timeout_of(Some(3)), Duration::from_secs(3));
    }
}
