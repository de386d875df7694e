//! Model-ready pods (`components[].serving`): a model server's readiness
//! probe passes while its weights still load (vllm-project/vllm#15313), so
//! the operator asks each Ready pod itself, `GET http://<podIP>:<port><path>`,
//! and a revision's ready count is only the pods that have answered.
//!
//! Never on the reconcile path: a reconcile reads what is known and starts
//! the requests it lacks in the background, each with its own timeout; an
//! answer (or a failure, after [`RETRY`]) wakes the plan. What a pod
//! answers is never kept or shown, only whether it answered as asked.

use crate::api::ReleasePlan;
use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;
use releaseplan_core::api::serving::Serving;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tracing::debug;

/// How soon a pod that did not answer is asked again.
pub const RETRY: Duration = Duration::from_secs(5);
/// Most of an answer read (a model list is small).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One pod to ask.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Pod name.
    pub pod: String,
    /// Its IP.
    pub ip: IpAddr,
    /// The component's check.
    pub serving: Serving,
}

#[derive(Debug)]
struct Probe {
    ip: IpAddr,
    answered: bool,
    asked: Option<Instant>,
    in_flight: bool,
}

/// The probes of every plan's pods.
pub struct ServingProbes {
    http: reqwest::Client,
    wake: UnboundedSender<ObjectRef<ReleasePlan>>,
    plans: Mutex<HashMap<ObjectRef<ReleasePlan>, HashMap<String, Probe>>>,
}

impl ServingProbes {
    /// Probes sent with `http` (the gates' client: no redirects, no proxy)
    /// whose results wake plans through `wake`.
    pub fn new(http: reqwest::Client, wake: UnboundedSender<ObjectRef<ReleasePlan>>) -> Arc<Self> {
        Arc::new(ServingProbes {
            http,
            wake,
            plans: Mutex::new(HashMap::new()),
        })
    }

    /// Of `asks` (the plan's Ready pods of components with `serving`), the
    /// pods that have answered. Pods not yet asked, or asked [`RETRY`] ago
    /// without an answer, are asked in the background. Pods not listed (gone,
    /// or no longer Ready) are forgotten: back, they are asked anew.
    pub fn answered(
        self: &Arc<Self>,
        key: &ObjectRef<ReleasePlan>,
        asks: Vec<Ask>,
    ) -> BTreeSet<String> {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        if asks.is_empty() {
            plans.remove(key);
            return BTreeSet::new();
        }
        let probes = plans.entry(key.clone()).or_default();
        probes.retain(|pod, p| asks.iter().any(|a| &a.pod == pod && a.ip == p.ip));
        let now = Instant::now();
        let mut out = BTreeSet::new();
        for ask in asks {
            let p = probes.entry(ask.pod.clone()).or_insert(Probe {
                ip: ask.ip,
                answered: false,
                asked: None,
                in_flight: false,
            });
            if p.answered {
                out.insert(ask.pod);
                continue;
            }
            let due = p.asked.is_none_or(|at| now.duration_since(at) >= RETRY);
            if p.in_flight || !due {
                continue;
            }
            p.in_flight = true;
            p.asked = Some(now);
            let this = Arc::clone(self);
            let key = key.clone();
            tokio::spawn(async move { this.ask(key, ask).await });
        }
        out
    }

    /// Forgets a plan (deleted).
    pub fn forget(&self, key: &ObjectRef<ReleasePlan>) {
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    async fn ask(self: Arc<Self>, key: ObjectRef<ReleasePlan>, ask: Ask) {
        let url = format!(
            "http://{}{}",
            std::net::SocketAddr::new(ask.ip, u16::try_from(ask.serving.port).unwrap_or(80)),
            ask.serving.path()
        );
        let timeout = ask.serving.timeout();
        let answered = tokio::time::timeout(timeout, self.call(&url, &ask.serving))
            .await
            .unwrap_or(false);
        debug!(plan = %key, pod = %ask.pod, %url, answered, "serving check");
        let still = {
            let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
            match plans
                .get_mut(&key)
                .and_then(|m| m.get_mut(&ask.pod))
                .filter(|p| p.ip == ask.ip)
            {
                Some(p) => {
                    p.in_flight = false;
                    p.answered = answered;
                    true
                }
                None => false,
            }
        };
        if !still {
            return;
        }
        if !answered {
            // Asked again at the next reconcile past the retry delay.
            tokio::time::sleep(RETRY).await;
        }
        let _ = self.wake.unbounded_send(key);
    }

    /// One request: a 2xx whose body shows the pod serves.
    async fn call(&self, url: &str, serving: &Serving) -> bool {
        let Ok(response) = self.http.get(url).timeout(serving.timeout()).send().await else {
            return false;
        };
        if !response.status().is_success() {
            return false;
        }
        match crate::gates::http::read_limited(response, MAX_ANSWER_BYTES).await {
            Ok((body, _)) => serving.answer_serves(&body),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{Router, routing::get};
    use futures::StreamExt;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn client() -> reqwest::Client {
        // As main does: the process's crypto provider first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    async fn server(loaded: Arc<AtomicBool>) -> std::net::SocketAddr {
        let app = Router::new().route(
            "/v1/models",
            get(move || {
                let loaded = Arc::clone(&loaded);
                async move {
                    if loaded.load(Ordering::SeqCst) {
                        (
                            axum::http::StatusCode::OK,
                            r#"{"object":"list","data":[{"id":"llama"}]}"#,
                        )
                    } else {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "loading")
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    #[tokio::test]
    async fn a_pod_counts_once_it_names_the_model_and_is_asked_again_until_then() {
        let loaded = Arc::new(AtomicBool::new(false));
        let addr = server(Arc::clone(&loaded)).await;
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let probes = ServingProbes::new(client(), tx);
        let key = ObjectRef::<ReleasePlan>::new("llama").within("prod");
        let ask = Ask {
            pod: "llama-1".into(),
            ip: addr.ip(),
            serving: Serving {
                port: i32::from(addr.port()),
                model: Some("llama".into()),
                ..Serving::default()
            },
        };
        assert!(probes.answered(&key, vec![ask.clone()]).is_empty());
        // The failed answer wakes the plan after the retry delay.
        let woke = tokio::time::timeout(RETRY * 3, rx.next()).await.unwrap();
        assert_eq!(woke, Some(key.clone()));
        assert!(probes.answered(&key, vec![ask.clone()]).is_empty());
        loaded.store(true, Ordering::SeqCst);
        tokio::time::timeout(RETRY * 3, rx.next()).await.unwrap();
        // Asked again (the retry is due): now it answers.
        let mut got = probes.answered(&key, vec![ask.clone()]);
        if got.is_empty() {
            tokio::time::timeout(RETRY * 3, rx.next()).await.unwrap();
            got = probes.answered(&key, vec![ask.clone()]);
        }
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec!["llama-1".to_string()]
        );
        // A pod no longer listed (not Ready) is forgotten.
        assert!(probes.answered(&key, Vec::new()).is_empty());
        assert!(probes.plans.lock().unwrap().get(&key).is_none());
    }

    #[tokio::test]
    async fn a_wrong_model_never_counts() {
        let loaded = Arc::new(AtomicBool::new(true));
        let addr = server(loaded).await;
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let probes = ServingProbes::new(client(), tx);
        let key = ObjectRef::<ReleasePlan>::new("llama").within("prod");
        let ask = Ask {
            pod: "llama-1".into(),
            ip: addr.ip(),
            serving: Serving {
                port: i32::from(addr.port()),
                model: Some("mistral".into()),
                ..Serving::default()
            },
        };
        probes.answered(&key, vec![ask.clone()]);
        tokio::time::timeout(RETRY * 3, rx.next()).await.unwrap();
        assert!(probes.answered(&key, vec![ask]).is_empty());
    }
}
