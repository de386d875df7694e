//! A notification receiver on 127.0.0.1 that records every request it gets
//! (path, headers, JSON body), answering 200; and one that never answers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::Value;

/// One request a receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// The path's last segment (the receiver's name in the tests).
    pub path: String,
    /// Its headers, lowercase names.
    pub headers: Vec<(String, String)>,
    /// Its body, parsed (Null when not JSON).
    pub body: Value,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the recorders got, in arrival order.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Received>>>);

impl Log {
    /// The requests to `path`.
    pub fn at(&self, path: &str) -> Vec<Received> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

async fn record(
    State(log): State<Log>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let headers = headers
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.0.lock().unwrap().push(Received {
        path,
        headers,
        body,
    });
    "ok"
}

/// Serves `POST /<name>` recording each request; returns the address and log.
pub async fn start() -> (SocketAddr, Log) {
    let log = Log::default();
    let app = Router::new()
        .route("/{name}", post(record))
        .with_state(log.clone());
    (super::servers::serve(app).await, log)
}

/// A receiver that records each request into `log` (as [`start`]'s do, so
/// the order of arrivals at both is one) and never answers it.
pub async fn never_answering(log: &Log) -> SocketAddr {
    async fn hang(
        state: State<Log>,
        path: Path<String>,
        headers: HeaderMap,
        body: Bytes,
    ) -> &'static str {
        record(state, path, headers, body).await;
        std::future::pending::<&'static str>().await
    }
    let app = Router::new()
        .route("/{name}", post(hang))
        .with_state(log.clone());
    super::servers::serve(app).await
}

impl Log {
    /// Where in the order of arrivals the first request to `path` whose body
    /// matches `f` came.
    pub fn position(&self, path: &str, f: impl Fn(&Value) -> bool) -> Option<usize> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .position(|r| r.path == path && f(&r.body))
    }
}

/// Applies Secret `name` of `ns` holding receivers' URLs and tokens
/// (`string_data`), shared with `ns` under the gates' credential rules, as
/// a namespace's owners write it for their notifications.
pub async fn put_receivers_secret(client: &kube::Client, ns: &str, name: &str, string_data: Value) {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams};
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "annotations": {"releaseplan.io/gate-namespaces": ns}},
        "stringData": string_data});
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("notify-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply the Secret");
}
