//! The request guards of the dashboard's server: a page answers only to its
//! own host names (the DNS rebinding defence), and a button's POST needs the
//! page's per-run token and the page's own origin, so other web pages cannot
//! press the buttons.

use crate::cli::error::CliError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// The request header carrying the per-run token on a POST.
pub const TOKEN_HEADER: &str = "x-releaseplan-token";

/// A random per-run token (hex), from the operating system's generator.
pub(super) fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| CliError::Config(format!("no random numbers for the page token: {e}")))?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write;
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// The Host header values a loopback server answers to (the DNS rebinding
/// defence): its address and `localhost`, with the port.
pub fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    if !addr.ip().is_loopback() {
        return Vec::new();
    }
    let port = addr.port();
    let mut hosts = vec![format!("localhost:{port}"), addr.to_string()];
    if addr.ip().is_ipv4() {
        hosts.push(format!("127.0.0.1:{port}"));
    } else {
        hosts.push(format!("[::1]:{port}"));
    }
    hosts
}

/// Why a button's POST is refused before it reaches the cluster: a missing or
/// wrong token, or another site's Origin.
pub fn post_refusal(headers: &HeaderMap, token: &str) -> Option<&'static str> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = host.is_some_and(|h| origin.to_str().ok() == Some(&format!("http://{h}")));
        if !same {
            return Some("cross-origin request refused");
        }
    }
    let given = headers.get(TOKEN_HEADER).and_then(|t| t.to_str().ok());
    if given != Some(token) {
        return Some("missing or wrong page token: reload the dashboard");
    }
    None
}

/// Refuses requests addressed to another host name (DNS rebinding): `hosts`
/// as [`allowed_hosts`] makes them; empty, any.
pub(super) async fn check_host(
    State(hosts): State<Arc<[String]>>,
    req: Request,
    next: Next,
) -> Response {
    if !hosts.is_empty() {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| hosts.iter().any(|a| a == h)) {
            return (StatusCode::MISDIRECTED_REQUEST, "unknown Host").into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn loopback_answers_only_its_own_host_names() {
        let hosts = allowed_hosts("127.0.0.1:3100".parse().unwrap());
        assert!(hosts.contains(&"localhost:3100".to_string()));
        assert!(hosts.contains(&"127.0.0.1:3100".to_string()));
        assert!(!hosts.iter().any(|h| h.contains("evil")));
        assert!(allowed_hosts("0.0.0.0:3100".parse().unwrap()).is_empty());
    }

    #[test]
    fn posts_need_the_token_and_the_same_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:3100"));
        assert!(post_refusal(&h, "t0k").is_some());
        h.insert(TOKEN_HEADER, HeaderValue::from_static("t0k"));
        assert_eq!(post_refusal(&h, "t0k"), None);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:3100"),
        );
        assert_eq!(post_refusal(&h, "t0k"), None);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert_eq!(
            post_refusal(&h, "t0k"),
            Some("cross-origin request refused")
        );
        h.remove(header::ORIGIN);
        assert!(post_refusal(&h, "wrong").is_some());
    }
}
