//! The election on the memory backends, with real time and bounded waits.

use std::time::Instant;

use super::*;
use crate::LeaseRequest;
use crate::memory::{MemoryIssuer, MemoryStore};

/// Long enough that a hand-over within it cannot be an expiry.
const LONG_TTL: Duration = Duration::from_secs(30);
/// A bound for waits that should take milliseconds.
const SOON: Duration = Duration::from_secs(5);

fn backends() -> (Arc<dyn TokenIssuer>, Arc<dyn FencedStore>) {
    (Arc::new(MemoryIssuer::new()), Arc::new(MemoryStore::new()))
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(SOON, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {SOON:?}"))
}

#[tokio::test]
async fn resign_hands_over_at_once_with_a_higher_token() {
    let (issuer, _) = backends();
    let a = Election::new(issuer.clone(), "r", "a", LONG_TTL)
        .campaign()
        .await
        .unwrap();
    let b = Election::new(issuer.clone(), "r", "b", LONG_TTL);
    let waiting = tokio::spawn(async move { b.campaign().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "b must wait while a leads");

    let started = Instant::now();
    let a_token = a.token();
    a.resign().await.unwrap();
    let b = within("the hand-over", waiting).await.unwrap().unwrap();
    assert!(started.elapsed() < LONG_TTL / 2);
    assert!(b.token() > a_token);
    assert_eq!(b.leader().candidate, "b");
    b.resign().await.unwrap();
}

#[tokio::test]
async fn takeover_fences_keys_the_new_leader_never_writes() {
    let (issuer, store) = backends();
    let other: Arc<dyn FencedStore> = Arc::new(MemoryStore::new());
    let election = |name: &str| {
        Election::new(issuer.clone(), "r", name, Duration::from_millis(200))
            .fence_on_takeover(store.clone(), "k")
            .fence_on_takeover(other.clone(), "k2")
    };
    let zombie = election("zombie").campaign().await.unwrap();
    let zombie_token = zombie.token();
    assert_eq!(store.mark("k").await.unwrap(), Some(zombie_token));
    // The zombie's term ends (its lease given up behind its back: a
    // pause past the TTL looks the same to the issuer).
    issuer.release(&zombie.lease()).await.unwrap();
    let next = election("next").campaign().await.unwrap();
    assert!(next.token() > zombie_token);
    within("the lost signal", zombie.lost()).await;
    assert!(zombie.is_lost());

    for (store, key) in [(&store, "k"), (&other, "k2")] {
        let err = store
            .put(key, "late".into(), zombie_token)
            .await
            .unwrap_err();
        assert_eq!(err.stale_tokens(), Some((zombie_token, next.token())));
        assert_eq!(store.get(key).await.unwrap(), None, "nothing written");
    }
    next.resign().await.unwrap();
    assert!(matches!(
        zombie.resign().await,
        Err(Error::LeaseLost { .. })
    ));
}

#[tokio::test]
async fn a_store_ahead_of_the_issuer_is_an_error_and_the_term_is_given_up() {
    let (issuer, store) = backends();
    store.fence("k", FencingToken::new(1_000)).await.unwrap();
    let election = Election::new(issuer.clone(), "r", "a", LONG_TTL).fence_on_takeover(store, "k");
    let err = election.campaign().await.unwrap_err();
    assert!(matches!(err, Error::StaleToken { .. }), "{err}");
    assert_eq!(issuer.holder("r").await.unwrap(), None, "resigned");
}

#[tokio::test]
async fn dropping_a_leadership_resigns() {
    let (issuer, _) = backends();
    let election = Election::new(issuer.clone(), "r", "a", LONG_TTL);
    drop(election.campaign().await.unwrap());
    let b = within(
        "the next campaign",
        Election::new(issuer, "r", "b", LONG_TTL).campaign(),
    )
    .await
    .unwrap();
    b.resign().await.unwrap();
}

#[tokio::test]
async fn the_observer_sees_every_term_in_order() {
    let (issuer, _) = backends();
    let watcher = Election::new(issuer.clone(), "r", "w", LONG_TTL)
        .with_poll_interval(Duration::from_millis(5));
    let mut observer = watcher.observe();
    assert_eq!(observer.next().await.unwrap(), None, "no one leads yet");

    let watching = tokio::spawn(async move {
        let mut terms: Vec<Leader> = Vec::new();
        while terms.len() < 3 {
            terms.push(observer.next_term().await.unwrap());
        }
        terms
    });
    let mut tokens = Vec::new();
    for name in ["a", "b", "c"] {
        let term = Election::new(issuer.clone(), "r", name, LONG_TTL)
            .campaign()
            .await
            .unwrap();
        tokens.push(term.token());
        tokio::time::sleep(Duration::from_millis(60)).await;
        term.resign().await.unwrap();
    }
    let terms = within("the observer", watching).await.unwrap();
    let seen: Vec<_> = terms
        .iter()
        .map(|l| (l.candidate.as_str(), l.token))
        .collect();
    assert_eq!(seen, [("a", tokens[0]), ("b", tokens[1]), ("c", tokens[2])]);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(watcher.leader().await.unwrap(), None);
}

#[tokio::test]
async fn the_same_candidate_id_gets_a_new_term_never_the_old_one() {
    // Memory is re-entrant by holder id: a fixed holder id would hand a
    // restarted candidate its paused predecessor's token.
    let (issuer, _) = backends();
    let first = Election::new(issuer.clone(), "r", "node-1", Duration::from_millis(150))
        .campaign()
        .await
        .unwrap();
    let again = Election::new(issuer.clone(), "r", "node-1", LONG_TTL);
    let second = tokio::spawn(async move { again.campaign().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !second.is_finished(),
        "the same candidate id must still wait"
    );
    let first_token = first.token();
    first.resign().await.unwrap();
    let second = within("the second term", second).await.unwrap().unwrap();
    assert!(second.token() > first_token);
    assert_ne!(second.leader().holder, HolderId::new("node-1").unwrap());
    second.resign().await.unwrap();
}

#[test]
fn candidate_ids_are_read_back_from_holder_ids() {
    let id = |s: &str| HolderId::new(s).unwrap();
    let random = "0123456789abcdef0123456789abcdef";
    assert_eq!(candidate_of(&id(&format!("web-1#{random}"))), "web-1");
    assert_eq!(candidate_of(&id(&format!("a#b#{random}"))), "a#b");
    assert_eq!(candidate_of(&id("plain-holder")), "plain-holder");
    assert_eq!(candidate_of(&id("x#short")), "x#short");
    assert_eq!(
        candidate_of(&id(&format!("#{random}"))),
        format!("#{random}")
    );
}

#[tokio::test]
async fn bad_candidate_ids_and_ttls_are_invalid_input() {
    let (issuer, _) = backends();
    for election in [
        Election::new(issuer.clone(), "r", "", LONG_TTL),
        Election::new(issuer.clone(), "r", "x".repeat(201), LONG_TTL),
        Election::new(issuer.clone(), "", "a", LONG_TTL),
        Election::new(issuer.clone(), "r", "a", Duration::MAX),
    ] {
        let err = election.campaign().await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
}

/// The first `fence` is applied, then answered as lost: the store holds the
/// new mark, the caller hears `OutcomeUnknown`.
#[derive(Debug)]
struct FirstFenceUnanswered {
    inner: MemoryStore,
    answered: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl FencedStore for FirstFenceUnanswered {
    fn name(&self) -> &'static str {
        "lossy"
    }
    fn limits(&self) -> crate::Limits {
        self.inner.limits()
    }
    async fn put(&self, key: &str, value: bytes::Bytes, token: FencingToken) -> Result<()> {
        self.inner.put(key, value, token).await
    }
    async fn get(&self, key: &str) -> Result<Option<crate::Versioned>> {
        self.inner.get(key).await
    }
    async fn fence(&self, key: &str, token: FencingToken) -> Result<FencingToken> {
        let applied = self.inner.fence(key, token).await?;
        if !self
            .answered
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Error::outcome_unknown(
                "lossy",
                "fence",
                "the answer was lost",
            ));
        }
        Ok(applied)
    }
    async fn mark(&self, key: &str) -> Result<Option<FencingToken>> {
        self.inner.mark(key).await
    }
    async fn delete(&self, key: &str, token: FencingToken) -> Result<()> {
        self.inner.delete(key, token).await
    }
}

#[tokio::test]
async fn a_takeover_fence_whose_answer_is_lost_is_retried_not_resigned() {
    let (issuer, _) = backends();
    let store = Arc::new(FirstFenceUnanswered {
        inner: MemoryStore::new(),
        answered: false.into(),
    });
    let term = within(
        "the campaign",
        Election::new(issuer.clone(), "r", "a", LONG_TTL)
            .fence_on_takeover(store.clone(), "k")
            .campaign(),
    )
    .await
    .expect("a fence is idempotent: the lost answer is settled by fencing again");
    assert_eq!(store.mark("k").await.unwrap(), Some(term.token()));
    term.resign().await.unwrap();
}

/// The first `acquire` is granted, then answered as lost; not re-entrant,
/// so asking again would wait on its own grant: only `holder` settles it.
#[derive(Debug)]
struct FirstGrantUnanswered {
    inner: MemoryIssuer,
    answered: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl TokenIssuer for FirstGrantUnanswered {
    fn name(&self) -> &'static str {
        "lossy"
    }
    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        self.inner.try_acquire(request).await
    }
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        if !self
            .answered
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.inner.acquire(request, wait).await?;
            return Err(Error::outcome_unknown(
                "lossy",
                "acquire",
                "the answer was lost",
            ));
        }
        // Not re-entrant: the holder's own grant counts as held.
        if let Some(held) = self.inner.holder(&request.resource).await?
            && held.holder == request.holder
        {
            tokio::time::sleep(wait).await;
            return Err(Error::Timeout {
                operation: "acquire".into(),
                after: wait,
            });
        }
        self.inner.acquire(request, wait).await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.inner.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        self.inner.holder(resource).await
    }
}

#[tokio::test]
async fn a_grant_whose_answer_is_lost_is_found_through_holder() {
    let issuer = Arc::new(FirstGrantUnanswered {
        inner: MemoryIssuer::new(),
        answered: false.into(),
    });
    let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new());
    let term = within(
        "the campaign",
        Election::new(issuer.clone(), "r", "a", LONG_TTL)
            .fence_on_takeover(store.clone(), "k")
            .campaign(),
    )
    .await
    .expect("the lost grant is ours: holder says so");
    let held = issuer.holder("r").await.unwrap().expect("held");
    assert_eq!(
        (held.holder, held.token),
        (term.lease().holder().clone(), term.token())
    );
    assert_eq!(store.mark("k").await.unwrap(), Some(term.token()));
    term.resign().await.unwrap();
    assert_eq!(
        issuer.holder("r").await.unwrap(),
        None,
        "resigned: free at once"
    );
}

/// The first `acquire` is granted and its answer lost, and `holder` fails
/// when asked about it; the second `acquire` is lost too (the poll that
/// would have seen its own grant). The grant `holder` then reports is the
/// first attempt's.
#[derive(Debug)]
struct GrantFoundOneAttemptLate {
    inner: MemoryIssuer,
    acquires: std::sync::atomic::AtomicU32,
    holder_asked: std::sync::atomic::AtomicBool,
    first_acquire_at: std::sync::Mutex<Option<std::time::Instant>>,
}

#[async_trait::async_trait]
impl TokenIssuer for GrantFoundOneAttemptLate {
    fn name(&self) -> &'static str {
        "lossy"
    }
    async fn try_acquire(&self, request: &LeaseRequest) -> Result<Option<Lease>> {
        self.inner.try_acquire(request).await
    }
    async fn acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Lease> {
        let attempt = self
            .acquires
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if attempt == 0 {
            *self.first_acquire_at.lock().unwrap() = Some(std::time::Instant::now());
            self.inner.acquire(request, wait).await?;
        }
        Err(Error::outcome_unknown(
            "lossy",
            "acquire",
            "the answer was lost",
        ))
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.inner.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn holder(&self, resource: &str) -> Result<Option<Holding>> {
        if !self
            .holder_asked
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Error::backend("lossy", true, "holder's answer was lost"));
        }
        self.inner.holder(resource).await
    }
}

/// A lease found through `holder` after two lost answers is dated from the
/// first acquire, whose grant it is: dated from the second, its deadline
/// would run past the server's, and another candidate could lead while
/// this one still believed it did.
#[tokio::test]
async fn a_grant_found_after_two_lost_answers_is_dated_from_the_first() {
    let issuer = Arc::new(GrantFoundOneAttemptLate {
        inner: MemoryIssuer::new(),
        acquires: 0.into(),
        holder_asked: false.into(),
        first_acquire_at: std::sync::Mutex::new(None),
    });
    let term = within(
        "the campaign",
        Election::new(issuer.clone(), "r", "a", LONG_TTL).campaign(),
    )
    .await
    .expect("the first grant is ours: holder says so at the second ask");
    let first = issuer.first_acquire_at.lock().unwrap().expect("acquired");
    assert!(
        term.lease().deadline() <= first + LONG_TTL,
        "the lease's deadline is {:?} past the first grant's",
        term.lease().deadline() - (first + LONG_TTL)
    );
    term.resign().await.unwrap();
}
