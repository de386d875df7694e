//! The request guards of the dashboard's server: a page answers only to its
//! own host names (the DNS rebinding defence); every request, GETs
//! included, needs the per-run token (in the printed URL once, then an
//! HttpOnly SameSite=Strict cookie), so another local process or user
//! cannot read the plans; and a button's POST needs the token in a header
//! and the page's own origin, so other web pages cannot press the buttons.

use crate::cli::error::CliError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// The request header carrying the per-run token on a POST.
pub const TOKEN_HEADER: &str = "x-releaseplan-token";

/// The query parameter of the printed URL that carries the token.
pub const TOKEN_QUERY: &str = "token";

/// The token every request must show, and the cookie that keeps it.
#[derive(Debug, Clone)]
pub struct TokenGate {
    /// The per-run token.
    pub token: String,
    /// The cookie's name: per port, because cookies are not (two dashboards
    /// on one host would overwrite each other's).
    pub cookie: String,
}

impl TokenGate {
    /// The gate of a server on `port` with `token`.
    pub fn new(token: String, port: u16) -> TokenGate {
        TokenGate {
            token,
            cookie: format!("rp_token_{port}"),
        }
    }

    /// The `Set-Cookie` value that keeps the token: HttpOnly (the page's
    /// scripts never read it), SameSite=Strict (no other site's request
    /// carries it), for every path of this server.
    pub fn set_cookie(&self) -> String {
        format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie, self.token
        )
    }
}

/// What the token check makes of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The token came in a cookie or the header.
    Pass,
    /// The token came in the URL: answer, and set the cookie.
    PassAndKeep,
    /// No valid token: 401, and nothing of the plans.
    Refuse,
}

/// Equal strings, compared in a time that does not depend on where they
/// differ (no byte-by-byte guessing of the token).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Whether a request with `query` and `headers` shows the gate's token: in
/// the URL (`?token=`), the cookie or the [`TOKEN_HEADER`].
pub fn admit(query: Option<&str>, headers: &HeaderMap, gate: &TokenGate) -> Admission {
    let in_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .any(|(k, v)| k == TOKEN_QUERY && same(v, &gate.token));
    if in_query {
        return Admission::PassAndKeep;
    }
    let in_cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|c| c.to_str().ok())
        .flat_map(|c| c.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(k, v)| k == gate.cookie && same(v, &gate.token));
    let in_header = headers
        .get(TOKEN_HEADER)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| same(t, &gate.token));
    if in_cookie || in_header {
        Admission::Pass
    } else {
        Admission::Refuse
    }
}

/// Refuses every request without the token (401, a text that names what to
/// open and nothing else); sets the cookie on one that brought it in its URL.
pub(super) async fn check_token(
    State(gate): State<Arc<TokenGate>>,
    req: Request,
    next: Next,
) -> Response {
    match admit(req.uri().query(), req.headers(), &gate) {
        Admission::Refuse => (
            StatusCode::UNAUTHORIZED,
            [(header::CACHE_CONTROL, "no-store")],
            "this dashboard needs its per-run token: open the URL it printed (with ?token=)\n",
        )
            .into_response(),
        Admission::Pass => next.run(req).await,
        Admission::PassAndKeep => {
            let mut res = next.run(req).await;
            if let Ok(v) = header::HeaderValue::from_str(&gate.set_cookie()) {
                res.headers_mut().append(header::SET_COOKIE, v);
            }
            res
        }
    }
}

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
    fn every_request_needs_the_token_in_the_url_cookie_or_header() {
        let gate = TokenGate::new("t0k".into(), 3100);
        let none = HeaderMap::new();
        assert_eq!(admit(None, &none, &gate), Admission::Refuse);
        assert_eq!(admit(Some("token=nope"), &none, &gate), Admission::Refuse);
        assert_eq!(admit(Some("token=t0"), &none, &gate), Admission::Refuse);
        assert_eq!(
            admit(Some("x=1&token=t0k"), &none, &gate),
            Admission::PassAndKeep
        );
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("other=1; rp_token_3100=t0k"),
        );
        assert_eq!(admit(None, &h, &gate), Admission::Pass);
        // Another port's cookie is another dashboard's.
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("rp_token_3101=t0k"),
        );
        assert_eq!(admit(None, &h, &gate), Admission::Refuse);
        let mut h = HeaderMap::new();
        h.insert(TOKEN_HEADER, HeaderValue::from_static("t0k"));
        assert_eq!(admit(None, &h, &gate), Admission::Pass);
        assert_eq!(
            gate.set_cookie(),
            "rp_token_3100=t0k; Path=/; HttpOnly; SameSite=Strict"
        );
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
