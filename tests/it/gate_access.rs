//! Gates behind authentication and TLS (`auth`, `headers`, `tls`): a CA and a
//! server certificate made here (rcgen) served on 127.0.0.1, Secrets and
//! ConfigMaps on the test cluster read by the operator's credential reader,
//! and whole rollouts with the real operator: credentials pass, a rotated
//! Secret is used at the next evaluation, a wrong one fails the gate and rolls
//! back, and no secret value shows in status, Events, the log or /metrics.
//! Also the gate series of /metrics: they follow the gates of the spec and go
//! with the plan.

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use releaseplan::api::{Health, Phase};
use releaseplan::gates::access::CredentialReader;
use releaseplan::gates::prometheus::TemplateVars;
use releaseplan::gates::{GateContext, GateResult, GateSpec};
use serde_json::{Value, json};
use support::fixtures::web;
use support::operator::{Operator, sum_metric};
use support::plans::{create_stable, patch_spec, set_components, wait_phase};
use support::servers::{Prometheus, closed_port, gate_http, serve};
use support::{Harness, WAIT, wait_until};
use tokio_rustls::rustls;

const SHARED: &str = "releaseplan.io/gate-namespaces";

/// A CA and a server certificate it signed for 127.0.0.1 and localhost.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "releaseplan test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        chain: vec![cert.der().clone()],
        key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    }
}

/// Serves `app` over HTTPS with the certificate of `pki` on a free port of
/// 127.0.0.1 until the test's runtime ends.
async fn serve_tls(app: Router, pki: &Pki) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), pki.key.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: fine.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    addr
}

const SCALAR: &str =
    r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.01"]}}"#;

/// A webhook (`POST /hook`) and a Prometheus (`GET .../api/v1/query`) that
/// answer 200 and 0.01 to anyone.
fn open_app() -> Router {
    Router::new()
        .route("/hook", post(|| async { StatusCode::OK }))
        .route("/api/v1/query", get(|| async { SCALAR }))
}

/// Creates or replaces a Secret (server-side apply), shared with `shared`
/// namespaces by its annotation when given.
async fn put_secret(
    client: &Client,
    ns: &str,
    name: &str,
    data: &[(&str, &str)],
    shared: Option<&str>,
) {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    let mut obj = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "stringData": data});
    if let Some(s) = shared {
        obj["metadata"]["annotations"] = json!({ SHARED: s });
    }
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("gate-access-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply the Secret");
}

async fn put_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
    value: &str,
    shared: Option<&str>,
) {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {key: value}});
    if let Some(s) = shared {
        obj["metadata"]["annotations"] = json!({ SHARED: s });
    }
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("gate-access-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply the ConfigMap");
}

/// The gates of a `spec.health` written as JSON, parsed as the core does.
fn gates(health: Value) -> Vec<GateSpec> {
    let health: Health = serde_json::from_value(health).expect("a health section");
    GateSpec::all(&health.entries().expect("one kind a gate")).expect("valid gates")
}

fn ctx(ns: &str) -> GateContext {
    GateContext {
        vars: TemplateVars {
            plan: "shop".into(),
            namespace: ns.into(),
            ..TemplateVars::default()
        },
        revision: "r1".into(),
        step: 0,
    }
}

/// Evaluates the one gate of `health` as the runner does.
async fn evaluate(reader: &CredentialReader, ns: &str, health: Value) -> GateResult {
    let g = gates(health);
    assert_eq!(g.len(), 1);
    releaseplan::gates::evaluate(
        &g[0],
        &gate_http(),
        reader,
        &releaseplan::gates::policy::NamespacePolicy::open(ns),
        &ctx(ns),
    )
    .await
}

fn error_of(r: &GateResult) -> &str {
    match r {
        GateResult::Error { reason } => reason,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_private_ca_is_trusted_only_through_the_gates_tls_bundle() {
    let Harness { client, ns } = Harness::new("gate-tls").await;
    let reader = CredentialReader::new(client.clone(), ns.clone());
    let pki = pki();
    let addr = serve_tls(open_app(), &pki).await;
    let hook = |tls: Value| {
        json!({"webhooks": [{"name": "smoke", "url": format!("https://127.0.0.1:{}/hook", addr.port()),
            "retries": 0, "timeoutSeconds": 10, "tls": tls}]})
    };
    let no_tls = json!({"webhooks": [{"name": "smoke",
        "url": format!("https://127.0.0.1:{}/hook", addr.port()), "retries": 0}]});

    // Without the bundle: the system's roots do not know the private CA.
    let r = evaluate(&reader, &ns, no_tls).await;
    assert!(
        error_of(&r).contains("TLS error: the server's certificate is not trusted"),
        "{r:?}"
    );

    // With it, from a ConfigMap shared with this namespace: passes.
    put_config_map(&client, &ns, "private-ca", "ca.crt", &pki.ca_pem, Some(&ns)).await;
    let from_cm = json!({"ca": {"configMapKeyRef": {"name": "private-ca", "key": "ca.crt"}}});
    let r = evaluate(&reader, &ns, hook(from_cm.clone())).await;
    assert_eq!(r, GateResult::Pass { value: 200.0 });

    // A Prometheus gate, the bundle from a Secret, the host by name.
    put_secret(
        &client,
        &ns,
        "private-ca",
        &[("ca.crt", &pki.ca_pem)],
        Some("*"),
    )
    .await;
    let prom = json!({"prometheus": [{"name": "errors",
        "address": format!("https://localhost:{}", addr.port()),
        "query": "vector(0.01)", "threshold": "< 0.05",
        "tls": {"ca": {"secretKeyRef": {"name": "private-ca", "key": "ca.crt"}}}}]});
    let r = evaluate(&reader, &ns, prom).await;
    assert_eq!(r, GateResult::Pass { value: 0.01 });

    // Another CA's bundle does not make the server trusted.
    put_config_map(
        &client,
        &ns,
        "other-ca",
        "ca.crt",
        &super_other_ca(),
        Some(&ns),
    )
    .await;
    let r = evaluate(
        &reader,
        &ns,
        hook(json!({"ca": {"configMapKeyRef": {"name": "other-ca", "key": "ca.crt"}}})),
    )
    .await;
    assert!(error_of(&r).contains("TLS error"), "{r:?}");

    // A bundle that is not PEM is named, its content is not repeated.
    put_config_map(
        &client,
        &ns,
        "broken-ca",
        "ca.crt",
        "not-a-certificate",
        Some(&ns),
    )
    .await;
    let r = evaluate(
        &reader,
        &ns,
        hook(json!({"ca": {"configMapKeyRef": {"name": "broken-ca", "key": "ca.crt"}}})),
    )
    .await;
    let msg = error_of(&r);
    assert!(
        msg.contains(&format!("key \"ca.crt\" of ConfigMap {ns}/broken-ca")),
        "{msg}"
    );
    assert!(!msg.contains("not-a-certificate"), "{msg}");

    // A ConfigMap that does not share itself with the plan's namespace.
    put_config_map(
        &client,
        &ns,
        "private-ca",
        "ca.crt",
        &pki.ca_pem,
        Some("someone-else"),
    )
    .await;
    let r = evaluate(&reader, &ns, hook(from_cm)).await;
    assert!(
        error_of(&r).contains(&format!(
            "ConfigMap {ns}/private-ca is not available to namespace {ns}"
        )),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_real_prometheus_behind_tls_and_basic_auth() {
    let Harness { client, ns } = Harness::new("gate-prom-auth").await;
    let reader = CredentialReader::new(client.clone(), ns.clone());
    let pki = pki();
    let password = "prom-pw-71c3e9";
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca = file("ca.pem", &pki.ca_pem);
    let cert = file("server.crt", &pki.cert_pem);
    let key = file("server.key", &pki.key_pem);
    let hash = bcrypt::hash(password, 4).unwrap();
    let web = file(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  reader: '{hash}'\n",
            cert.display(),
            key.display()
        ),
    );
    let prom = Prometheus::start_secured(
        closed_port().await,
        &web,
        &format!("--cacert {} -u reader:{password}", ca.display()),
    );
    assert!(prom.url.starts_with("https://127.0.0.1:"), "{}", prom.url);

    put_secret(
        &client,
        &ns,
        "prom-basic",
        &[("password", password)],
        Some(&ns),
    )
    .await;
    put_config_map(&client, &ns, "prom-ca", "ca.crt", &pki.ca_pem, Some(&ns)).await;
    let gate = |auth: Value, tls: Value| {
        let mut g = json!({"name": "errors", "address": prom.url, "query": "vector(0.01)",
            "threshold": "< 0.05", "timeoutSeconds": 10});
        if !auth.is_null() {
            g["auth"] = auth;
        }
        if !tls.is_null() {
            g["tls"] = tls;
        }
        json!({ "prometheus": [g] })
    };
    let basic = json!({"basic": {"username": "reader",
        "password": {"secretKeyRef": {"name": "prom-basic", "key": "password"}}}});
    let tls = json!({"ca": {"configMapKeyRef": {"name": "prom-ca", "key": "ca.crt"}}});

    let r = evaluate(&reader, &ns, gate(basic.clone(), tls.clone())).await;
    assert_eq!(r, GateResult::Pass { value: 0.01 });

    let r = evaluate(&reader, &ns, gate(basic.clone(), Value::Null)).await;
    assert!(
        error_of(&r).contains("TLS error: the server's certificate is not trusted"),
        "{r:?}"
    );

    let r = evaluate(&reader, &ns, gate(Value::Null, tls.clone())).await;
    assert!(
        error_of(&r).contains("prometheus answered HTTP 401"),
        "{r:?}"
    );

    put_secret(
        &client,
        &ns,
        "prom-basic",
        &[("password", "wrong-pw-0a9d")],
        Some(&ns),
    )
    .await;
    let r = evaluate(&reader, &ns, gate(basic, tls)).await;
    let msg = error_of(&r);
    assert!(msg.contains("prometheus answered HTTP 401"), "{msg}");
    assert!(
        !msg.contains("wrong-pw-0a9d") && !msg.contains(password),
        "{msg}"
    );
}

/// A CA certificate of another, unrelated CA.
fn super_other_ca() -> String {
    pki().ca_pem
}

#[tokio::test]
async fn missing_or_unshared_credentials_are_gate_errors_that_name_the_secret_and_key() {
    let Harness { client, ns } = Harness::new("gate-creds").await;
    let reader = CredentialReader::new(client.clone(), ns.clone());
    let addr = serve(open_app()).await;
    let bearer = |name: &str, key: &str| {
        json!({"webhooks": [{"name": "smoke", "url": format!("http://127.0.0.1:{}/hook", addr.port()),
            "retries": 0, "auth": {"bearer": {"secretKeyRef": {"name": name, "key": key}}}}]})
    };
    let value = "s3cret-never-shown";

    let r = evaluate(&reader, &ns, bearer("gate-token", "token")).await;
    let missing = error_of(&r);
    assert_eq!(
        missing,
        format!(
            "webhook gate credentials: Secret {ns}/gate-token is not available to namespace {ns}: it must exist in the operator's namespace {ns} and its annotation releaseplan.io/gate-namespaces must list {ns} (or be \"*\")"
        )
    );

    put_secret(&client, &ns, "gate-token", &[("other", value)], Some(&ns)).await;
    let r = evaluate(&reader, &ns, bearer("gate-token", "token")).await;
    assert_eq!(
        error_of(&r),
        format!("webhook gate credentials: Secret {ns}/gate-token has no key \"token\"")
    );

    // Not shared answers exactly as missing: a plan author learns nothing
    // of the names in the operator's namespace.
    put_secret(&client, &ns, "gate-token", &[("token", value)], None).await;
    let r = evaluate(&reader, &ns, bearer("gate-token", "token")).await;
    assert_eq!(error_of(&r), missing, "{r:?}");
    put_secret(&client, &ns, "gate-token", &[("token", value)], Some("a,b")).await;
    let r = evaluate(&reader, &ns, bearer("gate-token", "token")).await;
    assert_eq!(error_of(&r), missing, "{r:?}");

    put_secret(&client, &ns, "gate-token", &[("token", " \n")], Some(&ns)).await;
    let r = evaluate(&reader, &ns, bearer("gate-token", "token")).await;
    assert_eq!(
        error_of(&r),
        format!(
            "webhook gate credentials: key \"token\" of Secret {ns}/gate-token is not a valid bearer token"
        )
    );

    // Shared, present: the call goes out (the server accepts anything), and
    // a trailing newline in the Secret is not sent.
    put_secret(
        &client,
        &ns,
        "gate-token",
        &[("token", &format!("{value}\n"))],
        Some(&format!("x, {ns}")),
    )
    .await;
    let r = evaluate(&reader, &ns, bearer("gate-token", "token")).await;
    assert_eq!(r, GateResult::Pass { value: 200.0 });

    // No reader (an operator without cluster access): a clear error.
    let r = evaluate(
        &CredentialReader::none(),
        &ns,
        bearer("gate-token", "token"),
    )
    .await;
    assert!(
        error_of(&r).contains("without a credentials reader"),
        "{r:?}"
    );
}

/// What the authenticating server expects and what it saw.
#[derive(Default)]
struct Expect {
    token: String,
    api_key: String,
    basic: String,
    /// Webhook calls answered 200 and 401.
    hook_ok: u32,
    hook_denied: u32,
    /// Queries answered 200 and 401.
    prom_ok: u32,
    prom_denied: u32,
}

type Shared = Arc<Mutex<Expect>>;

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

async fn auth_hook(State(e): State<Shared>, h: HeaderMap) -> StatusCode {
    let mut e = e.lock().unwrap();
    if header(&h, "authorization") == format!("Bearer {}", e.token)
        && header(&h, "x-api-key") == e.api_key
    {
        e.hook_ok += 1;
        StatusCode::OK
    } else {
        e.hook_denied += 1;
        StatusCode::UNAUTHORIZED
    }
}

async fn auth_query(State(e): State<Shared>, h: HeaderMap) -> (StatusCode, String) {
    let mut e = e.lock().unwrap();
    if header(&h, "authorization") == format!("Basic {}", e.basic)
        && header(&h, "x-scope-orgid") == "team-a"
    {
        e.prom_ok += 1;
        (StatusCode::OK, SCALAR.into())
    } else {
        e.prom_denied += 1;
        (StatusCode::UNAUTHORIZED, "denied".into())
    }
}

/// Everything anyone can read about the plan: its status, the namespace's
/// Events, the operator's log and its /metrics.
async fn everything_readable(
    client: &Client,
    ns: &str,
    op: &Operator,
) -> Vec<(&'static str, String)> {
    let plan = support::plans::get(client, ns, "shop")
        .await
        .expect("the plan");
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list events");
    vec![
        ("status", serde_json::to_string(&plan).unwrap()),
        ("events", serde_json::to_string(&events.items).unwrap()),
        ("log", op.log_text()),
        ("metrics", op.metrics().await),
    ]
}

#[tokio::test]
async fn authenticated_gates_pass_follow_rotation_fail_on_a_wrong_secret_and_never_tell_it() {
    let h = Harness::new("gate-auth").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (t1, t2, wrong, key, pw) = (
        "tok-one-8c1f0e",
        "tok-two-5b7d2a",
        "tok-wrong-93aa41",
        "apikey-6f2e19",
        "pw-d04c77",
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("reader:{pw}"));
    let expect: Shared = Arc::new(Mutex::new(Expect {
        token: t1.into(),
        api_key: key.into(),
        basic: basic.clone(),
        ..Expect::default()
    }));
    let addr = serve(
        Router::new()
            .route("/hook", post(auth_hook))
            .route("/prom/api/v1/query", get(auth_query))
            .with_state(expect.clone()),
    )
    .await;
    put_secret(
        &client,
        &ns,
        "gate-creds",
        &[("token", t1), ("api-key", key), ("password", pw)],
        Some(&ns),
    )
    .await;
    let op = h
        .operator()
        .args(["--gate-credentials-namespace", &ns])
        .start()
        .await;
    let health = json!({
        "webhooks": [{
            "name": "smoke", "url": format!("http://127.0.0.1:{}/hook", addr.port()), "retries": 0,
            "auth": {"bearer": {"secretKeyRef": {"name": "gate-creds", "key": "token"}}},
            "headers": [{"name": "X-Api-Key", "valueFrom": {"secretKeyRef": {"name": "gate-creds", "key": "api-key"}}}]
        }],
        "prometheus": [{
            "name": "errors", "address": format!("http://127.0.0.1:{}/prom", addr.port()),
            "query": "vector(0.01)", "threshold": "< 0.05", "interval": "1s",
            "auth": {"basic": {"username": "reader", "password": {"secretKeyRef": {"name": "gate-creds", "key": "password"}}}},
            "headers": [{"name": "X-Scope-OrgID", "value": "team-a"}]
        }]
    });
    let steps = json!([{"setWeight": 50}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}, "health": health}),
    )
    .await;
    {
        let e = expect.lock().unwrap();
        assert!(
            e.hook_ok > 0 && e.prom_ok > 0,
            "both gates were called with their credentials"
        );
        assert_eq!((e.hook_denied, e.prom_denied), (0, 0));
    }

    // Rotation: the server now takes only the new token; the next rollout's
    // evaluations read the Secret again.
    expect.lock().unwrap().token = t2.into();
    put_secret(
        &client,
        &ns,
        "gate-creds",
        &[("token", t2), ("api-key", key), ("password", pw)],
        Some(&ns),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(
        expect.lock().unwrap().hook_denied,
        0,
        "the rotated token was sent"
    );

    // A wrong token: the webhook answers 401, the gate fails, the rollout
    // goes back.
    put_secret(
        &client,
        &ns,
        "gate-creds",
        &[("token", wrong), ("api-key", key), ("password", pw)],
        Some(&ns),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:3", 2)])).await;
    let done = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let failure = done
        .status
        .as_ref()
        .and_then(|s| s.failure.clone())
        .expect("a failure");
    assert_eq!(failure.gate, "smoke");
    assert!(
        failure.message.contains("webhook answered HTTP 401"),
        "{failure:?}"
    );
    assert!(expect.lock().unwrap().hook_denied > 0);

    // Nothing anyone can read repeats a secret value.
    let secrets = [t1, t2, wrong, key, pw, basic.as_str()];
    let readable = everything_readable(&client, &ns, &op).await;
    for (place, text) in &readable {
        assert!(!text.is_empty(), "{place} is empty");
        for s in secrets {
            assert!(!text.contains(s), "{place} repeats the secret value {s:?}");
        }
    }
    // What is readable does tell which gate failed and why.
    let events = &readable[1].1;
    assert!(
        events.contains("smoke") && events.contains("401"),
        "{events}"
    );

    // The gate metrics: evaluations by kind; the series of this rollout's
    // gates went when it ended.
    let m = op.metrics().await;
    for kind in ["webhook", "prometheus"] {
        let count = sum_metric(
            &m,
            &format!("releaseplan_gate_evaluation_duration_seconds_count{{kind=\"{kind}\"}}"),
        );
        assert!(count >= 2.0, "{kind}: {count}\n{m}");
    }
    wait_until(
        WAIT,
        "the gate series of the ended rollout to be removed",
        || async {
            let m = op.metrics().await;
            (!m.contains("releaseplan_gate_value{") && !m.contains("releaseplan_gate_failures{"))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn gate_series_follow_the_gates_of_the_spec_and_go_with_the_plan() {
    let (h, op) = Harness::with_operator("gate-series").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    // The webhook passes; the "Prometheus" answers 500: an error each time.
    let addr = serve(
        Router::new()
            .route("/hook", post(|| async { StatusCode::OK }))
            .route(
                "/api/v1/query",
                get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "down") }),
            ),
    )
    .await;
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;
    let webhook = json!({"name": "smoke", "url": format!("http://127.0.0.1:{}/hook", addr.port()), "retries": 0});
    let prometheus = json!({"name": "errors", "address": format!("http://127.0.0.1:{}", addr.port()),
        "query": "vector(0)", "threshold": "< 1", "interval": "1s", "failureLimit": 100});
    patch_spec(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:2", 2)],
               "health": {"webhooks": [webhook], "prometheus": [prometheus]}}),
    )
    .await;
    let series = |gate: &str, m: &str| {
        m.lines().any(|l| {
            l.starts_with("releaseplan_gate_failures{")
                && l.contains(&format!("plan=\"shop\",gate=\"{gate}\""))
        })
    };
    wait_until(
        WAIT,
        "both gates' series, and prometheus errors counted",
        || async {
            let m = op.metrics().await;
            let errors = sum_metric(&m, "releaseplan_gate_errors_total{kind=\"prometheus\"}");
            (series("smoke", &m) && series("errors", &m) && errors >= 2.0).then_some(())
        },
    )
    .await;
    let m = op.metrics().await;
    assert!(
        m.contains("releaseplan_gate_errors_total{kind=\"webhook\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("releaseplan_gate_value{namespace=\"") && m.contains("gate=\"smoke\"} 200"),
        "{m}"
    );

    // The Prometheus gate leaves the spec: its series go, the webhook's stay
    // (the webhook passes, so the rollout reaches the pause and holds).
    patch_spec(&client, &ns, "shop", json!({"health": {"prometheus": []}})).await;
    wait_until(WAIT, "only the webhook's series", || async {
        let m = op.metrics().await;
        (series("smoke", &m) && !series("errors", &m)).then_some(())
    })
    .await;

    // The plan is deleted: every gate series of it goes.
    Api::<releaseplan::api::ReleasePlan>::namespaced(client.clone(), &ns)
        .delete("shop", &Default::default())
        .await
        .expect("delete the plan");
    wait_until(
        WAIT,
        "the deleted plan's gate series to be removed",
        || async {
            let m = op.metrics().await;
            (!m.contains("plan=\"shop\",gate=")).then_some(())
        },
    )
    .await;
}

/// A plan whose only gate is `gate` (a webhook, or a Prometheus gate when it
/// has a `query`).
fn plan_with_gate(name: &str, gate: Value) -> Value {
    let kind = if gate.get("query").is_some() {
        "prometheus"
    } else {
        "webhooks"
    };
    json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
        "metadata": {"name": name},
        "spec": {
            "components": [web("shop:1", 1)],
            "health": { kind: [gate] }
        }
    })
}

fn hook_with(extra: Value) -> Value {
    let mut g = json!({"name": "smoke", "url": "https://hooks.example.com/check"});
    for (k, v) in extra.as_object().unwrap() {
        g[k] = v.clone();
    }
    g
}

fn secret_ref(name: &str, key: &str) -> Value {
    json!({"secretKeyRef": {"name": name, "key": key}})
}

#[tokio::test]
async fn admission_refuses_bad_auth_headers_and_tls_naming_the_field() {
    let Harness { client, ns } = Harness::new("gate-adm").await;
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<releaseplan::api::ReleasePlan>(&()),
    );
    let tok = secret_ref("creds", "token");
    let basic = json!({"username": "reader", "password": secret_ref("creds", "pw")});
    let w = "spec.health.webhooks[0]";
    let cases: Vec<(&str, Value, String, &str)> = vec![
        (
            "both-bearer-and-basic",
            hook_with(json!({"auth": {"bearer": tok, "basic": basic}})),
            format!("{w}.auth"),
            "auth: set exactly one of bearer and basic",
        ),
        (
            "empty-auth",
            hook_with(json!({"auth": {}})),
            format!("{w}.auth"),
            "auth: set exactly one of bearer and basic",
        ),
        (
            "colon-in-username",
            hook_with(
                json!({"auth": {"basic": {"username": "a:b", "password": secret_ref("creds", "pw")}}}),
            ),
            format!("{w}.auth.basic.username"),
            "basic.username must not contain ':'",
        ),
        (
            "header-name-not-a-token",
            hook_with(json!({"headers": [{"name": "X Team", "value": "a"}]})),
            format!("{w}.headers[0].name"),
            "header name must be an HTTP token",
        ),
        (
            "header-value-and-value-from",
            hook_with(json!({"headers": [{"name": "X-Key", "value": "a", "valueFrom": tok}]})),
            format!("{w}.headers[0]"),
            "headers: set exactly one of value and valueFrom",
        ),
        (
            "header-without-value",
            hook_with(json!({"headers": [{"name": "X-Key"}]})),
            format!("{w}.headers[0]"),
            "headers: set exactly one of value and valueFrom",
        ),
        (
            "header-value-with-newline",
            hook_with(json!({"headers": [{"name": "X-Key", "value": "a\r\nX-Evil: 1"}]})),
            format!("{w}.headers[0].value"),
            "header value must be printable ASCII",
        ),
        (
            "duplicate-header-names",
            hook_with(
                json!({"headers": [{"name": "X-Key", "value": "a"}, {"name": "x-key", "value": "b"}]}),
            ),
            format!("{w}.headers"),
            "headers: header names must be unique (case-insensitive)",
        ),
        (
            "reserved-header",
            hook_with(json!({"headers": [{"name": "Content-Type", "value": "text/plain"}]})),
            format!("{w}.headers[0]"),
            "are set by the operator",
        ),
        (
            "authorization-header-and-auth",
            hook_with(
                json!({"auth": {"bearer": tok}, "headers": [{"name": "authorization", "value": "Basic eDp5"}]}),
            ),
            w.to_string(),
            "set either auth or an Authorization header in headers, not both",
        ),
        (
            "ca-from-both",
            hook_with(
                json!({"tls": {"ca": {"secretKeyRef": {"name": "ca", "key": "ca.crt"},
                                             "configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}}),
            ),
            format!("{w}.tls.ca"),
            "tls.ca: set exactly one of secretKeyRef and configMapKeyRef",
        ),
        (
            "bad-secret-name",
            hook_with(json!({"auth": {"bearer": secret_ref("Creds_1", "token")}})),
            format!("{w}.auth.bearer.secretKeyRef.name"),
            "secretKeyRef.name must be a Secret name",
        ),
        (
            "bad-secret-key",
            hook_with(json!({"auth": {"bearer": secret_ref("creds", "a/b")}})),
            format!("{w}.auth.bearer.secretKeyRef.key"),
            "secretKeyRef.key must be a valid Secret key",
        ),
        (
            "prometheus-ca-from-neither",
            json!({"name": "errors", "address": "https://prom:9090", "query": "up", "threshold": "> 0",
                   "tls": {"ca": {}}}),
            "spec.health.prometheus[0].tls.ca".to_string(),
            "tls.ca: set exactly one of secretKeyRef and configMapKeyRef",
        ),
    ];
    let mut problems = Vec::new();
    for (name, gate, path, message) in &cases {
        let obj: kube::api::DynamicObject =
            serde_json::from_value(plan_with_gate(name, gate.clone())).unwrap();
        match api.create(&Default::default(), &obj).await {
            Ok(_) => problems.push(format!("{name}: accepted")),
            Err(kube::Error::Api(s)) => {
                let fields: Vec<&str> = s
                    .details
                    .iter()
                    .flat_map(|d| &d.causes)
                    .map(|c| c.field.as_str())
                    .collect();
                if s.code != 422 || !s.message.contains(message) || !fields.contains(&path.as_str())
                {
                    problems.push(format!(
                        "{name}: HTTP {} fields {fields:?} (want {path}): {}",
                        s.code, s.message
                    ));
                }
            }
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Every field together, well formed: accepted, and the operator's own
    // check of the spec agrees.
    let good = hook_with(json!({
        "auth": {"basic": basic},
        "headers": [{"name": "X-Scope-OrgID", "value": "team-a"}, {"name": "X-Key", "valueFrom": tok}],
        "tls": {"ca": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}
    }));
    let obj: kube::api::DynamicObject =
        serde_json::from_value(plan_with_gate("good", good)).unwrap();
    let stored = api
        .create(&Default::default(), &obj)
        .await
        .expect("accepted");
    let plan: releaseplan::api::ReleasePlan =
        serde_json::from_value(serde_json::to_value(&stored).unwrap()).unwrap();
    releaseplan::plan::spec::check_spec(&plan.spec).expect("the operator accepts it too");
    assert_eq!(plan.spec.health.webhooks[0].headers.len(), 2);
}
