//! Prometheus query gates, the pure half: the gate's settings, its query
//! rendered and its URL built, and the answer judged against the threshold.
//! The operator crate asks Prometheus (`releaseplan::gates::prometheus`).

use std::time::Duration;

use serde_json::Value;

use super::access::Access;
use super::text::{redact, sanitize};
use super::threshold::Threshold;
use super::{GateResult, timeout_of};
use crate::api::PrometheusGate;
use crate::api::time::parse_duration;

/// Values substituted into a gate's query: `{{plan}}`, `{{namespace}}`,
/// `{{component}}`, `{{revision}}`, `{{stableRevision}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateVars {
    /// Name of the ReleasePlan.
    pub plan: String,
    /// Namespace of the ReleasePlan.
    pub namespace: String,
    /// Name of the component being checked.
    pub component: String,
    /// Revision (template hash) being rolled out.
    pub revision: String,
    /// The component's stable revision (template hash), which a query
    /// compares the new one with; empty before a first release.
    pub stable_revision: String,
    /// The component's baseline revision (`<stable>-baseline`) when it runs
    /// one (`baseline: true`): an analysis compares the new revision with
    /// it instead of the stable one. Empty without a baseline.
    pub baseline_revision: String,
}

/// Interval of a Prometheus gate without `interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// `failureLimit` when unset.
pub const DEFAULT_FAILURE_LIMIT: i32 = 0;
/// `inconclusiveLimit` when unset.
pub const DEFAULT_INCONCLUSIVE_LIMIT: i32 = 3;

/// A Prometheus gate, parsed, with its defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSpec {
    /// Name of the gate.
    pub name: String,
    /// Base URL of the Prometheus HTTP API.
    pub address: String,
    /// The query, placeholders not yet replaced.
    pub query: String,
    /// Pass condition.
    pub threshold: Threshold,
    /// Time between evaluations (default 30s, at least 1s).
    pub interval: Duration,
    /// Failed evaluations tolerated (default 0).
    pub failure_limit: i32,
    /// Inconclusive evaluations tolerated (default 3).
    pub inconclusive_limit: i32,
    /// Timeout of one query (default 10s).
    pub timeout: Duration,
    /// Credentials, headers and CA bundle, read at each evaluation.
    pub access: Access,
}

impl PrometheusSpec {
    /// Parses a gate, applying the defaults. Fails, naming the field under
    /// the gate, on an unparsable interval or threshold (the CRD's rules
    /// normally reject those first).
    pub fn parse(gate: &PrometheusGate) -> Result<PrometheusSpec, (&'static str, String)> {
        let interval = match gate.check.interval.as_deref() {
            Some(s) => parse_duration(s).map_err(|m| ("interval", m))?,
            None => DEFAULT_INTERVAL,
        };
        let threshold = gate
            .check
            .threshold
            .parse::<Threshold>()
            .map_err(|e| ("threshold", e.to_string()))?;
        Ok(PrometheusSpec {
            name: gate.name.clone(),
            address: gate.check.address.clone(),
            query: gate.check.query.clone(),
            threshold,
            // A zero interval would re-evaluate on every reconcile; one second is the floor.
            interval: interval.max(Duration::from_secs(1)),
            failure_limit: gate
                .check
                .failure_limit
                .unwrap_or(DEFAULT_FAILURE_LIMIT)
                .max(0),
            inconclusive_limit: gate
                .check
                .inconclusive_limit
                .unwrap_or(DEFAULT_INCONCLUSIVE_LIMIT)
                .max(0),
            timeout: timeout_of(gate.check.timeout_seconds),
            access: Access::of(gate.auth.as_ref(), &gate.headers, gate.tls.as_ref()),
        })
    }
}

/// Replaces `{{plan}}`, `{{namespace}}`, `{{component}}`, `{{revision}}` and
/// `{{stableRevision}}`
/// (spaces inside the braces allowed: `{{ plan }}`) with their values. Any
/// other `{{...}}` is left as written, so Prometheus reports it.
pub fn render_query(query: &str, vars: &TemplateVars) -> String {
    render_with(query, vars, &[])
}

/// [`render_query`] with `extra` placeholders (name, value) beside the
/// gate's own: an analysis's `{{window}}`, `{{sampleInterval}}` and `{{role}}`.
pub fn render_with(query: &str, vars: &TemplateVars, extra: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(query.len());
    let mut rest = query;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = after[..end].trim();
        let value = match name {
            "plan" => Some(vars.plan.as_str()),
            "namespace" => Some(vars.namespace.as_str()),
            "component" => Some(vars.component.as_str()),
            "revision" => Some(vars.revision.as_str()),
            "stableRevision" => Some(vars.stable_revision.as_str()),
            _ => extra.iter().find(|(n, _)| *n == name).map(|(_, v)| *v),
        };
        match value {
            Some(v) => out.push_str(v),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Whether a query compares the new revision with the stable one
/// (`{{stableRevision}}`, spaces inside the braces allowed).
pub fn compares_with_stable(query: &str) -> bool {
    let mut rest = query;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return false;
        };
        if after[..end].trim() == "stableRevision" {
            return true;
        }
        rest = &after[end + 2..];
    }
    false
}

/// Builds `<address>/api/v1/query?query=...&timeout=...` with a URL parser,
/// never by concatenation: the address's path is kept as a prefix
/// (`http://host/prometheus`), its query string and fragment are dropped, so
/// a `?` or `#` in an address can neither cut the API path off nor add or
/// override a query parameter (`?query=vector(0)#`).
pub fn query_url(address: &str, query: &str, timeout: Duration) -> Result<url::Url, String> {
    let invalid = |why: &dyn std::fmt::Display| {
        format!("invalid prometheus address {}: {why}", redact(address))
    };
    let mut url = url::Url::parse(address.trim()).map_err(|e| invalid(&e))?;
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|()| invalid(&"not an http(s) URL"))?
        .pop_if_empty()
        .extend(["api", "v1", "query"]);
    url.query_pairs_mut()
        .append_pair("query", query)
        .append_pair("timeout", &format!("{}s", timeout.as_secs().max(1)));
    Ok(url)
}

/// `message: detail`, or the message alone when there is no detail.
pub fn with_detail(message: String, detail: &str) -> String {
    if detail.is_empty() {
        message
    } else {
        format!("{message}: {detail}")
    }
}

/// Judges a Prometheus `/api/v1/query` answer against a threshold.
///
/// - `status` other than `success`: `Error` with Prometheus's message.
/// - a scalar, or an instant vector of exactly one series: its value is
///   compared. NaN is `Inconclusive`; `+Inf`/`-Inf` are compared like any
///   number (`+Inf` fails `< 0.05`).
/// - an empty vector (no data), several series, a matrix or a string:
///   `Inconclusive`.
/// - anything not shaped like a Prometheus answer: `Error`.
///
/// Text taken from the answer is cut to `detail` characters (0: left out,
/// except Prometheus's own `errorType` names).
pub fn interpret(body: &Value, threshold: &Threshold, detail: usize) -> GateResult {
    match body.get("status").and_then(Value::as_str) {
        Some("success") => {}
        Some(_) => {
            return GateResult::Error {
                reason: with_detail(
                    "prometheus query failed".to_string(),
                    &error_of(body, detail),
                ),
            };
        }
        None => return malformed("no status field"),
    }
    let Some(data) = body.get("data") else {
        return malformed("no data field");
    };
    let result = data.get("result");
    let sample = match data.get("resultType").and_then(Value::as_str) {
        Some("scalar") => match result {
            Some(sample) => sample,
            None => return malformed("scalar without result"),
        },
        Some("vector") => {
            let Some(series) = result.and_then(Value::as_array) else {
                return malformed("vector result is not a list");
            };
            match series.as_slice() {
                [] => {
                    return GateResult::Inconclusive {
                        reason: "query returned no data".to_string(),
                    };
                }
                [one] => match one.get("value") {
                    Some(sample) => sample,
                    None => return malformed("vector series without value"),
                },
                many => {
                    return GateResult::Inconclusive {
                        reason: format!(
                            "query returned {} series, want exactly one (aggregate it, e.g. with sum())",
                            many.len()
                        ),
                    };
                }
            }
        }
        Some(other) => {
            return GateResult::Inconclusive {
                reason: format!(
                    "query returned a {other}, want a scalar or an instant vector of one series"
                ),
            };
        }
        None => return malformed("no resultType"),
    };
    // A sample is [<unix time>, "<value>"].
    let Some(text) = sample.get(1).and_then(Value::as_str) else {
        return malformed("sample is not [time, \"value\"]");
    };
    let Some(value) = parse_sample(text) else {
        return malformed(&with_detail(
            "sample value is not a number".to_string(),
            &sanitize(text.as_bytes(), detail),
        ));
    };
    if value.is_nan() {
        return GateResult::Inconclusive {
            reason: "query returned NaN (no traffic to divide by?)".to_string(),
        };
    }
    if threshold.passes(value) {
        GateResult::Pass { value }
    } else {
        GateResult::Fail {
            value: Some(value),
            reason: format!("value {} is not {threshold}", super::format_value(value)),
        }
    }
}

/// Parses a Prometheus sample value: a decimal, `NaN`, `+Inf` or `-Inf`.
pub(crate) fn parse_sample(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

fn malformed(what: &str) -> GateResult {
    GateResult::Error {
        reason: format!("unexpected prometheus answer: {what}"),
    }
}

/// Error types Prometheus itself sends: names, not server data, so they are
/// repeated even when answer bodies are not.
const ERROR_TYPES: [&str; 8] = [
    "timeout",
    "canceled",
    "execution",
    "bad_data",
    "internal",
    "unavailable",
    "not_found",
    "not_acceptable",
];

/// `<errorType>: <error>` of a Prometheus error answer: the type only when
/// it is one of Prometheus's own, the text only up to `detail` characters.
pub fn error_of(body: &Value, detail: usize) -> String {
    let kind = body
        .get("errorType")
        .and_then(Value::as_str)
        .filter(|k| ERROR_TYPES.contains(k))
        .unwrap_or_default();
    let text = body
        .get("error")
        .and_then(Value::as_str)
        .map(|e| sanitize(e.as_bytes(), detail))
        .unwrap_or_default();
    match (kind.is_empty(), text.is_empty()) {
        (false, false) => format!("{kind}: {text}"),
        (false, true) => kind.to_string(),
        (true, _) => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PrometheusCheck;
    use serde_json::json;

    fn lt(bound: f64) -> Threshold {
        format!("< {bound}").parse().unwrap()
    }

    fn vector(values: &[&str]) -> Value {
        let result: Vec<Value> = values
            .iter()
            .enumerate()
            .map(|(i, v)| json!({"metric": {"pod": format!("p{i}")}, "value": [1700000000.123, v]}))
            .collect();
        json!({"status": "success", "data": {"resultType": "vector", "result": result}})
    }

    #[test]
    fn renders_every_variable() {
        let vars = TemplateVars {
            plan: "shop".into(),
            namespace: "prod".into(),
            component: "web".into(),
            revision: "7f3c".into(),
            stable_revision: "2b9d".into(),
            baseline_revision: String::new(),
        };
        assert_eq!(
            render_query(
                r#"sum(rate(errors{ns="{{namespace}}",app="{{ plan }}-{{component}}",rev="{{revision}}"}[1m]))"#,
                &vars
            ),
            r#"sum(rate(errors{ns="prod",app="shop-web",rev="7f3c"}[1m]))"#
        );
        assert_eq!(render_query("{{revision}}{{revision}}", &vars), "7f3c7f3c");
        assert_eq!(
            render_query("{{revision}}/{{ stableRevision }}", &vars),
            "7f3c/2b9d"
        );
        assert!(compares_with_stable("x{r=\"{{ stableRevision }}\"}"));
        assert!(!compares_with_stable(
            "x{r=\"{{revision}}\"} {{stableRevision"
        ));
    }

    #[test]
    fn leaves_unknown_and_unclosed_placeholders() {
        let vars = TemplateVars {
            plan: "shop".into(),
            ..Default::default()
        };
        assert_eq!(
            render_query("up{a=\"{{other}}\"}", &vars),
            "up{a=\"{{other}}\"}"
        );
        assert_eq!(render_query("{{plan}} {{plan", &vars), "shop {{plan");
        assert_eq!(render_query("no placeholders", &vars), "no placeholders");
        assert_eq!(render_query("", &vars), "");
        assert_eq!(render_query("{{}}{{plan}}", &vars), "{{}}shop");
    }

    #[test]
    fn builds_the_query_url() {
        let u = query_url(
            "http://prom.monitoring:9090/",
            "sum(x{a=\"b\"}) / 2",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(u.path(), "/api/v1/query");
        let pairs: Vec<(String, String)> = u.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("query".to_string(), "sum(x{a=\"b\"}) / 2".to_string()),
                ("timeout".to_string(), "10s".to_string())
            ]
        );
        let u = query_url("https://h/prometheus", "up", Duration::from_secs(5)).unwrap();
        assert_eq!(u.path(), "/prometheus/api/v1/query");
        assert!(query_url("not a url", "up", Duration::from_secs(1)).is_err());
        assert!(query_url("mailto:a@b", "up", Duration::from_secs(1)).is_err());
        // `?` and `#` in the address change neither the path nor the query.
        for address in [
            "http://h:9090/prom?x=1#",
            "http://h:9090/prom#/x",
            "http://h:9090/prom/?query=vector(0)&",
            "http://h:9090/prom?query=vector(0)#",
        ] {
            let u = query_url(address, "up", Duration::from_secs(5)).unwrap();
            assert_eq!(
                u.as_str(),
                "http://h:9090/prom/api/v1/query?query=up&timeout=5s",
                "{address}"
            );
        }
        let e = query_url("http://u:pw@h:bad/?token=t", "up", Duration::from_secs(1)).unwrap_err();
        assert!(!e.contains("pw") && !e.contains("token"), "{e}");
    }

    #[test]
    fn error_text_only_when_allowed() {
        let body = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert_eq!(
            interpret(&body, &lt(0.05), 0),
            GateResult::Error {
                reason: "prometheus query failed: bad_data".into()
            }
        );
        let body = json!({"status": "error", "errorType": "s3cret", "error": "s3cret"});
        assert_eq!(
            interpret(&body, &lt(0.05), 0),
            GateResult::Error {
                reason: "prometheus query failed".into()
            }
        );
        let body =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1, "s3cret"]}});
        assert_eq!(
            interpret(&body, &lt(0.05), 0),
            GateResult::Error {
                reason: "unexpected prometheus answer: sample value is not a number".into()
            }
        );
    }

    #[test]
    fn applies_defaults() {
        let gate = PrometheusGate {
            name: "errors".into(),
            check: PrometheusCheck {
                address: "http://p:9090".into(),
                query: "up".into(),
                threshold: ">= 1".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let s = PrometheusSpec::parse(&gate).unwrap();
        assert_eq!(s.threshold, ">= 1".parse().unwrap());
        assert_eq!(s.interval, Duration::from_secs(30));
        assert_eq!((s.failure_limit, s.inconclusive_limit), (0, 3));
        assert_eq!(s.timeout, Duration::from_secs(10));
        let mut gate = gate;
        gate.check.interval = Some("1m30s".into());
        gate.check.failure_limit = Some(2);
        gate.check.inconclusive_limit = Some(0);
        gate.check.timeout_seconds = Some(3);
        let s = PrometheusSpec::parse(&gate).unwrap();
        assert_eq!(s.interval, Duration::from_secs(90));
        assert_eq!((s.failure_limit, s.inconclusive_limit), (2, 0));
        assert_eq!(s.timeout, Duration::from_secs(3));
        let mut bad = gate.clone();
        bad.check.threshold = "0.05".into();
        assert_eq!(PrometheusSpec::parse(&bad).unwrap_err().0, "threshold");
        let mut bad = gate;
        bad.check.interval = Some("soon".into());
        assert_eq!(PrometheusSpec::parse(&bad).unwrap_err().0, "interval");
        assert_eq!(timeout_of(Some(0)), Duration::from_secs(1));
    }

    #[test]
    fn scalar_is_compared() {
        let body = json!({"status": "success", "data": {"resultType": "scalar", "result": [1700000000, "0.01"]}});
        assert_eq!(
            interpret(&body, &lt(0.05), 200),
            GateResult::Pass { value: 0.01 }
        );
        assert_eq!(
            interpret(&body, &lt(0.001), 200),
            GateResult::Fail {
                value: Some(0.01),
                reason: "value 0.01 is not < 0.001".into()
            }
        );
    }

    #[test]
    fn vector_of_one_is_compared() {
        assert_eq!(
            interpret(&vector(&["0.2"]), &lt(0.05), 200),
            GateResult::Fail {
                value: Some(0.2),
                reason: "value 0.2 is not < 0.05".into()
            }
        );
        assert_eq!(
            interpret(&vector(&["0"]), &lt(0.05), 200),
            GateResult::Pass { value: 0.0 }
        );
    }

    #[test]
    fn empty_vector_is_inconclusive() {
        let r = interpret(&vector(&[]), &lt(0.05), 200);
        assert_eq!(
            r,
            GateResult::Inconclusive {
                reason: "query returned no data".into()
            }
        );
    }

    #[test]
    fn several_series_are_inconclusive() {
        let r = interpret(&vector(&["0.01", "0.02"]), &lt(0.05), 200);
        match r {
            GateResult::Inconclusive { reason } => assert!(reason.contains("2 series"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn nan_is_inconclusive_never_a_pass() {
        for t in ["< 0.05", "!= 0", ">= 0"] {
            let r = interpret(&vector(&["NaN"]), &t.parse().unwrap(), 200);
            assert!(matches!(r, GateResult::Inconclusive { .. }), "{t}: {r:?}");
        }
    }

    #[test]
    fn infinities_are_compared() {
        assert_eq!(
            interpret(&vector(&["+Inf"]), &lt(0.05), 200),
            GateResult::Fail {
                value: Some(f64::INFINITY),
                reason: "value +Inf is not < 0.05".into()
            }
        );
        assert_eq!(
            interpret(&vector(&["-Inf"]), &lt(0.05), 200),
            GateResult::Pass {
                value: f64::NEG_INFINITY
            }
        );
    }

    #[test]
    fn error_status_is_an_error() {
        let body =
            json!({"status": "error", "errorType": "bad_data", "error": "parse error at char 5"});
        assert_eq!(
            interpret(&body, &lt(0.05), 200),
            GateResult::Error {
                reason: "prometheus query failed: bad_data: parse error at char 5".into()
            }
        );
        let body = json!({"status": "error"});
        assert!(matches!(
            interpret(&body, &lt(0.05), 200),
            GateResult::Error { .. }
        ));
    }

    #[test]
    fn matrix_and_string_are_inconclusive() {
        let body = json!({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {}, "values": [[1700000000, "0.01"], [1700000001, "0.02"]]}
        ]}});
        match interpret(&body, &lt(0.05), 200) {
            GateResult::Inconclusive { reason } => assert!(reason.contains("matrix"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let body = json!({"status": "success", "data": {"resultType": "string", "result": [1700000000, "x"]}});
        assert!(matches!(
            interpret(&body, &lt(0.05), 200),
            GateResult::Inconclusive { .. }
        ));
    }

    #[test]
    fn malformed_answers_are_errors() {
        let cases = [
            json!({}),
            json!({"status": "success"}),
            json!({"status": "success", "data": {}}),
            json!({"status": "success", "data": {"resultType": "vector", "result": {}}}),
            json!({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}),
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1, 0.5]}}),
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1, "lots"]}}),
            json!({"status": "success", "data": {"resultType": "scalar"}}),
            json!([1, 2]),
        ];
        for body in cases {
            let r = interpret(&body, &lt(0.05), 200);
            assert!(matches!(r, GateResult::Error { .. }), "{body}: {r:?}");
        }
    }

    #[test]
    fn sample_values() {
        assert_eq!(parse_sample("1e-3"), Some(0.001));
        assert_eq!(parse_sample("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_sample("-Inf"), Some(f64::NEG_INFINITY));
        assert!(parse_sample("NaN").unwrap().is_nan());
        assert_eq!(parse_sample(""), None);
    }
}
