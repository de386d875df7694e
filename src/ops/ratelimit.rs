//! A client-side rate limit on requests to the API server (`--qps`,
//! `--burst`), as every client-go controller has: a mass rollout, or a
//! cold start with thousands of plans, must not flood the API server.
//!
//! A token bucket (governor's GCRA): `burst` requests may go at once, then
//! `qps` per second. It is a tower layer under kube's `Client`, whose buffer
//! serializes `poll_ready`, so requests are admitted in order.

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// A wait for the next token.
type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Limits the request rate of the service it wraps; `None` limits nothing.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
}

impl RateLimitLayer {
    /// `qps` requests per second on average, `burst` at once (at least one).
    /// A `qps` of 0 turns the limit off.
    pub fn new(qps: u32, burst: u32) -> Self {
        let limiter = NonZeroU32::new(qps).map(|qps| {
            let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
            Arc::new(RateLimiter::direct(
                Quota::per_second(qps).allow_burst(burst),
            ))
        });
        RateLimitLayer { limiter }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            limiter: self.limiter.clone(),
            wait: None,
            permitted: false,
        }
    }
}

/// A service that takes a token before each request.
pub struct RateLimited<S> {
    inner: S,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// The wait for a token, while one is awaited.
    wait: Option<Wait>,
    /// A token is held for the next call.
    permitted: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if let Some(limiter) = self.limiter.as_ref().filter(|_| !self.permitted) {
            if self.wait.is_none() {
                if limiter.check().is_ok() {
                    self.permitted = true;
                } else {
                    let limiter = Arc::clone(limiter);
                    self.wait = Some(Box::pin(async move { limiter.until_ready().await }));
                }
            }
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
                self.permitted = true;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.permitted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tower::ServiceExt;

    /// A service that answers at once.
    fn echo() -> tower::util::ServiceFn<
        impl FnMut(u32) -> std::future::Ready<Result<u32, std::convert::Infallible>>,
    > {
        tower::service_fn(|n: u32| std::future::ready(Ok(n)))
    }

    #[tokio::test]
    async fn a_burst_goes_at_once_then_qps_per_second() {
        let mut svc = RateLimitLayer::new(20, 5).layer(echo());
        let start = Instant::now();
        for n in 0..5 {
            assert_eq!(svc.ready().await.unwrap().call(n).await.unwrap(), n);
        }
        assert!(
            start.elapsed() < Duration::from_millis(40),
            "the burst waits"
        );
        // 10 more at 20 per second: about half a second.
        for n in 0..10 {
            svc.ready().await.unwrap().call(n).await.unwrap();
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "not limited: {took:?}");
    }

    #[tokio::test]
    async fn zero_qps_limits_nothing() {
        let mut svc = RateLimitLayer::new(0, 0).layer(echo());
        let start = Instant::now();
        for n in 0..1000 {
            svc.ready().await.unwrap().call(n).await.unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
