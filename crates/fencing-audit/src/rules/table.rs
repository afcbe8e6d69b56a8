//! The pattern table itself; [`super`] says how it is read.

use super::Category::{Leader, Lock};
use super::Role::{Acquire, Mention};
use super::language::{ALL, GO, JS_TS, JVM, PYTHON, RUST};
use super::{Rule, check, hint, rule};

/// The pattern table, in priority order within each category.
#[rustfmt::skip]
pub(crate) static RULES: &[Rule] = &[
    // ---- Distributed locks -------------------------------------------------
    // Redis SET NX, in every client's spelling. A lease only when it expires:
    // `SET k v NX` with no EX/PX (or SETNX with no EXPIRE after it) is a
    // set-if-absent that nobody can outlive, not a lock.
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)["'`]SET\s[^"'`]*\bNX\b"#, SET_NX)
        .needs(r#"(?i)\b(?:PX|EX|PXAT|EXAT)\b"#),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)["']set["']\s*[,)].*["']nx["']"#, SET_NX)
        .needs(EXPIRY_WORD),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)\.set\s*\(.*["']nx["']"#, SET_NX)
        .needs(EXPIRY_WORD),
    rule(Lock, Acquire, "redis-set-nx", GO, r"\.SetNX\s*\(", SETNX)
        // The expiry is the last argument; 0 or KeepTTL (on a key that does
        // not exist) means none.
        .unless(r"\bSetNX\s*\((?:[^,()]|\([^()]*\))*(?:,(?:[^,()]|\([^()]*\))*){2},\s*(?:0|redis\.KeepTTL)\s*\)"),
    rule(Lock, Acquire, "redis-set-nx", ALL, r"(?i)\bset_?nx\s*\(", SETNX)
        .needs_near(r"(?i)\bp?expire(?:at)?\s*\(|\.arg\(\s*\w*(?:ttl|expir)|['\x22]p?expire['\x22]")
        .same_key(),
    rule(Lock, Acquire, "redis-set-nx", ALL, r"(?i)\bnx\s*[:=]\s*true\b", SET_NX)
        .needs_near(r"(?i)\b(?:px|ex|pxat|exat|ttl|expiration)\s*[:=]"),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)\.arg\(\s*"nx"\s*\)|\bExistenceCheck::NX\b"#, SET_NX)
        .needs_near(r#"(?i)"(?:px|ex|pxat|exat)"|\bSetExpiry::"#),
    rule(Lock, Acquire, "redis-set-nx", ALL, r#"(?i)\bmode\s*:\s*"nx""#, SET_NX)
        .needs_near(r"\b(?:TTL|ExpireAt)\s*:"),
    rule(Lock, Acquire, "redis-set-nx", JVM, r"\.nx\(\)|\.setIfAbsent\s*\(", SET_NX)
        .needs_near(r"(?i)\.(?:px|ex|pxAt|exAt)\s*\(|\bDuration\b|\bTimeUnit\.|\bexpire\s*\("),
    // Redlock and other Redis lock libraries.
    rule(Lock, Acquire, "redlock", RUST.or(PYTHON).or(JS_TS),
        r#"\.lock\s*\(\s*[bfr]?["'`]|\.(?:acquire|using)\s*\(\s*\[|\bRedlock\s*\(\s*key\s*="#,
        "Redlock lease (several Redis nodes; still no fencing token)")
        .within(r"(?i)redlock|rslock"),
    rule(Lock, Mention, "redlock", ALL, r"\bnew\s+Redlock\s*\(|\bimport\s+Redlock\b|\bRedlock\s*=\s*require\(",
        "Redlock library (a lease over several Redis nodes)"),
    rule(Lock, Acquire, "redisson-lock", JVM, r"\bRedisson(?:Red|Multi)Lock\s*\(",
        "Redisson RedLock/MultiLock (a Redis lease with no fencing token)"),
    rule(Lock, Acquire, "redisson-lock", JVM, r"\.get(?:Fair|Spin|ReadWrite|Fenced)?Lock\s*\(",
        "Redisson lock (a Redis lease; only RFencedLock issues a token)")
        .within(r"(?i)redisson"),
    rule(Lock, Acquire, "hazelcast-lock", JVM, r"\b(?:getCPSubsystem\s*\(\s*\)|cpSubsystem)\s*\.getLock\s*\(",
        "Hazelcast CP lock (a FencedLock: its fence is the token, if it is used)"),
    rule(Lock, Acquire, "hazelcast-lock", JVM, r"\.getLock\s*\(",
        "Hazelcast lock (only the CP FencedLock's fence is a token)")
        .within(r"(?i)\bhazelcast\b"),
    rule(Lock, Acquire, "redsync", GO, r"\.NewMutex\s*\(",
        "redsync mutex (Redlock in Go: a Redis lease with no fencing token)")
        .within(r"go-redsync/redsync"),
    rule(Lock, Mention, "redsync", GO, r"go-redsync/redsync", "redsync (Redis locks for Go)"),
    rule(Lock, Acquire, "redis-lock", GO, r"\.Obtain\s*\(",
        "redislock lease (Redis; no fencing token)")
        .within(r"bsm/redislock"),
    rule(Lock, Acquire, "redis-lock", JS_TS, r"\bnew\s+(?:Redlock)?(?:Mutex|Semaphore)\s*\(",
        "redis-semaphore lock (Redis; no fencing token)")
        .within(r"redis-semaphore"),
    rule(Lock, Acquire, "redis-lock", PYTHON, r"\bredis_lock\.Lock\s*\(",
        "python-redis-lock (Redis; no fencing token)"),
    // etcd.
    rule(Lock, Acquire, "etcd-lock", GO, r"\bconcurrency\.New(?:Mutex|Locker)\s*\(",
        "etcd concurrency mutex (a lease; its key's create revision is the fencing token)"),
    rule(Lock, Mention, "etcd-lock", GO, r"clientv3/concurrency|client/v3/concurrency",
        "etcd concurrency package (mutexes and elections on leases)"),
    rule(Lock, Acquire, "etcd-lock", RUST, r"\.lock\s*\(\s*[^)\s]",
        "etcd lock (a lease; the lock key's create revision is the fencing token)")
        .within(ETCD_CLIENT_RS),
    rule(Lock, Acquire, "etcd-lock", PYTHON.or(JS_TS), r#"\.lock\s*\(\s*[bfr]?["'`]"#,
        "etcd3 lock (a lease; the lock key's create revision is the fencing token)")
        .within(ETCD3),
    rule(Lock, Acquire, "etcd-lock", JVM, r"\.lock\s*\(\s*[^)\s]",
        "jetcd lock (a lease; the lock key's create revision is the fencing token)")
        .within(r"io\.etcd\.jetcd"),
    // ZooKeeper.
    rule(Lock, Acquire, "zookeeper-lock", JVM,
        r"\bInterProcess(?:Semaphore)?Mutex\s*\(|\bInterProcess(?:ReadWrite|Multi)Lock\s*\(|\bInterProcessSemaphoreV2\s*\(",
        "Curator ZooKeeper lock (a session lease; the lock node's czxid is the fencing token)"),
    rule(Lock, Mention, "zookeeper-lock", JVM, r"curator\.framework\.recipes\.locks",
        "Curator lock recipes"),
    rule(Lock, Acquire, "zookeeper-lock", PYTHON,
        r"\b(?:Lock|WriteLock|ReadLock|Semaphore)\s*\(\s*[^)\s]",
        "kazoo ZooKeeper lock (a session lease; the lock node's czxid is the fencing token)")
        .within(r"\bkazoo\b"),
    rule(Lock, Mention, "zookeeper-lock", PYTHON, r"\bkazoo\.recipe\.lock\b", "kazoo lock recipe"),
    rule(Lock, Acquire, "zookeeper-lock", GO, r"\bzk\.NewLock\s*\(",
        "go-zookeeper lock (a session lease; the lock node's czxid is the fencing token)"),
    rule(Lock, Acquire, "zookeeper-lock", RUST, r"\.lock\s*\(\s*[^)\s]",
        "ZooKeeper lock (a session lease; the lock node's czxid is the fencing token)")
        .within(r"zookeeper_client|zookeeper-client"),
    rule(Lock, Acquire, "redis-lock", PYTHON, r#"\.lock\s*\(\s*[bfr]?["']"#,
        "redis-py lock (SET NX PX underneath; no fencing token)")
        .within(r"(?m)^\s*(?:import\s+redis\b|from\s+redis\b)|\baioredis\b"),
    // Consul.
    rule(Lock, Acquire, "consul-lock", GO, r"\.Lock(?:Key|Opts)\s*\(",
        "Consul lock (a session lease; its LockIndex can serve as the fencing token)")
        .within(r"hashicorp/consul/api"),
    // ShedLock, Spring Integration, DynamoDB, tooz.
    rule(Lock, Acquire, "shedlock", JVM, r"@SchedulerLock\b|\.executeWithLock\s*\(",
        "ShedLock job lock (a TTL lease; a paused run overlaps the next)"),
    rule(Lock, Mention, "shedlock", JVM, r"@EnableSchedulerLock\b|\bnet\.javacrumbs\.shedlock\b",
        "ShedLock"),
    rule(Lock, Acquire, "spring-lock-registry", JVM, r"\.obtain\s*\(",
        "Spring Integration LockRegistry lock (a lease with no fencing token)")
        .within(r"\b\w*LockRegistry\b"),
    rule(Lock, Mention, "spring-lock-registry", JVM, r"\b(?:Redis|Jdbc|Zookeeper)LockRegistry\b",
        "Spring Integration LockRegistry"),
    rule(Lock, Acquire, "dynamodb-lock", ALL, r"\.(?:acquire_lock|AcquireLock|acquireLock|tryAcquireLock)\s*\(",
        "DynamoDB lock client lease (no fencing token)")
        .within(r"(?i)dynamo\w*lock"),
    rule(Lock, Mention, "dynamodb-lock", ALL, r"\bAmazonDynamoDBLockClient\b|\bpython_dynamodb_lock\b|cirello\.io/dynamolock",
        "DynamoDB lock client"),
    rule(Lock, Acquire, "tooz-lock", PYTHON, r"\.get_lock\s*\(", "tooz coordination lock")
        .within(r"\btooz\b"),
    // Database locks held across a session.
    rule(Lock, Acquire, "pg-advisory-lock", ALL, r"(?i)\bpg_(?:try_)?advisory_lock(?:_shared)?\s*\(",
        "PostgreSQL session advisory lock (released if the session drops; writes elsewhere are unprotected)"),
    rule(Lock, Mention, "pg-advisory-xact-lock", ALL, r"(?i)\bpg_(?:try_)?advisory_xact_lock(?:_shared)?\s*\(",
        "PostgreSQL transaction advisory lock (safe for writes in the same transaction; writes elsewhere need a token)"),
    rule(Lock, Acquire, "mysql-get-lock", ALL, r"\bGET_LOCK\s*\(|(?i)\bselect\s+get_lock\s*\(",
        "MySQL named lock (released if the session drops; writes elsewhere are unprotected)"),
    // Home-grown.
    rule(Lock, Acquire, "distributed-lock", ALL, r"(?i)\b\w*distributed\w*(?:lock|mutex)\w*\s*\(",
        HOME_GROWN),
    rule(Lock, Acquire, "acquire-lock", ALL,
        r"\b(?:acquire_lock|acquireLock|AcquireLock|try_acquire_lock|tryAcquireLock|TryAcquireLock|obtain_lock|obtainLock|ObtainLock)\s*\(",
        "lock acquisition in a file that talks to a lock service")
        // Code words only: "distributed" alone is in every Apache license header.
        .within(r"(?i)redis|etcd|zookeeper|kazoo|curator|consul|dynamo\w*lock|advisory_lock|leader_?elect|distributed[_ ]?(?:lock|mutex)|\blease_?(?:id|ttl|duration|timeout|seconds)\b"),
    rule(Lock, Mention, "distributed-lock", ALL, r"(?i)\b\w*distributed\w*(?:lock|mutex)\w*",
        HOME_GROWN),
    // ---- Optimistic concurrency -------------------------------------------
    check("token-column", ALL,
        r"(?i)\b(?:lock|fencing|fence)_token\s*(?:<=?|>=?|=\s*(?:\?|\$\d|:\w|@\w|excluded\.|%s)|\s(?:BIGINT|INTEGER|INT|NUMERIC)\b)",
        "fencing-token column checked by the store"),
    check("version-check", ALL,
        r"(?i)\b(?:where|and)\s+(?:\w+\.)?(?:version|row_?version|revision|lock_?version)\s*=\s*(?:\?|\$\d|:\w|@\w|%s|%\(\w+\)s|\{\w*\}|excluded\.|\d+\b)",
        "version-column check (compare-and-set)"),
    check("version-check", ALL, r"(?i)\bversion\s*=\s*(?:\w+\.)?version\s*\+\s*1\b",
        "version-column bump (compare-and-set)"),
    check("version-check", JVM, r"@(?:\w+\.)*Version\b|@OptimisticLock\w*|\bLockModeType\.OPTIMISTIC\w*",
        "JPA optimistic locking (@Version)"),
    check("version-check", PYTHON, r"\bversion_id_col\b|\b\w*VersionField\b",
        ORM_VERSION),
    check("version-check", JS_TS, r"@VersionColumn\b|\boptimisticConcurrency\s*:\s*true",
        ORM_VERSION),
    check("if-match", ALL, r"(?i)\bif[-_]?(?:none[-_]?)?match\b",
        "conditional write (If-Match / If-None-Match)"),
    check("gcs-precondition", ALL,
        r"(?i)\bif_?(?:meta)?generation_?(?:not_?)?match\b|\bGenerationMatch\s*:",
        "GCS precondition (ifGenerationMatch)"),
    check("etag-condition", ALL,
        r"\bmatch_condition\s*=|\bMatchConditions\.\w+|\bETagCondition\b|\bBlob(?:Request|Access)Conditions\b",
        "ETag condition on a write"),
    check("conditional-write", ALL, r"\bConditionExpression\b|\.condition_expression\s*\(|\.conditionExpression\s*\(|\battribute_not_exists\s*\(",
        "DynamoDB conditional write"),
    check("etcd-revision-compare", GO, r"\bclientv3\.(?:Mod|Create)Revision\s*\(",
        ETCD_COMPARE),
    check("etcd-revision-compare", RUST, r"\bCompare::(?:mod|create)_revision\s*\(",
        ETCD_COMPARE),
    check("etcd-revision-compare", JVM, r"\bCmpTarget\.(?:mod|create)Revision\s*\(",
        ETCD_COMPARE),
    // ---- Leader election and singleton jobs ------------------------------
    rule(Leader, Acquire, "k8s-leader-election", GO, r"\bleaderelection\.(?:RunOrDie|NewLeaderElector)\s*\(",
        "Kubernetes leader election (a Lease with a TTL; no fencing token reaches the writes)"),
    rule(Leader, Acquire, "k8s-leader-election", GO, r"\bLeaderElection\s*:\s*true\b",
        "controller-runtime leader election (a Lease with a TTL)"),
    rule(Leader, Mention, "k8s-leader-election", GO, r"client-go/tools/leaderelection",
        "Kubernetes leader election package"),
    rule(Leader, Mention, "k8s-lease", GO, r"\bresourcelock\.(?:LeaseLock|New)\b|\bcoordinationv1\.Lease\b",
        "Kubernetes Lease object"),
    rule(Leader, Acquire, "k8s-leader-election", PYTHON, r"\bleaderelection\.LeaderElection\s*\(",
        K8S_ELECTION),
    rule(Leader, Acquire, "k8s-leader-election", JVM, r"\bLeaderElector\s*\(|\.leaderElector\s*\(",
        K8S_ELECTION),
    rule(Leader, Acquire, "k8s-leader-election", RUST, r"\bLease(?:Lock|Manager)::new\s*\(",
        K8S_ELECTION)
        .within(r"(?i)kube"),
    rule(Leader, Acquire, "etcd-election", GO, r"\bconcurrency\.NewElection\s*\(",
        ETCD_ELECTION),
    rule(Leader, Acquire, "etcd-election", RUST, r"\.campaign\s*\(",
        ETCD_ELECTION)
        .within(ETCD_CLIENT_RS),
    rule(Leader, Acquire, "etcd-election", JS_TS, r#"\.election\s*\(\s*["'`]"#,
        ETCD_ELECTION)
        .within(ETCD3),
    rule(Leader, Acquire, "etcd-election", JVM, r"\bgetElectionClient\s*\(",
        "jetcd election (a lease; the leader key's create revision is the fencing token)"),
    rule(Leader, Acquire, "zookeeper-election", JVM, r"\bLeader(?:Latch|Selector)\s*\(",
        "Curator leader election (a ZooKeeper session; czxid is the fencing token)"),
    rule(Leader, Acquire, "zookeeper-election", PYTHON, r"\.Election\s*\(\s*[^)\s]",
        "kazoo leader election (a ZooKeeper session; czxid is the fencing token)")
        .within(r"\bkazoo\b"),
    rule(Leader, Acquire, "spring-leader", JVM, r"\b(?:LockRegistry)?LeaderInitiator\s*\(",
        "Spring Integration leader election (a lock with a TTL)"),
    rule(Leader, Mention, "scheduled-job", JVM, r"@Scheduled\b",
        "scheduled job in a file that takes a lock: every instance runs the schedule, the lock picks one")
        .within(r"@SchedulerLock\b|\bgetLock\s*\(|\bInterProcess\w+|\bLockRegistry\b|(?i)distributed\w*lock|\bFencedLock\b"),
    rule(Leader, Mention, "singleton-guard", ALL,
        r"(?i)\b\w*(?:single_?instance_?(?:lock|guard|job|check|only)|(?:ensure|enforce)_?single_?instance|only_?one_?instance|run_?once_?globally|singleton_?(?:job|task|lock|guard|runner))\w*",
        "singleton-job guard"),
    rule(Leader, Mention, "singleton-guard", ALL, r"(?i)\b\w*cron_?(?:job_?)?lock\w*",
        "cron lock"),
    rule(Leader, Mention, "singleton-guard", PYTHON, r"\bcelery_once\b|\bQueueOnce\b|\bcelery_singleton\b",
        "Celery singleton task"),
    // ---- Hints: the skill's language signals ----------------------------
    hint("single-writer",
        r"(?i)\bonly\s+one\s+(?:process|instance|worker|node|replica|pod|server|writer|client|job|leader|holder|consumer|machine|host)(?:es|s)?\s+(?:should|must|can|may|will|is\s+allowed\s+to)\s+(?:ever\s+)?(?:write|run|process|execute|update|modify|hold|own|perform|handle|act|access)\w*\b",
        "single-writer assumption: is it enforced by the store, or only by a lease?"),
    hint("ttl-assumption",
        r"(?i)\b(?:lease|lock)\s+(?:has|have|with|uses?|gets?)\s+an?\s+\d+(?:\.\d+)?[- ]?(?:ms|milliseconds?|s|secs?|seconds?|min|minutes?)\s+(?:ttl|timeout|expiry)\b",
        TTL_ASSUMPTION),
    hint("ttl-assumption",
        r"(?i)\bttl\b[^.\n]{0,60}?\bso\s+(?:we|it)(?:'re|\s+are|\s+is|'ll\s+be|\s+should\s+be)\s+safe\b",
        TTL_ASSUMPTION),
    hint("process-pause",
        r"(?i)\b(?:gc|garbage[- ]collection|stop[- ]the[- ]world|vm|process)\s+(?:pause|freeze|suspension)s?\b",
        "process pauses: a paused lock holder can outlive its lease"),
    hint("process-pause", r"(?i)\bmiss(?:ed|es|ing)?\s+(?:its|their|the|a|our)\s+heartbeats?\b",
        "missed heartbeats: a paused lock holder can outlive its lease"),
    hint("duplicate-despite-lock",
        r"(?i)\bduplicate\s+(?:processing|writes?|runs?|executions?|jobs?|deliver(?:y|ies))\b[^.\n]{0,60}\b(?:despite|even\s+though|although)\b[^.\n]{0,40}\block|\bjobs?\s+(?:ran|runs|executed|was\s+run)\s+twice\b",
        "duplicates despite a lock: the classic symptom of an unfenced lease"),
    hint("lock-service",
        r"(?i)\b(?:redis|etcd|zookeeper|consul|dynamodb|postgres(?:ql)?)\b[^.\n]{0,40}?\bfor\s+(?:distributed\s+)?(?:locking|locks|leader\s+election|mutual\s+exclusion)\b",
        "a lock service in use: do its grants carry a fencing token to the writes?"),
    hint("split-brain", r"(?i)\bsplit[- ]brain\b",
        "split brain: two holders at once is what fencing tokens make harmless"),
];

const SET_NX: &str =
    "Redis SET NX lock with an expiry (a TTL lease; Redis issues no fencing token)";
const SETNX: &str = "Redis SETNX lock with an expiry (a TTL lease; Redis issues no fencing token)";
/// An expiry option among a command's string arguments.
const EXPIRY_WORD: &str = r#"(?i)["'`](?:px|ex|pxat|exat)["'`]"#;

// Messages and contexts that several rows share.
const HOME_GROWN: &str = "home-grown distributed lock";
const ORM_VERSION: &str = "ORM version column";
const ETCD_COMPARE: &str = "etcd transaction comparing a revision";
const K8S_ELECTION: &str = "Kubernetes leader election (a Lease with a TTL)";
const ETCD_ELECTION: &str =
    "etcd election (a lease; the leader key's create revision is the fencing token)";
const TTL_ASSUMPTION: &str = "TTL as the safety argument: no TTL bounds a process pause";
/// The Rust etcd client crate.
const ETCD_CLIENT_RS: &str = r"etcd_client|etcd-client";
/// The Node and Python etcd3 clients.
const ETCD3: &str = r"\betcd3\b";
