//! Model-ready, not just Ready: a model server's readiness probe passes while
//! its weights still load, so the operator asks each pod itself (an
//! OpenAI-compatible `GET /v1/models` naming the expected model) and counts a
//! pod only once it answers.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A request the operator sends to each pod of the component; a pod counts as
/// ready only when it is Ready and has answered it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Serving {
    /// The pod's serving port (a number: it is sent to the pod's IP).
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Path of the request, `GET`. Default `/v1/models`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^/[^ ?#]*$')").message("serving.path must start with / and hold no space, ? or #"))]
    #[schemars(length(max = 256))]
    pub path: Option<String>,
    /// The model the answer must name: an OpenAI-compatible model list
    /// (`data[].id`) holding it. Without it, any 2xx answer counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub model: Option<String>,
    /// How long a new pod may take to load its model and answer (`10m`): a
    /// step's progress deadline is `progressDeadlineSeconds` plus this. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(super::DURATION_RULE).message("serving.warmup must be a duration such as 90s, 10m or 1h"))]
    #[schemars(length(max = 32))]
    pub warmup: Option<String>,
    /// Timeout of one request, in seconds. Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub timeout_seconds: Option<i32>,
}

/// The default path: the model list of an OpenAI-compatible server.
pub const DEFAULT_PATH: &str = "/v1/models";
/// The default timeout of one request.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 2;

impl Serving {
    /// The path asked.
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(DEFAULT_PATH)
    }

    /// The warm-up allowance (0 when unset or unreadable: the CRD refuses
    /// what does not parse).
    pub fn warmup(&self) -> std::time::Duration {
        self.warmup
            .as_deref()
            .and_then(|w| super::time::parse_duration(w).ok())
            .unwrap_or_default()
    }

    /// The timeout of one request.
    pub fn timeout(&self) -> std::time::Duration {
        let s = self
            .timeout_seconds
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .clamp(1, 30);
        std::time::Duration::from_secs(u64::try_from(s).unwrap_or(2))
    }

    /// Whether an answer's body shows the pod serves: any body without
    /// `model`, else a model list naming it.
    pub fn answer_serves(&self, body: &[u8]) -> bool {
        let Some(model) = &self.model else {
            return true;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
            return false;
        };
        v.get("data")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|d| {
                d.iter()
                    .any(|m| m.get("id").and_then(serde_json::Value::as_str) == Some(model))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_list_serves_only_when_it_names_the_model() {
        let s = Serving {
            port: 8000,
            model: Some("llama".into()),
            ..Serving::default()
        };
        assert!(s.answer_serves(br#"{"object":"list","data":[{"id":"llama"}]}"#));
        assert!(!s.answer_serves(br#"{"object":"list","data":[{"id":"mistral"}]}"#));
        assert!(!s.answer_serves(br#"{"object":"list","data":[]}"#));
        assert!(!s.answer_serves(b"loading"));
        let any = Serving {
            port: 8000,
            ..Serving::default()
        };
        assert!(any.answer_serves(b"ok"));
        assert_eq!(any.path(), "/v1/models");
        assert_eq!(any.warmup(), std::time::Duration::ZERO);
    }
}
