//! A deadline on every request to the API server that is not a watch: its
//! answer, headers and body, comes within `--api-request-timeout-seconds` or
//! the request fails as a transport error (retried with backoff like a
//! connection reset), instead of waiting on.
//!
//! Nothing else bounds such a wait. Over HTTP/2 one connection carries every
//! request, and its pings keep it alive as long as the API server answers
//! them: an answer lost on a connection that stays up (a stream the server
//! ended that never reached us, and no reset for it) leaves its request
//! waiting for good, and the reconcile that sent it with it (docs/
//! decisions.md, "A deadline on every request"). kube's read timeout cannot
//! help: it is per connection, and a connection that carries watches is
//! never quiet.
//!
//! A watch gets its answer's headers within the deadline too (the API
//! server sends them at once): a watch whose first answer was lost would
//! otherwise wait for good, its cache going stale and `/healthz` failing.
//! After the headers, watches keep their own rules: one that receives
//! nothing is healthy, and a connection that stops answering pings is
//! dropped (`ops::api_client`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::BoxError;

/// The API server's own limit on a request that is not a watch (its
/// `--request-timeout`, 60 s by default): an answer that has not come by then
/// is not coming, except for a very large list on a very slow link.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A request that got no whole answer within its deadline.
#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?} (the request deadline)")]
pub struct RequestDeadlineExceeded(pub Duration);

/// Whether a request streams for as long as it is open (a watch, a followed
/// log): those have no deadline.
pub fn is_long_running(uri: &http::Uri) -> bool {
    crate::ops::requests::is_watch(uri)
        || crate::ops::requests::query_has(uri, &["follow=true", "follow=1"])
}

/// Gives up on each request after `after`: on the headers of its answer
/// for a long-running one ([`is_long_running`]), on the whole answer, body
/// included, for any other.
#[derive(Debug, Clone, Copy)]
pub struct RequestDeadlineLayer {
    after: Duration,
}

impl RequestDeadlineLayer {
    /// Requests give up after `after`.
    pub fn new(after: Duration) -> Self {
        Self { after }
    }
}

impl<S> tower::Layer<S> for RequestDeadlineLayer {
    type Service = RequestDeadline<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestDeadline {
            inner,
            after: self.after,
        }
    }
}

/// The service of [`RequestDeadlineLayer`].
#[derive(Debug, Clone)]
pub struct RequestDeadline<S> {
    inner: S,
    after: Duration,
}

impl<S, B, RB> tower::Service<http::Request<B>> for RequestDeadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    RB: Send + 'static,
{
    type Response = http::Response<DeadlineBody<RB>>;
    type Error = BoxError;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let after = self.after;
        let bounded = !is_long_running(req.uri());
        let deadline = tokio::time::Instant::now() + after;
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = match tokio::time::timeout_at(deadline, answer).await {
                Ok(r) => r.map_err(Into::into)?,
                Err(_) => return Err(RequestDeadlineExceeded(after).into()),
            };
            Ok(response.map(|body| {
                if bounded {
                    DeadlineBody::new(body, deadline, after, |after| {
                        RequestDeadlineExceeded(after).into()
                    })
                } else {
                    DeadlineBody::unbounded(body)
                }
            }))
        })
    }
}

/// The error a body past its deadline ends in.
type Expired = fn(Duration) -> BoxError;

/// The body of an answer under a deadline: it ends in an error if it has not
/// all arrived by then (an answer whose headers came but whose body stalls);
/// what has arrived is read even after it. Unbounded, the body as it came.
pub struct DeadlineBody<B> {
    inner: Pin<Box<B>>,
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, Expired)>,
    after: Duration,
}

impl<B> std::fmt::Debug for DeadlineBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineBody")
            .field("bounded", &self.deadline.is_some())
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl<B> DeadlineBody<B> {
    /// `body`, cut at `deadline` with the error `expired(after)`.
    pub fn new(body: B, deadline: tokio::time::Instant, after: Duration, expired: Expired) -> Self {
        Self {
            inner: Box::pin(body),
            deadline: Some((Box::pin(tokio::time::sleep_until(deadline)), expired)),
            after,
        }
    }

    /// `body` as it comes.
    pub fn unbounded(body: B) -> Self {
        Self {
            inner: Box::pin(body),
            deadline: None,
            after: Duration::ZERO,
        }
    }
}

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        // What has come is read first: the deadline cuts only a wait.
        if let Poll::Ready(frame) = this.inner.as_mut().poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some((sleep, expired)) = this.deadline.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(expired(this.after))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::{Layer, Service, ServiceExt};

    /// A body that sends `first` and then never ends.
    struct Stalls(Option<&'static [u8]>);

    impl http_body::Body for Stalls {
        type Data = hyper::body::Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<hyper::body::Bytes>, Self::Error>>> {
            match self.0.take() {
                Some(b) => Poll::Ready(Some(Ok(http_body::Frame::data(
                    hyper::body::Bytes::from_static(b),
                )))),
                None => Poll::Pending,
            }
        }
    }

    fn request(uri: &str) -> http::Request<()> {
        http::Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn watches_and_followed_logs_are_long_running_and_nothing_else() {
        let long = |u: &str| is_long_running(&u.parse().unwrap());
        assert!(long("/apis/apps/v1/deployments?labelSelector=a&watch=true"));
        assert!(long("/api/v1/namespaces/a/pods?watch=1"));
        assert!(long("/api/v1/namespaces/a/pods/p/log?follow=true"));
        assert!(!long("/apis/apps/v1/namespaces/a/deployments/web"));
        assert!(!long("/apis/apps/v1/deployments?watch=false&limit=500"));
        assert!(!long(
            "/apis/apps/v1/deployments?labelSelector=watch%3Dtrue"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_never_comes_fails_at_the_deadline() {
        let never = tower::service_fn(|_: http::Request<()>| async {
            std::future::pending::<Result<http::Response<Stalls>, std::convert::Infallible>>().await
        });
        let mut svc = RequestDeadlineLayer::new(Duration::from_secs(5)).layer(never);
        let started = tokio::time::Instant::now();
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(request("/apis/apps/v1/namespaces/a/deployments/web"))
            .await
            .unwrap_err();
        assert!(err.is::<RequestDeadlineExceeded>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_fails_at_the_deadline_after_what_came() {
        let headers_then_stall = tower::service_fn(|_: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(Stalls(Some(b"{\"kind\""))))
        });
        let mut svc = RequestDeadlineLayer::new(Duration::from_secs(5)).layer(headers_then_stall);
        let started = tokio::time::Instant::now();
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(request("/apis/apps/v1/namespaces/a/deployments"))
            .await
            .unwrap();
        let mut body = res.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"{\"kind\"");
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<RequestDeadlineExceeded>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(5), "from the send");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_whose_answer_never_comes_fails_at_the_deadline() {
        let never = tower::service_fn(|_: http::Request<()>| async {
            std::future::pending::<Result<http::Response<Stalls>, std::convert::Infallible>>().await
        });
        let mut svc = RequestDeadlineLayer::new(Duration::from_secs(5)).layer(never);
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(request("/apis/apps/v1/deployments?watch=true"))
            .await
            .unwrap_err();
        assert!(err.is::<RequestDeadlineExceeded>(), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_waits_as_long_as_it_streams() {
        let slow = tower::service_fn(|_: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(Stalls(Some(b"{}"))))
        });
        let mut svc = RequestDeadlineLayer::new(Duration::from_secs(5)).layer(slow);
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(request("/apis/apps/v1/deployments?watch=true"))
            .await
            .unwrap();
        let mut body = res.into_body();
        assert!(body.frame().await.unwrap().is_ok());
        // Quiet for an hour, and still open.
        let quiet = tokio::time::timeout(Duration::from_secs(3600), body.frame()).await;
        assert!(quiet.is_err(), "a quiet watch ended: {quiet:?}");
    }
}
