//! Metrics of the operator's requests to the API server: how many, of which
//! verb on which resource, with which answer, and how long they took
//! (`releaseplan_kube_requests_total`, `releaseplan_kube_request_duration_seconds`).
//!
//! A tower layer under kube's `Client`, inside the `--qps` limit, so a
//! duration is the API server's answer time, not the wait for a token. The
//! labels are read off the request line: the Kubernetes REST path says the
//! resource and whether a name is given, the method and `watch=true` say the
//! verb, the same words as the API server's audit log and client-go's
//! `rest_client_requests_total`.
//!
//! It also tells the liveness check when the API server accepts a watch
//! (a 2xx answer to `watch=true`): the only sign that a watch of a kind that
//! never changes is connected again after a blip.

use crate::ops::liveness::Liveness;
use crate::ops::metrics::Metrics;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};

/// Counts and times the requests of the service it wraps.
#[derive(Clone)]
pub struct RequestMetricsLayer {
    metrics: Arc<Metrics>,
    liveness: Option<Arc<Liveness>>,
}

impl RequestMetricsLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        RequestMetricsLayer {
            metrics,
            liveness: None,
        }
    }

    /// Also tells `liveness` of each watch the API server accepts.
    #[must_use]
    pub fn with_liveness(mut self, liveness: Arc<Liveness>) -> Self {
        self.liveness = Some(liveness);
        self
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> RequestMetrics<S> {
        RequestMetrics {
            inner,
            metrics: Arc::clone(&self.metrics),
            liveness: self.liveness.clone(),
        }
    }
}

/// A service that records each request's verb, resource, answer and duration.
#[derive(Clone)]
pub struct RequestMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
    liveness: Option<Arc<Liveness>>,
}

/// The future of an instrumented request.
type Recorded<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, RB> Service<http::Request<B>> for RequestMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + 'static,
    RB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Recorded<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri());
        let metrics = Arc::clone(&self.metrics);
        let liveness = self.liveness.clone();
        let started = Instant::now();
        // A watch waits for its events by design; any other request waits
        // only for its answer.
        let waiting = liveness
            .as_ref()
            .filter(|_| verb != "watch")
            .map(Liveness::request_started);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            drop(waiting);
            // A server error or no answer is logged too, as kube's tracing
            // layer did before the operator built its own client
            // (`ops::api_client`).
            let code = match &res {
                Ok(r) => {
                    let code = r.status().as_u16().to_string();
                    if r.status().is_server_error() {
                        tracing::warn!(verb, %resource, code = %code, "the API server answered with an error");
                    }
                    code
                }
                Err(e) => {
                    tracing::warn!(verb, %resource, error = %e, "request to the API server failed");
                    "error".to_string()
                }
            };
            if let (Some(l), Ok(r)) = (&liveness, &res)
                && verb == "watch"
                && r.status().is_success()
            {
                l.watch_connected(&resource);
            }
            // A watch answers its headers at once and then streams for
            // minutes: its duration says nothing, its count and code do.
            let elapsed = (verb != "watch").then(|| started.elapsed().as_secs_f64());
            metrics.kube_request(verb, &resource, &code, elapsed);
            res
        })
    }
}

/// The verb and resource of a request to the Kubernetes API, e.g. `("list",
/// "pods")`, `("update", "releaseplans/status")`; `("other", "other")` for a
/// path outside `/api` and `/apis` (discovery of versions, `/version`).
pub fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... (core) or /apis/GROUP/VERSION/...
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return ("other", "other".into()),
    };
    // namespaces/NS/RESOURCE/... is a namespaced resource; `namespaces` and
    // `namespaces/NS` are the Namespace objects themselves.
    let rest = match rest {
        ["namespaces", _ns, inner @ ..] if !inner.is_empty() => inner,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("", false),
        [resource] => (*resource, false),
        [resource, _name] => (*resource, true),
        [resource, _name, sub, ..] => {
            return (verb(method, uri, true), format!("{resource}/{sub}"));
        }
    };
    let resource = if resource.is_empty() {
        // Discovery of a group version's resources.
        "discovery".to_string()
    } else {
        resource.to_string()
    };
    (verb(method, uri, named), resource)
}

/// The API server's verb for `method` on a named object or a collection.
/// Whether a request is a watch (`watch=true` or `watch=1` in its query).
pub fn is_watch(uri: &http::Uri) -> bool {
    query_has(uri, &["watch=true", "watch=1"])
}

/// Whether the query of `uri` has one of `pairs` (`key=value`).
pub(crate) fn query_has(uri: &http::Uri, pairs: &[&str]) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|kv| pairs.contains(&kv)))
}

fn verb(method: &http::Method, uri: &http::Uri, named: bool) -> &'static str {
    let watch = is_watch(uri);
    match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn c(method: Method, uri: &str) -> (&'static str, String) {
        classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn verbs_and_resources_are_read_off_the_request_line() {
        let cases = [
            (
                Method::GET,
                "/apis/apps/v1/deployments?labelSelector=x&watch=true&resourceVersion=1",
                "watch",
                "deployments",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/a/deployments?labelSelector=x",
                "list",
                "deployments",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/a/deployments/web",
                "get",
                "deployments",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/web?fieldManager=releaseplan",
                "patch",
                "deployments",
            ),
            (
                Method::PUT,
                "/apis/releaseplan.dev/v1alpha1/namespaces/a/releaseplans/p/status",
                "update",
                "releaseplans/status",
            ),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/a/events",
                "create",
                "events",
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/a/controllerrevisions/x",
                "delete",
                "controllerrevisions",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/pods",
                "deletecollection",
                "pods",
            ),
            (Method::GET, "/api/v1/namespaces/a", "get", "namespaces"),
            (Method::GET, "/api/v1/namespaces", "list", "namespaces"),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/s/leases/l",
                "update",
                "leases",
            ),
            (
                Method::GET,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/releaseplans.releaseplan.dev",
                "get",
                "customresourcedefinitions",
            ),
            (Method::GET, "/apis/apps/v1", "list", "discovery"),
            (Method::GET, "/version", "other", "other"),
        ];
        for (method, uri, verb, resource) in cases {
            assert_eq!(c(method, uri), (verb, resource.to_string()), "{uri}");
        }
    }

    #[tokio::test]
    async fn each_answer_is_counted_by_code_and_timed_except_watches() {
        let metrics = Arc::new(Metrics::new());
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            let code = if req.method() == Method::PUT {
                409
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(code).body(()).unwrap(),
            )
        });
        let mut svc = RequestMetricsLayer::new(Arc::clone(&metrics)).layer(svc);
        for (method, uri) in [
            (
                Method::PUT,
                "/apis/releaseplan.dev/v1alpha1/namespaces/a/releaseplans/p/status",
            ),
            (Method::GET, "/apis/apps/v1/deployments?watch=true"),
            (Method::GET, "/apis/apps/v1/deployments?watch=true"),
        ] {
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap();
            tower::ServiceExt::oneshot(&mut svc, req).await.unwrap();
        }
        let text = metrics.render();
        assert!(
            text.contains(r#"releaseplan_kube_requests_total{verb="update",resource="releaseplans/status",code="409"} 1"#),
            "{text}"
        );
        assert!(text.contains(
            r#"releaseplan_kube_requests_total{verb="watch",resource="deployments",code="200"} 2"#
        ));
        assert!(
            text.contains(r#"releaseplan_kube_request_duration_seconds_count{verb="update"} 1"#)
        );
        assert!(!text.contains(r#"releaseplan_kube_request_duration_seconds_count{verb="watch"}"#));
    }

    /// Log lines written while the guard lives, on this thread.
    #[derive(Clone, Default)]
    struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_without_an_answer_or_with_a_5xx_is_logged_and_a_conflict_is_not() {
        let lines = Lines::default();
        let writer = lines.clone();
        let _guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish(),
        );
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            match req.uri().path() {
                p if p.contains("/pods") => Err("connection reset".to_string()),
                p if p.contains("/deployments") => {
                    Ok(http::Response::builder().status(503).body(()).unwrap())
                }
                _ => Ok(http::Response::builder().status(409).body(()).unwrap()),
            }
        });
        let mut svc = RequestMetricsLayer::new(Arc::new(Metrics::new())).layer(svc);
        for uri in [
            "/api/v1/namespaces/a/pods",
            "/apis/apps/v1/namespaces/a/deployments/d",
            "/apis/releaseplan.io/v1alpha1/namespaces/a/releaseplans/p/status",
        ] {
            let req = http::Request::builder().uri(uri).body(()).unwrap();
            let _ = tower::ServiceExt::oneshot(&mut svc, req).await;
        }
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("WARN") && text.contains("request to the API server failed"),
            "{text}"
        );
        assert!(
            text.contains("resource=pods") && text.contains("connection reset"),
            "{text}"
        );
        assert!(
            text.contains("resource=deployments") && text.contains("code=503"),
            "{text}"
        );
        assert!(
            !text.contains("releaseplans"),
            "a 409 is an answer, not a failure: {text}"
        );
    }

    #[tokio::test]
    async fn an_accepted_watch_heals_its_liveness_and_a_refused_one_does_not() {
        let metrics = Arc::new(Metrics::new());
        let liveness = Liveness::new(std::time::Duration::from_secs(1));
        let svc = tower::service_fn(|req: http::Request<()>| async move {
            let code = if req.uri().path().contains("/pods") {
                503
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(code).body(()).unwrap(),
            )
        });
        let mut svc = RequestMetricsLayer::new(metrics)
            .with_liveness(Arc::clone(&liveness))
            .layer(svc);
        liveness.watch_result("clustergatetemplates", false);
        liveness.watch_result("pods", false);
        for uri in [
            "/apis/releaseplan.io/v1alpha1/clustergatetemplates?watch=true&resourceVersion=5",
            "/api/v1/namespaces/a/pods?watch=true",
        ] {
            let req = http::Request::builder().uri(uri).body(()).unwrap();
            tower::ServiceExt::oneshot(&mut svc, req).await.unwrap();
        }
        let later = Instant::now() + std::time::Duration::from_secs(5);
        let err = liveness.check(later).unwrap_err();
        assert!(err.contains("pods watch"), "{err}");
        // A list of pods is not the watch being accepted.
        liveness.watch_result("clustergatetemplates", false);
        let req = http::Request::builder()
            .uri("/apis/releaseplan.io/v1alpha1/clustergatetemplates")
            .body(())
            .unwrap();
        tower::ServiceExt::oneshot(&mut svc, req).await.unwrap();
        let err = liveness.check(later).unwrap_err();
        assert!(err.contains("watch"), "{err}");
    }
}
