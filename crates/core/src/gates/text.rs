//! What of a URL or a server's answer may be repeated in status, Events and
//! logs: shared by the gates' pure parsing and the operator's calls.

use url::Url;

/// Longest redacted URL repeated in a message.
pub const MAX_URL_CHARS: usize = 200;

/// A URL safe to repeat in status, Events and logs: scheme, host and port,
/// and the first path segment, nothing else. Tokens live in userinfo, query
/// and fragment, and in paths too (a Slack-style webhook is
/// `/services/T000/B000/XXXX`): a path of more segments keeps the first and
/// ends in `/…`. At most 200 characters.
pub fn redact(url: &str) -> String {
    let out = if let Ok(mut u) = Url::parse(url.trim()) {
        // Both fail only for URLs without a host, which have no userinfo.
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u.set_query(None);
        u.set_fragment(None);
        let mut segments = u.path_segments().into_iter().flatten();
        match (segments.next(), segments.any(|s| !s.is_empty())) {
            (Some(first), true) => format!("{}/{first}/…", &u[..url::Position::BeforePath]),
            _ => u.to_string(),
        }
    } else {
        // Not a URL: keep what is before `?` and `#`, drop anything up to an `@`.
        let head = url.split(['?', '#']).next().unwrap_or_default();
        let (scheme, rest) = head.split_once("://").unwrap_or(("", head));
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        if scheme.is_empty() {
            rest.to_string()
        } else {
            format!("{scheme}://{rest}")
        }
    };
    sanitize(out.as_bytes(), MAX_URL_CHARS)
}

/// At most `max` printable characters of `body`, on one line: control and
/// invisible formatting characters (bidi overrides, zero-width) become
/// spaces, runs of spaces shrink to one; `…` marks a cut.
pub fn sanitize(body: &[u8], max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    let mut count = 0;
    let mut space = false;
    for c in text.chars() {
        let c = if c.is_control() || is_invisible(c) || c.is_whitespace() {
            ' '
        } else {
            c
        };
        if c == ' ' {
            space = count > 0;
            continue;
        }
        if space {
            if count + 1 >= max {
                out.push('…');
                return out;
            }
            out.push(' ');
            count += 1;
            space = false;
        }
        if count >= max {
            out.push('…');
            return out;
        }
        out.push(c);
        count += 1;
    }
    out
}

/// Characters that change how text is shown without showing themselves.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}
