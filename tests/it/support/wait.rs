//! The one poller of the tests and benches.

use std::future::Future;
use std::time::Duration;

/// What one attempt of [`wait_until`] returns: `Option<T>` (`None`: not yet),
/// or `Result<T, String>` (`Err`: not yet, and what was seen instead, which
/// the timeout message names).
pub trait Attempt {
    /// The value waited for.
    type Value;
    /// The value, or what was seen instead (if anything is worth showing).
    fn into_result(self) -> Result<Self::Value, Option<String>>;
}

impl<T> Attempt for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T> Attempt for Result<T, String> {
    type Value = T;
    fn into_result(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

/// Calls `f` every 200ms until it returns a value (`Some` or `Ok`), and
/// returns that value. Panics, naming `what` and the last value seen, when
/// `timeout` has passed.
pub async fn wait_until<A, F, Fut>(timeout: Duration, what: &str, mut f: F) -> A::Value
where
    A: Attempt,
    F: FnMut() -> Fut,
    Fut: Future<Output = A>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match f().await.into_result() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if tokio::time::Instant::now() >= deadline {
            match last {
                Some(last) => {
                    panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
                }
                None => panic!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
