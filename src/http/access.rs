//! Who may read `/metrics` on the secure port, as controller-runtime's secure metrics decide it:
//! the request's bearer token is checked with a TokenReview, and the user it names with a
//! SubjectAccessReview for `get` on the non-resource URL `/metrics`. Answers are cached briefly,
//! so that a scrape every 15 s costs no API request most of the time.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::HeaderValue;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::error::AccessReviewError;

/// The non-resource URL a scraper must be allowed to `get` (a ClusterRole's `nonResourceURLs`).
pub const METRICS_PATH: &str = "/metrics";
/// The verb it must be allowed.
pub const METRICS_VERB: &str = "get";
/// How long an allowed token is trusted without asking again (controller-runtime's minute): a
/// revoked binding or a deleted ServiceAccount shows at most this late.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refusal (an invalid token, or a user not allowed) is remembered: short, so that a
/// binding just created is seen soon.
const DENIED_FOR: Duration = Duration::from_secs(10);
/// At most this many tokens are remembered (a few scrapers use a few tokens each).
const CACHE_ENTRIES: usize = 1024;
/// How long one review may take before the scrape is answered 500.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request to `/metrics` is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Served (200).
    Allowed,
    /// No bearer token, or one the API server does not authenticate (401).
    Unauthenticated,
    /// The token's user may not `get` `/metrics` (403).
    Forbidden,
}

/// Decides [`Verdict`]s with the API server's reviews, and remembers them briefly.
pub struct MetricsAccess {
    client: Client,
    cache: Mutex<VerdictCache>,
}

impl MetricsAccess {
    /// Reviews with `client`: its identity needs `create` on `tokenreviews` and
    /// `subjectaccessreviews`.
    pub fn new(client: Client) -> MetricsAccess {
        MetricsAccess {
            client,
            cache: Mutex::new(VerdictCache::default()),
        }
    }

    /// The verdict on a request carrying `authorization` (its `Authorization` header, if any).
    pub async fn verdict(
        &self,
        authorization: Option<&HeaderValue>,
    ) -> Result<Verdict, AccessReviewError> {
        let Some(token) = bearer_token(authorization) else {
            return Ok(Verdict::Unauthenticated);
        };
        let key = TokenKey::of(token);
        let now = Instant::now();
        if let Some(verdict) = self.cache().get(&key, now) {
            return Ok(verdict);
        }
        let verdict = tokio::time::timeout(REVIEW_TIMEOUT, self.review(token))
            .await
            .map_err(|_| AccessReviewError::Timeout(REVIEW_TIMEOUT))??;
        self.cache().put(key, verdict, Instant::now());
        Ok(verdict)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, VerdictCache> {
        // The cache is a map of plain values: a panic elsewhere cannot leave it half-written.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn review(&self, token: &str) -> Result<Verdict, AccessReviewError> {
        let post = PostParams::default();
        let authenticated = Api::<TokenReview>::all(self.client.clone())
            .create(&post, &token_review(token))
            .await
            .map_err(AccessReviewError::TokenReview)?;
        let Some(user) = authenticated_user(&authenticated) else {
            return Ok(Verdict::Unauthenticated);
        };
        let authorized = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&post, &access_review(user))
            .await
            .map_err(AccessReviewError::SubjectAccessReview)?;
        Ok(if authorized.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme case-insensitive, as RFC
/// 6750 has it); None for any other header, or none.
fn bearer_token(authorization: Option<&HeaderValue>) -> Option<&str> {
    let value = authorization?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The TokenReview of `token`, for the API server's own audiences (those of a ServiceAccount
/// token mounted into a pod, or made by `kubectl create token`).
fn token_review(token: &str) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec {
            token: token.to_owned(),
            audiences: None,
        },
        ..TokenReview::default()
    }
}

/// The user a TokenReview authenticated, if it did.
fn authenticated_user(review: &TokenReview) -> Option<&UserInfo> {
    let status = review.status.as_ref()?;
    if status.authenticated != Some(true) {
        return None;
    }
    status
        .user
        .as_ref()
        .filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty()))
}

/// May `user` `get` `/metrics`? Asked with everything the TokenReview said of the user (groups,
/// uid, extra), as the API server itself would authorize the user's own requests.
fn access_review(user: &UserInfo) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(METRICS_PATH.to_owned()),
                verb: Some(METRICS_VERB.to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// A token as the cache knows it: its SHA-256, so that the tokens themselves are not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct TokenKey([u8; 32]);

impl TokenKey {
    fn of(token: &str) -> TokenKey {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0; 32];
        key.copy_from_slice(digest.as_ref());
        TokenKey(key)
    }
}

/// Verdicts by token, each until it expires; at most [`CACHE_ENTRIES`] of them.
#[derive(Default)]
struct VerdictCache {
    entries: HashMap<TokenKey, (Verdict, Instant)>,
}

impl VerdictCache {
    fn get(&self, key: &TokenKey, now: Instant) -> Option<Verdict> {
        let (verdict, until) = self.entries.get(key)?;
        (now < *until).then_some(*verdict)
    }

    fn put(&mut self, key: TokenKey, verdict: Verdict, now: Instant) {
        if self.entries.len() >= CACHE_ENTRIES && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, until)| now < *until);
            // Still full of live answers: the one that expires first goes.
            if self.entries.len() >= CACHE_ENTRIES
                && let Some(first) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| *k)
            {
                self.entries.remove(&first);
            }
        }
        let lasts = match verdict {
            Verdict::Allowed => ALLOWED_FOR,
            Verdict::Unauthenticated | Verdict::Forbidden => DENIED_FOR,
        };
        self.entries.insert(key, (verdict, now + lasts));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::{Request, Response};
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;

    /// What the fake API server was asked, in order: (path, body).
    pub(crate) type Asked = Arc<Mutex<Vec<(String, Value)>>>;

    /// A client whose API server authenticates `tokens` (token -> username, with the group
    /// `system:authenticated`) and allows `get /metrics` to the users in `allowed`; it records
    /// every request.
    pub(crate) fn fake_api_server(
        tokens: &[(&str, &str)],
        allowed: &[&str],
    ) -> (Client, Asked, Arc<AtomicUsize>) {
        let tokens: BTreeMap<String, String> = tokens
            .iter()
            .map(|(t, u)| (t.to_string(), u.to_string()))
            .collect();
        let allowed: Vec<String> = allowed.iter().map(|u| u.to_string()).collect();
        let asked: Asked = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (asked.clone(), calls.clone());
        let service = tower::service_fn(move |request: Request<Body>| {
            let (tokens, allowed, seen, count) =
                (tokens.clone(), allowed.clone(), seen.clone(), count.clone());
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                let path = request.uri().path().to_owned();
                let body: Value =
                    serde_json::from_slice(&request.into_body().collect_bytes().await?)?;
                seen.lock().unwrap().push((path.clone(), body.clone()));
                let mut answer = body.clone();
                if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
                    let token = body["spec"]["token"].as_str().unwrap_or_default();
                    answer["status"] = match tokens.get(token) {
                        Some(user) => json!({"authenticated": true, "user": {
                            "username": user, "uid": format!("uid-{user}"),
                            "groups": ["system:authenticated"],
                            "extra": {"example.com/scope": ["metrics"]}}}),
                        None => json!({"authenticated": false, "error": "invalid bearer token"}),
                    };
                } else if path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
                    let user = body["spec"]["user"].as_str().unwrap_or_default();
                    answer["status"] = json!({"allowed": allowed.iter().any(|a| a == user)});
                } else {
                    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": 404, "reason": "NotFound", "message": "not found"});
                    return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                        Response::builder()
                            .status(404)
                            .body(Body::from(serde_json::to_vec(&status)?))?,
                    );
                }
                Ok(Response::new(Body::from(serde_json::to_vec(&answer)?)))
            }
        });
        (Client::new(service, "default"), asked, calls)
    }

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).unwrap()
    }

    #[test]
    fn only_a_bearer_header_carries_a_token() {
        assert_eq!(bearer_token(Some(&header("Bearer abc"))), Some("abc"));
        assert_eq!(bearer_token(Some(&header("bearer  abc "))), Some("abc"));
        assert_eq!(bearer_token(Some(&header("Basic YWJjOmRlZg=="))), None);
        assert_eq!(bearer_token(Some(&header("Bearer "))), None);
        assert_eq!(bearer_token(Some(&header("Bearer"))), None);
        assert_eq!(bearer_token(None), None);
    }

    #[tokio::test]
    async fn the_token_is_reviewed_then_the_user_asked_for_get_on_metrics() {
        let (client, asked, _) = fake_api_server(&[("good", "scraper")], &["scraper"]);
        let access = MetricsAccess::new(client);
        assert_eq!(
            access.verdict(Some(&header("Bearer good"))).await.unwrap(),
            Verdict::Allowed
        );
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 2, "{asked:?}");
        let (path, review) = &asked[0];
        assert_eq!(path, "/apis/authentication.k8s.io/v1/tokenreviews");
        assert_eq!(review["kind"], "TokenReview");
        assert_eq!(review["spec"], json!({"token": "good"}));
        let (path, review) = &asked[1];
        assert_eq!(path, "/apis/authorization.k8s.io/v1/subjectaccessreviews");
        assert_eq!(review["kind"], "SubjectAccessReview");
        // Everything the TokenReview said of the user, and the non-resource URL: no resource.
        assert_eq!(
            review["spec"],
            json!({
                "user": "scraper", "uid": "uid-scraper", "groups": ["system:authenticated"],
                "extra": {"example.com/scope": ["metrics"]},
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
            })
        );
    }

    #[tokio::test]
    async fn a_bad_token_is_unauthenticated_and_an_unbound_user_forbidden() {
        let (client, asked, calls) =
            fake_api_server(&[("good", "scraper"), ("other", "stranger")], &["scraper"]);
        let access = MetricsAccess::new(client);
        for missing in [None, Some(header("Basic Zm9v")), Some(header("Bearer "))] {
            assert_eq!(
                access.verdict(missing.as_ref()).await.unwrap(),
                Verdict::Unauthenticated
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), 0, "no token, no review");
        assert_eq!(
            access.verdict(Some(&header("Bearer bad"))).await.unwrap(),
            Verdict::Unauthenticated
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "an unauthenticated token is not authorized: {:?}",
            asked.lock().unwrap()
        );
        assert_eq!(
            access.verdict(Some(&header("Bearer other"))).await.unwrap(),
            Verdict::Forbidden
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn answers_are_cached_so_a_scrape_costs_no_request() {
        let (client, _, calls) = fake_api_server(&[("good", "scraper")], &["scraper"]);
        let access = MetricsAccess::new(client);
        for _ in 0..5 {
            assert_eq!(
                access.verdict(Some(&header("Bearer good"))).await.unwrap(),
                Verdict::Allowed
            );
            assert_eq!(
                access.verdict(Some(&header("Bearer bad"))).await.unwrap(),
                Verdict::Unauthenticated
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), 3, "2 reviews, then 1, once");
    }

    #[tokio::test]
    async fn a_failed_review_is_an_error_and_not_remembered() {
        // An API server that answers 503 to everything: no verdict at all.
        let calls = Arc::new(AtomicUsize::new(0));
        let count = calls.clone();
        let broken = Client::new(
            tower::service_fn(move |_: Request<Body>| {
                count.fetch_add(1, Ordering::SeqCst);
                async {
                    Response::builder()
                        .status(503)
                        .body(Body::from(b"{}".to_vec()))
                }
            }),
            "default",
        );
        let access = MetricsAccess::new(broken);
        for _ in 0..2 {
            let verdict = access.verdict(Some(&header("Bearer good"))).await;
            assert!(
                matches!(verdict, Err(AccessReviewError::TokenReview(_))),
                "{verdict:?}"
            );
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "asked again: nothing cached"
        );
        assert!(access.cache().entries.is_empty());
    }

    #[test]
    fn allowed_lasts_a_minute_a_refusal_ten_seconds() {
        let mut cache = VerdictCache::default();
        let now = Instant::now();
        let (good, bad) = (TokenKey::of("good"), TokenKey::of("bad"));
        cache.put(good, Verdict::Allowed, now);
        cache.put(bad, Verdict::Forbidden, now);
        let later = |s| now + Duration::from_secs(s);
        assert_eq!(cache.get(&good, later(59)), Some(Verdict::Allowed));
        assert_eq!(cache.get(&good, later(60)), None);
        assert_eq!(cache.get(&bad, later(9)), Some(Verdict::Forbidden));
        assert_eq!(cache.get(&bad, later(10)), None);
    }

    #[test]
    fn the_cache_is_bounded_and_drops_what_expires_first() {
        let mut cache = VerdictCache::default();
        let now = Instant::now();
        let allowed = TokenKey::of("allowed");
        cache.put(allowed, Verdict::Allowed, now);
        for i in 0..CACHE_ENTRIES * 2 {
            cache.put(TokenKey::of(&format!("t{i}")), Verdict::Forbidden, now);
        }
        assert_eq!(cache.entries.len(), CACHE_ENTRIES);
        assert_eq!(
            cache.get(&allowed, now),
            Some(Verdict::Allowed),
            "the longest-lived answer stays"
        );
        // Once they have expired, the refusals make room without evicting live answers.
        let later = now + DENIED_FOR;
        cache.put(TokenKey::of("new"), Verdict::Allowed, later);
        assert_eq!(cache.entries.len(), 2);
        assert_eq!(
            cache.get(&TokenKey::of("new"), later),
            Some(Verdict::Allowed)
        );
        assert_ne!(TokenKey::of("good"), TokenKey::of("goodx"));
    }
}
