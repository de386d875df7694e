//! HTTP helpers shared by the Prometheus and webhook gates.

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

/// The message of a 3xx answer: gates never follow redirects; the target
/// is named, redacted, so the author can fix the URL.
pub(crate) fn redirect_reason(what: &str, response: &reqwest::Response) -> String {
    let code = response.status().as_u16();
    match response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|l| l.to_str().ok())
    {
        Some(location) => format!(
            "{what} answered HTTP {code}: redirect to {} not followed (gates do not follow redirects)",
            super::outbound::redact(location)
        ),
        None => format!("{what} answered HTTP {code}: redirects are not followed"),
    }
}
