//! Writes sent together: every one of a batch runs to its end before its caller goes on.

use std::future::Future;

use futures::FutureExt;
use futures::future::{JoinAll, Map, join_all};

/// Runs `writes` together and waits for every one of them to end, then returns their results in
/// order, or the first error. `try_join_all` would return at the first error and drop the others
/// while in flight, and a dropped request the API server has received still lands, possibly after
/// the decision taken afresh (a late demotion of a pod promoted again, a late barrier on the new
/// leader).
///
/// Its type names only the writes' future, not the iterator that made them (as an `async fn` or
/// an `impl Future` would): that iterator's closures borrow, and the reconcile future holding it
/// would no longer be `Send` for every lifetime, as the controller needs.
pub fn settle_all<T, E, W>(writes: W) -> Settled<W::Item, T, E>
where
    W: IntoIterator,
    W::Item: Future<Output = Result<T, E>>,
{
    join_all(writes).map(|results| results.into_iter().collect())
}

/// The future of [`settle_all`].
pub type Settled<F, T, E> = Map<JoinAll<F>, fn(Vec<Result<T, E>>) -> Result<Vec<T>, E>>;

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use futures::future::BoxFuture;

    use super::*;

    #[tokio::test]
    async fn a_failed_write_waits_for_the_others_to_end() {
        let landed = Arc::new(AtomicBool::new(false));
        let slow: BoxFuture<'static, Result<u8, &str>> = {
            let landed = Arc::clone(&landed);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                landed.store(true, Ordering::SeqCst);
                Ok(1)
            })
        };
        let failed: BoxFuture<'static, Result<u8, &str>> = Box::pin(async { Err("409") });
        assert_eq!(settle_all([slow, failed]).await, Err("409"));
        assert!(
            landed.load(Ordering::SeqCst),
            "returned while a write of the batch was still in flight"
        );
    }

    #[tokio::test]
    async fn every_result_in_order_when_all_land() {
        let writes = [3u8, 1, 2].map(|n| async move {
            tokio::time::sleep(Duration::from_millis(u64::from(n) * 5)).await;
            Ok::<u8, ()>(n)
        });
        assert_eq!(settle_all(writes).await, Ok(vec![3, 1, 2]));
    }
}
