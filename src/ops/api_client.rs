//! The operator's HTTP client to the API server: HTTP/2 when the server
//! offers it (ALPN), one connection that carries every watch and request;
//! HTTP/1.1 only with `--api-http2=false`.
//!
//! kube's own stack speaks HTTP/1.1 only, where each open watch holds a
//! connection of its own and each request in flight another: about 80
//! connections at a cold start of 1000 plans, each with its TLS state and a
//! read buffer that grows to the largest list page it carried (docs/
//! decisions.md, "HTTP/2 to the API server"). client-go speaks HTTP/2 to the
//! API server too, and pings an idle connection the same way: every 30 s,
//! given up after 15 s without an answer, so a connection that died without a
//! reset fails every watch on it and they start again on a new one.
//!
//! The layers are kube's (`ClientBuilder::try_from`), in its order: the base
//! URI, retries of 429/503 (`Config::default_retry`), authentication (a token
//! file is read again when it changes) and extra headers; kube's tracing
//! layer is left out (`ops::requests` logs a failed request instead). A
//! configuration with a proxy goes to kube's builder, as before: this build
//! of kube has no proxy support, and refuses it with a clear error.

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use kube::config::Config;
use std::time::Duration;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// The client stack kube's builder makes, so callers add layers as before.
pub type Stack = tower::util::BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// The flow-control window of each stream: what the API server may send on
/// one watch before the operator reads it (Go's HTTP/2 transport, which
/// client-go uses, gives 4 MiB too).
const STREAM_WINDOW: u32 = 4 << 20;
/// The window of the whole connection: as Go's transport, so large that it
/// never binds before a stream's own, and a watch read late never holds up
/// the others on the connection (each stays bounded by its stream window;
/// hyper's default, 5 MiB, is about one watch's worth).
const CONNECTION_WINDOW: u32 = 1 << 30;

/// How often an idle connection is pinged (client-go's `ReadIdleTimeout`).
const PING_EVERY: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is given up
/// (client-go's `PingTimeout`).
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether the client offers HTTP/2 (`--api-http2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http2 {
    /// HTTP/2 when the server chooses it (ALPN), HTTP/1.1 otherwise.
    Offered,
    /// HTTP/1.1 only, as kube's own builder: a connection per open watch
    /// and per request in flight. For a front proxy that mishandles
    /// HTTP/2, and to compare (client-go's `DISABLE_HTTP2`).
    Off,
}

/// How long a pooled HTTP/1.1 connection with no request may stay open
/// (hyper's default, as kube's builder): a burst opens one per request in
/// flight, and they would otherwise stay open for good.
const HTTP1_IDLE: Duration = Duration::from_secs(90);

/// kube's retries of a 429, 503 or 504 answer, made short: they are silent
/// (inside the request layer that logs and counts), and kube's own policy
/// (`RetryPolicy::server_retry`: 15 tries, 5 ms doubling up to 1000 s, with
/// jitter) could hold one request for minutes. Five tries from 100 ms,
/// doubling up to 2 s: a few seconds at most, then the answer is the
/// caller's (retried with backoff, logged, counted), well inside the request
/// deadline (`ops::deadline`).
fn retry_policy() -> RetryPolicy {
    RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(2), 5, true)
        .unwrap_or_else(|_| RetryPolicy::server_retry())
}

/// A client builder for `config` that speaks HTTP/2 to a server offering
/// it over TLS (unless `protocol` is [`Http2::Off`]), and HTTP/1.1 otherwise.
///
/// # Errors
///
/// What kube's own builder reports: an unreadable certificate, key or
/// token, or a bad TLS server name.
pub fn builder(config: Config, protocol: Http2) -> Result<ClientBuilder<Stack>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let tls = config.rustls_client_config()?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match config.tls_server_name.as_deref() {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let https = match protocol {
        Http2::Offered => https.enable_all_versions().wrap_connector(http),
        Http2::Off => https.enable_http1().wrap_connector(http),
    };
    // As kube's builder: the connect timeout covers the TLS handshake too (a
    // peer that accepts and then says nothing), and the configuration's read
    // and write timeouts apply (none by default: a watch waits for events).
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        // hyper counts an HTTP/2 connection idle from its last new request,
        // not its last stream: after 90 s with only watches on it, the pool
        // would drop it and the next request open a second one beside it.
        // A dead connection still goes: the pings find it.
        .pool_idle_timeout(match protocol {
            Http2::Offered => None,
            Http2::Off => Some(HTTP1_IDLE),
        })
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(retry_policy())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper)
        .map_response(|res| res.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>))
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// A CA and a certificate for 127.0.0.1 signed by it.
    fn pki() -> (
        Vec<u8>,
        rustls::pki_types::CertificateDer<'static>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".into()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&key, &ca).unwrap();
        (
            ca.der().to_vec(),
            cert.der().clone(),
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
    }

    /// What a test server saw: connections accepted, and the HTTP version of
    /// each request.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        versions: Mutex<Vec<http::Version>>,
    }

    /// An HTTPS server on 127.0.0.1 offering `alpn`, answering every request
    /// with `{}` after 50 ms (so requests overlap).
    async fn serve(alpn: &[&[u8]]) -> (String, Vec<u8>, Arc<Seen>) {
        let (ca, cert, key) = pki();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let server_seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                server_seen.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, seen) = (acceptor.clone(), Arc::clone(&server_seen));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let seen = Arc::clone(&seen);
                            async move {
                                seen.versions.lock().unwrap().push(req.version());
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                Ok::<_, std::convert::Infallible>(Response::new(
                                    http_body_util::Full::new(hyper::body::Bytes::from_static(
                                        b"{}",
                                    )),
                                ))
                            }
                        });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        (url, ca, seen)
    }

    /// A client of `builder` for the server at `url`, trusting `ca`.
    fn client(url: &str, ca: Vec<u8>) -> kube::Client {
        client_with(url, ca, Http2::Offered)
    }

    /// The same, offering HTTP/2 or not.
    fn client_with(url: &str, ca: Vec<u8>, http2: Http2) -> kube::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![ca]);
        builder(config, http2).unwrap().build()
    }

    /// Sends `n` requests at once; each must be answered.
    async fn requests(client: &kube::Client, n: usize) {
        // The first alone, as the operator's CRD check comes before its
        // watches: later requests find its connection in the pool.
        let one = || async {
            let req = Request::get("/version").body(Vec::new()).unwrap();
            client.request_text(req).await.unwrap()
        };
        assert_eq!(one().await, "{}");
        let answers = futures::future::join_all((1..n).map(|_| one())).await;
        assert!(answers.iter().all(|a| a == "{}"));
    }

    #[tokio::test]
    async fn requests_at_once_share_one_http2_connection() {
        let (url, ca, seen) = serve(&[b"h2", b"http/1.1"]).await;
        let client = client(&url, ca);
        requests(&client, 20).await;
        let versions = seen.versions.lock().unwrap().clone();
        assert_eq!(versions.len(), 20);
        assert!(
            versions.iter().all(|v| *v == http::Version::HTTP_2),
            "{versions:?}"
        );
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_server_that_accepts_and_says_nothing_fails_the_request_in_the_connect_timeout() {
        // It accepts the TCP connection, then never answers the TLS hello.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                open.push(tcp);
            }
        });
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![pki().0]);
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(1));
        let client = builder(config, Http2::Offered).unwrap().build();
        let req = Request::get("/version").body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(20), client.request_text(req)).await;
        assert!(
            matches!(answer, Ok(Err(_))),
            "the request should fail after the 1 s connect timeout: {answer:?}"
        );
        held.abort();
    }

    #[tokio::test]
    async fn a_server_without_http2_is_spoken_to_in_http1() {
        let (url, ca, seen) = serve(&[b"http/1.1"]).await;
        let client = client(&url, ca);
        requests(&client, 5).await;
        let versions = seen.versions.lock().unwrap().clone();
        assert_eq!(versions, vec![http::Version::HTTP_11; 5]);
        // Requests in flight together each need a connection of their own.
        assert!(seen.connections.load(Ordering::SeqCst) > 1);
    }

    #[tokio::test]
    async fn with_http2_off_a_server_offering_it_is_spoken_to_in_http1() {
        let (url, ca, seen) = serve(&[b"h2", b"http/1.1"]).await;
        let client = client_with(&url, ca, Http2::Off);
        requests(&client, 5).await;
        let versions = seen.versions.lock().unwrap().clone();
        assert_eq!(versions, vec![http::Version::HTTP_11; 5]);
    }

    /// A TCP relay on 127.0.0.1 to the server at `to` that drops what the
    /// server sends while `lose` is set (the connection stays open).
    async fn lossy(to: &str, lose: Arc<std::sync::atomic::AtomicBool>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let upstream = to.trim_start_matches("https://").to_string();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let mut b = vec![0u8; 16384];
                    while let Ok(n) = cr.read(&mut b).await {
                        if n == 0 || sw.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                let lose = Arc::clone(&lose);
                tokio::spawn(async move {
                    let mut b = vec![0u8; 16384];
                    while let Ok(n) = sr.read(&mut b).await {
                        if n == 0 {
                            break;
                        }
                        if !lose.load(Ordering::SeqCst) && cw.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        url
    }

    /// An answer lost on a connection that stays open: the request fails at
    /// the deadline of `ops::deadline` (without it, over HTTP/1.1 it waited
    /// for good; over HTTP/2 until the next record through the connection
    /// broke its TLS, up to a ping 30 s later).
    async fn a_lost_answer_fails_at_the_deadline(http2: Http2) {
        let (url, ca, _) = serve(&[b"h2", b"http/1.1"]).await;
        let lose = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let url = lossy(&url, Arc::clone(&lose)).await;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![ca]);
        let after = Duration::from_secs(2);
        let client = builder(config, http2)
            .unwrap()
            .with_layer(&crate::ops::deadline::RequestDeadlineLayer::new(after))
            .build();
        requests(&client, 3).await;
        lose.store(true, Ordering::SeqCst);
        let started = std::time::Instant::now();
        let req = Request::get("/version").body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(20), client.request_text(req)).await;
        let waited = started.elapsed();
        let err = answer
            .expect("no answer and no error within 20 s")
            .expect_err("the answer was dropped");
        assert!(
            format!("{err:?}").contains("RequestDeadlineExceeded"),
            "{http2:?}: {err:?}"
        );
        assert!(
            waited >= after && waited < after + Duration::from_secs(3),
            "{http2:?}: failed after {waited:?}"
        );
    }

    #[tokio::test]
    async fn a_lost_answer_fails_at_the_deadline_over_http2() {
        a_lost_answer_fails_at_the_deadline(Http2::Offered).await;
    }

    #[tokio::test]
    async fn a_lost_answer_fails_at_the_deadline_over_http1() {
        a_lost_answer_fails_at_the_deadline(Http2::Off).await;
    }

    /// A server answering 503 to everything: its answer reaches the caller
    /// within seconds (kube's own policy retried silently for minutes).
    #[tokio::test]
    async fn a_server_answering_503_is_retried_for_seconds_not_minutes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&tries);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tries = Arc::clone(&counted);
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |_: Request<hyper::body::Incoming>| {
                            tries.fetch_add(1, Ordering::SeqCst);
                            async {
                                Ok::<_, std::convert::Infallible>(
                                    Response::builder()
                                        .status(503)
                                        .body(http_body_util::Full::new(
                                            hyper::body::Bytes::from_static(b"{}"),
                                        ))
                                        .unwrap(),
                                )
                            }
                        });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        let client = builder(Config::new(url.parse().unwrap()), Http2::Off)
            .unwrap()
            .build();
        let started = std::time::Instant::now();
        let req = Request::get("/version").body(Vec::new()).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(60), client.request_text(req))
            .await
            .expect("still retrying after 60 s");
        assert!(answer.is_err(), "{answer:?}");
        assert_eq!(
            tries.load(Ordering::SeqCst),
            6,
            "the first try and five more"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }
}
