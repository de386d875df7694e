//! The reconcile against a fake API server in this process: the finalizer's
//! exits, a refused write, a write with no answer, a 409, a NotFound and a
//! status write whose answer is lost, each in milliseconds. The fake answers
//! by method and path and records every request, so a test says exactly
//! which writes a path makes. (The cluster tests keep proving the same paths
//! against the real API server; these pin the controller's own logic.)

use super::context::Context;
use super::error::Error;
use super::events::Events;
use super::gates::GateRunner;
use super::index::PlanCache;
use super::memory::Memory;
use super::queue::Queue;
use super::reconcile::reconcile_inner;
use super::templates::TemplateCaches;
use crate::api::ReleasePlan;
use crate::api::cached::CachedPlan;
use crate::gates::access::CredentialReader;
use crate::gates::outbound::{GateHttp, OutboundPolicy};
use crate::ops::liveness::Liveness;
use crate::ops::metrics::Metrics;
use kube::Client;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the fake received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

impl Seen {
    /// The request as the fake records it: method, path and JSON body.
    async fn of(req: http::Request<kube::client::Body>) -> Seen {
        let method = req.method().to_string();
        let path = req.uri().path().to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Seen { method, path, body }
    }

    fn is(&self, method: &str, path_end: &str) -> bool {
        self.method == method && self.path.ends_with(path_end)
    }
}

/// What the fake does with a request.
enum Reply {
    /// Answers with this code and JSON body.
    Answer(u16, Value),
    /// Drops the connection: the client sees a transport error.
    NoAnswer,
    /// Never answers (an answer lost on a connection that stays open).
    Hang,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A client of a fake API server answering with `handler`, and its request log.
fn fake(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> (Client, Log) {
    let log: Log = Arc::default();
    let handler = Arc::new(handler);
    let recorded = Arc::clone(&log);
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (handler, log) = (Arc::clone(&handler), Arc::clone(&recorded));
        async move {
            let seen = Seen::of(req).await;
            let reply = handler(&seen);
            log.lock().unwrap().push(seen);
            match reply {
                Reply::Answer(code, body) => Ok(http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap()),
                Reply::NoAnswer => Err(std::io::Error::other("connection reset by peer")),
                Reply::Hang => std::future::pending().await,
            }
        }
    });
    (Client::new(svc, "ns"), log)
}

/// A Status answer.
fn status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Answer(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "message": message, "code": code}),
    )
}

/// The request's object, as written, with a resourceVersion: what the API
/// server answers to a create, apply or replace.
fn echo(seen: &Seen, version: &str) -> Reply {
    let mut body = seen.body.clone();
    body["metadata"]["resourceVersion"] = json!(version);
    body["metadata"]["uid"] = json!("uid-of-echo");
    Reply::Answer(200, body)
}

/// A context whose caches are empty and listed, on `client`.
fn context(client: Client) -> Arc<Context> {
    context_with_deadline(client, Duration::from_secs(100))
}

/// The same, with a reconcile deadline of `deadline`.
fn context_with_deadline(client: Client, deadline: Duration) -> Arc<Context> {
    // The gate client is built with the process's crypto provider, as main does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = Arc::new(Metrics::new());
    let (plans, _) = reflector::store::<CachedPlan>();
    let plan_cache = plans.clone();
    let (wake, _) = futures::channel::mpsc::unbounded();
    let (wake_serving, _) = futures::channel::mpsc::unbounded();
    let http = GateHttp::new(OutboundPolicy {
        deny: Vec::new(),
        allow: Vec::new(),
        error_body_chars: 0,
    })
    .unwrap();
    let gates = GateRunner::new(
        http,
        CredentialReader::new(client.clone(), "ops".into()),
        crate::controller::policy::PolicyCaches::none(crate::gates::policy::Mode::Optional),
        crate::gates::budget::GateBudget::new(crate::gates::budget::Limits::NONE),
        Arc::clone(&metrics),
        wake,
        plans,
    );
    let (namespaced, _) = reflector::store();
    let (cluster, _) = reflector::store();
    let reporter = Reporter {
        controller: "releaseplan".into(),
        instance: None,
    };
    let (events, _publisher) = Events::start(client.clone(), reporter, Arc::clone(&metrics));
    let notifier = crate::controller::notify::Notifier::start(
        client.clone(),
        GateHttp::new(OutboundPolicy::default()).unwrap(),
        CredentialReader::new(client.clone(), "ops".into()),
        crate::controller::policy::PolicyCaches::none(crate::gates::policy::Mode::Optional),
        events.clone(),
        Arc::clone(&metrics),
        crate::controller::notify::NotifySettings::default(),
    );
    Arc::new(Context {
        client,
        deployments: PlanCache::empty(),
        stateful_sets: PlanCache::empty(),
        daemon_sets: PlanCache::empty(),
        templates: PlanCache::empty(),
        pods: PlanCache::empty(),
        jobs: PlanCache::empty(),
        services: PlanCache::empty(),
        scales: PlanCache::empty(),
        hpas: PlanCache::empty(),
        routes: crate::controller::router::Routes::empty(),
        events,
        notifier,
        queue: Arc::new(Queue::new(Arc::clone(&metrics))),
        metrics,
        gates,
        serving: super::serving::ServingProbes::new(reqwest::Client::new(), wake_serving),
        policy: crate::controller::policy::PolicyCaches::none(crate::gates::policy::Mode::Optional),
        freezes: crate::controller::freeze::FreezeCaches::none(),
        gate_templates: TemplateCaches {
            namespaced,
            cluster,
        },
        config: super::config_cache::ConfigScope::off(),
        job_pod_security: crate::gates::pod_security::Level::default(),
        liveness: Liveness::new(Duration::from_secs(60)),
        reconcile_deadline: deadline,
        memory: Arc::new(Memory::default()),
        plans: plan_cache,
        hashes: super::hashes::HashMemo::default(),
    })
}

/// Plan `shop` in namespace `ns` at resourceVersion 5, with one component,
/// `extra` merged into its metadata.
fn plan(extra: &Value) -> Arc<ReleasePlan> {
    let mut v = json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
        "metadata": {"name": "shop", "namespace": "ns", "uid": "u1",
                     "resourceVersion": "5", "generation": 1},
        "spec": {"components": [{"name": "web", "replicas": 2, "template": {
            "metadata": {"labels": {"app": "shop"}},
            "spec": {"containers": [{"name": "app", "image": "shop:1"}]}}}]}
    });
    if let (Some(m), Some(e)) = (v["metadata"].as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

fn with_finalizer() -> Value {
    json!({"finalizers": ["releaseplan.io/finalizer"]})
}

/// The Events the fake received, by reason, after the publisher had time.
async fn events(log: &Log) -> Vec<String> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    log.lock()
        .unwrap()
        .iter()
        .filter(|s| s.is("POST", "/events"))
        .map(|s| s.body["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn writes(log: &Log) -> Vec<(String, String)> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|s| !s.path.ends_with("/events"))
        .map(|s| (s.method.clone(), s.path.clone()))
        .collect()
}

/// Answers the writes of a first reconcile: templates and Deployments
/// applied, status replaced (at resourceVersion 6), Events created.
fn happy(seen: &Seen) -> Reply {
    if seen.path.ends_with("/status") {
        echo(seen, "6")
    } else {
        echo(seen, "1")
    }
}

#[tokio::test]
async fn a_deleted_plan_whose_finalizer_is_gone_ends_without_a_request() {
    let (client, log) = fake(|_| status(500, "InternalError", "no request expected"));
    let ctx = context(client);
    let p = plan(&json!({"deletionTimestamp": "2026-12-01T00:00:00Z", "finalizers": ["other"]}));
    let action = reconcile_inner(&p, &ctx).await.unwrap().action;
    assert_eq!(action, Action::await_change());
    assert!(log.lock().unwrap().is_empty(), "{:?}", log.lock().unwrap());
}

#[tokio::test]
async fn foreground_deletion_only_removes_the_finalizer() {
    let deleted = json!({"deletionTimestamp": "2026-12-01T00:00:00Z",
        "finalizers": ["releaseplan.io/finalizer", "foregroundDeletion"]});
    let p = plan(&deleted);
    // The API server answers a merge patch with the whole patched object.
    let mut patched = serde_json::to_value(&*p).unwrap();
    patched["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
    let (client, log) = fake(move |_| Reply::Answer(200, patched.clone()));
    let ctx = context(client);
    let action = reconcile_inner(&p, &ctx).await.unwrap().action;
    assert_eq!(action, Action::await_change());
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].is("PATCH", "/namespaces/ns/releaseplans/shop"));
    // Guarded by the version read, and keeping the other finalizer.
    assert_eq!(
        log[0].body["metadata"],
        json!({"finalizers": ["foregroundDeletion"], "resourceVersion": "5"})
    );
}

#[tokio::test]
async fn a_finalizer_patch_that_conflicts_is_a_conflict_and_writes_nothing_else() {
    let (client, log) = fake(|_| status(409, "Conflict", "the object has been modified"));
    let ctx = context(client);
    let err = reconcile_inner(&plan(&json!({})), &ctx).await.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert_eq!(err.kind(), "conflict");
    assert_eq!(writes(&log).len(), 1);
}

#[tokio::test]
async fn a_plan_gone_before_its_finalizer_is_added_ends_quietly() {
    let (client, log) = fake(|_| status(404, "NotFound", "releaseplans \"shop\" not found"));
    let ctx = context(client);
    let action = reconcile_inner(&plan(&json!({})), &ctx)
        .await
        .unwrap()
        .action;
    assert_eq!(action, Action::await_change());
    assert_eq!(writes(&log).len(), 1);
    assert!(events(&log).await.is_empty());
}

#[tokio::test]
async fn a_refused_deployment_reaches_status_and_its_event_then_fails_the_reconcile() {
    let (client, log) = fake(|seen| {
        if seen.is("PATCH", "") && seen.path.contains("/deployments/") {
            status(
                422,
                "Invalid",
                "spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000",
            )
        } else {
            happy(seen)
        }
    });
    let ctx = context(client);
    let err = reconcile_inner(&plan(&with_finalizer()), &ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err}");
    assert_eq!(err.kind(), "refused");
    let log_now = log.lock().unwrap().clone();
    let put = log_now
        .iter()
        .find(|s| s.is("PUT", "/releaseplans/shop/status"))
        .expect("the status is written");
    let stalled = put.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Stalled")
        .unwrap()
        .clone();
    assert_eq!(stalled["reason"], "DeploymentRefused", "{stalled}");
    assert!(
        stalled["message"]
            .as_str()
            .unwrap()
            .contains("containerPort"),
        "{stalled}"
    );
    assert!(
        events(&log)
            .await
            .contains(&"DeploymentRefused".to_string())
    );
}

#[tokio::test]
async fn a_deployment_write_without_answer_is_unavailable_never_refused() {
    let (client, log) = fake(|seen| {
        if seen.path.contains("/deployments/") {
            Reply::NoAnswer
        } else {
            happy(seen)
        }
    });
    let ctx = context(client);
    let err = reconcile_inner(&plan(&with_finalizer()), &ctx)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unavailable {
                answered: false,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.kind(), "transport");
    let log_now = log.lock().unwrap().clone();
    let put = log_now
        .iter()
        .find(|s| s.is("PUT", "/releaseplans/shop/status"))
        .expect("the status is written");
    let conditions = put.body["status"]["conditions"].as_array().unwrap().clone();
    let reason = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| (c["status"].clone(), c["reason"].clone()))
            .unwrap()
    };
    assert_eq!(
        reason("Reconciling"),
        (json!("True"), json!("ApiUnavailable"))
    );
    assert_eq!(reason("Stalled").0, json!("False"));
    let reasons = events(&log).await;
    assert!(
        reasons.contains(&"ApiUnavailable".to_string()),
        "{reasons:?}"
    );
    assert!(
        !reasons.contains(&"DeploymentRefused".to_string()),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn a_status_conflict_reads_the_plan_again_and_publishes_nothing() {
    let (client, log) = fake(|seen| {
        if seen.is("PUT", "/status") {
            status(409, "Conflict", "the object has been modified")
        } else if seen.is("GET", "/releaseplans/shop") {
            let mut p = serde_json::to_value(&*plan(&with_finalizer())).unwrap();
            p["metadata"]["resourceVersion"] = json!("7");
            Reply::Answer(200, p)
        } else {
            happy(seen)
        }
    });
    let ctx = context(client);
    let err = reconcile_inner(&plan(&with_finalizer()), &ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(writes(&log).iter().any(|(m, _)| m == "GET"));
    let key = ObjectRef::new("shop").within("ns");
    let fresh = ctx
        .memory
        .read(&key, |m| {
            m.fresh
                .as_ref()
                .map(|f| f.metadata.resource_version.clone())
        })
        .flatten()
        .flatten();
    assert_eq!(fresh.as_deref(), Some("7"), "the re-read plan is kept");
    assert!(
        events(&log).await.is_empty(),
        "no Event for an unwritten transition"
    );
}

/// The status a fake answered to the first PUT, as the plan at version 6.
fn landed(log: &Log) -> Arc<ReleasePlan> {
    let put = log
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.is("PUT", "/status"))
        .cloned()
        .expect("a status write");
    let mut p = put.body;
    p["metadata"]["resourceVersion"] = json!("6");
    Arc::new(serde_json::from_value(p).unwrap())
}

/// A fake whose status writes get no answer until the flag is set; the
/// other writes are answered.
fn status_answers_lost() -> (Client, Log, Arc<std::sync::atomic::AtomicBool>) {
    status_answers(|| Reply::NoAnswer)
}

/// A fake whose status writes get `reply` until the flag is set; the other
/// writes are answered.
fn status_answers(reply: fn() -> Reply) -> (Client, Log, Arc<std::sync::atomic::AtomicBool>) {
    let answer_status = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answer = Arc::clone(&answer_status);
    let (client, log) = fake(move |seen| {
        if seen.is("PUT", "/status") && !answer.load(std::sync::atomic::Ordering::Relaxed) {
            reply()
        } else {
            happy(seen)
        }
    });
    (client, log, answer_status)
}

#[tokio::test]
async fn a_status_write_whose_answer_is_lost_publishes_its_events_once_read_back() {
    let (client, log, answer_status) = status_answers_lost();
    let ctx = context(client);
    let err = reconcile_inner(&plan(&with_finalizer()), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "transport", "{err}");
    assert!(
        events(&log).await.is_empty(),
        "no Event before the transition is known to be written"
    );

    // The next reconcile reads the plan with the written status: it landed.
    answer_status.store(true, std::sync::atomic::Ordering::Relaxed);
    let read_back = landed(&log);
    let _ = reconcile_inner(&read_back, &ctx).await;
    let after_first = events(&log).await;
    assert_eq!(after_first, vec!["RolloutStarted".to_string()]);
    // Published once: a later reconcile of the same plan adds none.
    let _ = reconcile_inner(&read_back, &ctx).await;
    assert_eq!(events(&log).await, after_first);
}

#[tokio::test]
async fn a_status_write_whose_answer_is_lost_and_that_did_not_land_publishes_nothing() {
    let (client, log) = fake(|seen| {
        if seen.is("PUT", "/status") {
            Reply::NoAnswer
        } else {
            happy(seen)
        }
    });
    let ctx = context(client);
    let _ = reconcile_inner(&plan(&with_finalizer()), &ctx).await;
    // Read back at a newer version (a spec edit) without the written status.
    let mut moved = (*plan(&with_finalizer())).clone();
    moved.metadata.resource_version = Some("9".into());
    let key = ObjectRef::from_obj(&moved);
    super::write::confirm_unanswered(&ctx, &moved);
    assert!(
        ctx.memory
            .read(&key, |m| m.unconfirmed.is_empty())
            .unwrap_or(true),
        "a write that did not land is dropped"
    );
    assert!(events(&log).await.is_empty());
}

#[tokio::test]
async fn a_landed_write_is_confirmed_even_after_later_retries_lost_their_answers_too() {
    let (client, log, answer_status) = status_answers_lost();
    let ctx = context(client);
    let p = plan(&with_finalizer());
    // The first write landed (its answer was lost); the cache still shows
    // the old version, so the retry decides the same transition again, and
    // its write gets no answer either (it could not have landed).
    let _ = reconcile_inner(&p, &ctx).await;
    let first = landed(&log);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = reconcile_inner(&p, &ctx).await;
    assert!(events(&log).await.is_empty());
    // Read back: the first write's status. Its Events go out, once.
    answer_status.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = reconcile_inner(&first, &ctx).await;
    let published = events(&log).await;
    assert_eq!(published, vec!["RolloutStarted".to_string()]);
    let _ = reconcile_inner(&first, &ctx).await;
    assert_eq!(events(&log).await, published);
}

/// A fake whose status writes are never answered until the flag is set.
fn status_answers_hang() -> (Client, Log, Arc<std::sync::atomic::AtomicBool>) {
    status_answers(|| Reply::Hang)
}

#[tokio::test]
async fn a_reconcile_that_never_ends_is_given_up_at_its_deadline() {
    let (client, log, _) = status_answers_hang();
    let ctx = context_with_deadline(client, Duration::from_millis(300));
    let cached = Arc::new(CachedPlan::new(&plan(&with_finalizer())).unwrap());
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        super::reconcile::reconcile(cached, ctx),
    )
    .await
    .expect("the reconcile outlived its deadline")
    .unwrap_err();
    assert!(matches!(err, Error::Deadline(_)), "{err}");
    assert_eq!(err.kind(), "deadline");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(log.lock().unwrap().iter().any(|s| s.is("PUT", "/status")));
}

#[tokio::test]
async fn a_reconcile_given_up_in_its_status_write_publishes_its_events_once_read_back() {
    let (client, log, answer_status) = status_answers_hang();
    let ctx = context(client);
    // Cut in the middle of the status write, as the reconcile deadline does:
    // the future is dropped, no answer is ever read.
    let cut = tokio::time::timeout(
        Duration::from_millis(300),
        reconcile_inner(&plan(&with_finalizer()), &ctx),
    )
    .await;
    assert!(cut.is_err(), "the status write hangs");
    assert!(
        events(&log).await.is_empty(),
        "no Event before the transition is known to be written"
    );
    // The next reconcile reads the plan with the written status: it landed,
    // and its transition's Events go out, once.
    answer_status.store(true, std::sync::atomic::Ordering::Relaxed);
    let read_back = landed(&log);
    let _ = reconcile_inner(&read_back, &ctx).await;
    let published = events(&log).await;
    assert_eq!(published, vec!["RolloutStarted".to_string()]);
    let _ = reconcile_inner(&read_back, &ctx).await;
    assert_eq!(events(&log).await, published);
}

/// A first reconcile of the plan (with its finalizer) against a fake that
/// answers every write.
async fn first_reconcile() -> (Arc<Context>, Log) {
    let (client, log) = fake(happy);
    let ctx = context(client);
    reconcile_inner(&plan(&with_finalizer()), &ctx)
        .await
        .unwrap();
    (ctx, log)
}

/// A first reconcile's status write needs no reconcile when it lands: the
/// decision on the plan as written does nothing new (the Deployments it made
/// wake the plan when they show in the cache). Another version of the plan,
/// a user's change, still wakes it.
#[tokio::test]
async fn a_status_write_that_settles_is_marked_quiet_for_its_watch_event() {
    let (ctx, log) = first_reconcile().await;
    assert!(
        writes(&log)
            .iter()
            .any(|(m, p)| m == "PUT" && p.ends_with("/releaseplans/shop/status")),
        "{:?}",
        writes(&log)
    );
    // The plan at the version the reconcile decided on (5: its finalizer
    // patch landing, which may come after the write) wakes nothing either,
    // and leaves the mark for the write's own landing.
    assert!(ctx.queue.quiet_landing(Some("ns"), "shop", Some("5")));
    assert!(ctx.queue.quiet_landing(Some("ns"), "shop", Some("6")));
    // Only once: a second event at that version (a relist) is not ours to skip.
    assert!(!ctx.queue.quiet_landing(Some("ns"), "shop", Some("6")));
    assert!(!ctx.queue.quiet_landing(Some("ns"), "shop", Some("5")));

    // Landed at another version first (someone wrote in between): it wakes.
    let (ctx, _) = first_reconcile().await;
    assert!(!ctx.queue.quiet_landing(Some("ns"), "shop", Some("7")));
    assert!(!ctx.queue.quiet_landing(Some("ns"), "shop", Some("6")));
}

/// A reconcile woken before its own Deployment apply has come back through
/// the watch (by the status write that followed it, say) finds the answer to
/// that apply, not an empty cache: it applies nothing again, and comes back
/// by the time the answer stops standing in for the cache.
#[tokio::test]
async fn a_reconcile_before_its_apply_is_cached_does_not_apply_again() {
    let (ctx, log) = first_reconcile().await;
    let applies = |log: &Log| {
        writes(log)
            .iter()
            .filter(|(m, p)| m == "PATCH" && p.contains("/deployments/"))
            .count()
    };
    assert_eq!(applies(&log), 1, "{:?}", writes(&log));
    let action = reconcile_inner(&landed(&log), &ctx).await.unwrap().action;
    assert_eq!(applies(&log), 1, "applied again: {:?}", writes(&log));
    assert!(
        action != Action::await_change(),
        "a stand-in must bring the reconcile back"
    );
}

/// A reconcile's template hashes are kept for the plan's next reconcile at
/// the same generation (it then serializes no template to hash it), named
/// the Deployment as hashing directly does, and go with the plan.
#[tokio::test]
async fn a_reconcile_keeps_its_template_hashes_until_the_plan_goes() {
    let (ctx, log) = first_reconcile().await;
    assert_eq!(ctx.hashes.len(), 1);
    let p = plan(&with_finalizer());
    let hash = crate::api::revision::template_hash(&p.spec.components[0].template);
    assert!(
        writes(&log)
            .iter()
            .any(|(m, path)| m == "PATCH"
                && path.ends_with(&format!("/deployments/shop-web-{hash}"))),
        "{:?}",
        writes(&log)
    );
    ctx.forget(&ObjectRef::from_obj(&*p));
    assert_eq!(ctx.hashes.len(), 0);
}

/// A new revision's Deployment is applied while its template is being
/// stored, not after: the ControllerRevision's answer is held until the
/// Deployment's apply arrives (or 5 s pass), and the Deployment must arrive
/// first.
#[tokio::test]
async fn a_new_revisions_deployment_does_not_wait_for_its_stored_template() {
    let order: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let applied = Arc::new(tokio::sync::Notify::new());
    let svc = {
        let (order, applied) = (Arc::clone(&order), Arc::clone(&applied));
        tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (order, applied) = (Arc::clone(&order), Arc::clone(&applied));
            async move {
                let seen = Seen::of(req).await;
                if seen.is("PATCH", "") && seen.path.contains("/controllerrevisions/") {
                    let _ = tokio::time::timeout(Duration::from_secs(5), applied.notified()).await;
                    order.lock().unwrap().push("template answered");
                } else if seen.is("PATCH", "") && seen.path.contains("/deployments/") {
                    order.lock().unwrap().push("deployment applied");
                    applied.notify_one();
                }
                let Reply::Answer(code, body) = happy(&seen) else {
                    unreachable!()
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                )
            }
        })
    };
    let ctx = context(Client::new(svc, "ns"));
    reconcile_inner(&plan(&with_finalizer()), &ctx)
        .await
        .unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["deployment applied", "template answered"]
    );
}

/// A plan's config copies are read and created at once, not one after the
/// other: the ConfigMap source's answer is held until the Secret source's
/// read arrives (or 5 s pass), and that read must come first. Both copies
/// are then made, and neither holds its revision back.
#[tokio::test]
async fn a_plans_config_copies_are_made_at_once() {
    use crate::api::config::{ConfigKind, digest_of_map, digest_of_secret};
    use crate::plan::config::{ConfigIntents, CopyIntent};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use std::collections::BTreeMap;

    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "shop-conf", "namespace": "ns"}, "data": {"a": "1"}}))
    .unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shop-keys", "namespace": "ns"}, "data": {"k": "dg=="}}))
    .unwrap();
    let intents = ConfigIntents {
        create: vec![
            CopyIntent {
                kind: ConfigKind::ConfigMap,
                source: "shop-conf".into(),
                name: "shop-conf-1".into(),
                digest: digest_of_map(&map),
            },
            CopyIntent {
                kind: ConfigKind::Secret,
                source: "shop-keys".into(),
                name: "shop-keys-1".into(),
                digest: digest_of_secret(&secret),
            },
        ],
        delete: Vec::new(),
    };
    let order: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let secret_read = Arc::new(tokio::sync::Notify::new());
    let svc = {
        let (order, secret_read) = (Arc::clone(&order), Arc::clone(&secret_read));
        let (map, secret) = (
            serde_json::to_value(&map).unwrap(),
            serde_json::to_value(&secret).unwrap(),
        );
        tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (order, secret_read) = (Arc::clone(&order), Arc::clone(&secret_read));
            let (map, secret) = (map.clone(), secret.clone());
            async move {
                let seen = Seen::of(req).await;
                let answer = if seen.is("GET", "/configmaps/shop-conf") {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), secret_read.notified()).await;
                    order.lock().unwrap().push("configmap source answered");
                    map
                } else if seen.is("GET", "/secrets/shop-keys") {
                    order.lock().unwrap().push("secret source read");
                    secret_read.notify_one();
                    secret
                } else {
                    assert_eq!(seen.method, "POST", "{seen:?}");
                    order.lock().unwrap().push("copy created");
                    seen.body
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&answer).unwrap(),
                        ))
                        .unwrap(),
                )
            }
        })
    };
    let ctx = context(Client::new(svc, "ns"));
    let carried_by = BTreeMap::from([
        ("shop-conf-1".to_string(), "web".to_string()),
        ("shop-keys-1".to_string(), "web".to_string()),
    ]);
    let p = plan(&with_finalizer());
    let copied = super::config::act(&ctx, &p, "ns", &intents, &carried_by).await;
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order[..2],
        ["secret source read", "configmap source answered"],
        "{order:?}"
    );
    assert_eq!(order.iter().filter(|s| **s == "copy created").count(), 2);
    assert!(copied.waiting.is_empty(), "{:?}", copied.waiting);
    assert!(copied.refusal.is_none());
}
