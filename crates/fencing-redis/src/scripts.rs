//! The Lua scripts. Each runs atomically on the server.
//!
//! Keys per resource: `{prefix}{resource}:lock` holds `token:holder` with a
//! TTL; `{prefix}{resource}:fence` is the counter and never expires.
//! Tokens travel as strings: Lua numbers are doubles and would round tokens
//! above 2^53.
//!
//! Anything else at the lock key (redis-py's or node-redlock's random
//! value, a hand-written `SET NX`, Redisson's hash) is another client's
//! lock: held by a foreign holder, never overwritten, renewed or deleted.

/// The check every script that can mint or raise a token runs first, on
/// the node that will execute the write: a connection manager reconnects
/// on its own and may land on another node (a promoted replica behind a
/// moved address), and a replica may attach to the primary at any time.
///
/// ARGV (from `first`): the `run_id` of the server the issuer checked
/// (empty: no checks, the caller accepted a volatile counter), the fewest
/// and the most connected replicas allowed (empty: no upper bound).
/// Returns nil if this node may grant; `{-1, run_id}` if it is not the
/// checked server (the issuer checks it, then retries); `{-2, setting,
/// value[, online replicas]}` if it must not grant (role, replicas, the
/// append-only file, an evicting `maxmemory-policy`; `counter_expires`
/// refuses a counter with a TTL the same way). `INFO` is allowed in scripts (`ROLE` and
/// `CONFIG` are not); `run_id` changes with every server process, so a
/// restart or another node is always checked again.
const GUARD: &str = r"
local function guard(first)
  local run_id, fewest, most = ARGV[first], ARGV[first + 1], ARGV[first + 2]
  if run_id == '' then return nil end
  local actual = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if actual ~= run_id then return {-1, actual or ''} end
  local replication = redis.call('INFO', 'replication')
  local role = string.match(replication, 'role:(%a+)')
  if role ~= 'master' then return {-2, 'role', role or ''} end
  -- connected_slaves counts replicas still syncing too; only an online one
  -- acknowledges a WAIT.
  local replicas = tonumber(string.match(replication, 'connected_slaves:(%d+)')) or 0
  local online = 0
  for _ in string.gmatch(replication, 'state=online') do online = online + 1 end
  if online < tonumber(fewest) or (most ~= '' and replicas > tonumber(most)) then
    return {-2, 'connected_slaves', tostring(replicas), tostring(online)}
  end
  if string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)') ~= '1' then
    return {-2, 'appendonly', 'no'}
  end
  -- `CONFIG SET` can switch it at run time; an allkeys-* policy may evict
  -- the counter.
  local policy = string.match(redis.call('INFO', 'memory'), 'maxmemory_policy:([%w-]+)')
  if policy and string.sub(policy, 1, 7) == 'allkeys' then
    return {-2, 'maxmemory-policy', policy}
  end
  return nil
end

-- A counter with a TTL (a sweep over the prefix, an EXPIRE by hand) would
-- vanish, and the tokens start again at 1. Checked unless the caller
-- accepted a volatile counter (an empty run_id).
local function counter_expires(run_id, counter)
  if run_id == '' then return nil end
  local ttl = redis.call('PTTL', counter)
  if ttl >= 0 then return {-2, 'fence-counter-ttl', tostring(ttl)} end
  return nil
end
";

/// KEYS: lock, fence. ARGV: holder, ttl ms, then the guard's three.
/// Returns `{1, token, 1}` if granted with a new token, `{1, token, 0}` if
/// a live holder acquired again and keeps its token (as Hazelcast's
/// FencedLock does), `{0, token, holder}` if held (`{0, '0', what}` by a
/// foreign holder), `{-3, counter}` if the counter is at `i64::MAX`
/// (Redis's `INCR` cannot go above it), or a guard refusal.
pub(crate) fn acquire() -> String {
    guarded(
        3,
        r"
local kind, token, holder = lock_record(KEYS[1], KEYS[2])
if kind == 'foreign' then return {0, '0', token} end
if kind == 'ours' then
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token, 0}
  end
  return {0, token, holder}
end
local counter = redis.call('GET', KEYS[2])
if counter and (string.len(counter) > 19 or
   (string.len(counter) == 19 and counter >= '9223372036854775807')) then
  return {-3, counter}
end
local expires = counter_expires(ARGV[3], KEYS[2])
if expires then return expires end
redis.call('INCR', KEYS[2])
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, token, 1}
",
    )
}

/// KEYS: lock. ARGV: `token:holder`, ttl ms. Returns 1 if renewed. (A
/// `GET` of a hash is an error: another client's lock on the key of a
/// lease that ended is a lost lease.)
pub(crate) const RENEW: &str = r"
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// KEYS: lock. ARGV: `token:holder`, the wake-up channel. Returns 1 if
/// released, and then publishes the lock key on the channel for waiters:
/// in the script, so only a release that happened wakes anyone. `pcall`:
/// an ACL that denies the channel costs waiters their wake-up, not the
/// holder its release.
pub(crate) const RELEASE: &str = r"
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  local deleted = redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[2], KEYS[1])
  return deleted
end
return 0
";

/// KEYS: lock, fence. Returns `{}` if free, `{'ours', token, holder}` or
/// `{'foreign', what}`.
pub(crate) fn holder() -> String {
    format!(
        "{LOCK_RECORD}{}",
        r"
local kind, token, holder = lock_record(KEYS[1], KEYS[2])
if kind == 'ours' then return {kind, token, holder} end
if kind == 'foreign' then return {kind, token} end
return {}
"
    )
}

/// What the lock key holds: nothing (nil), a record this issuer wrote
/// (`'ours', token, holder`: a string `token:holder` whose token is a
/// decimal no higher than the counter, as every grant leaves it), or
/// another client's lock (`'foreign', what`: its type and size, never its
/// value, which for redis-py and redlock is the capability to release it).
const LOCK_RECORD: &str = r"
local function lock_record(lock, fence)
  local kind = redis.call('TYPE', lock).ok
  if kind == 'none' then return nil end
  if kind ~= 'string' then return 'foreign', 'foreign:a Redis ' .. kind end
  local value = redis.call('GET', lock)
  local token, holder = string.match(value, '^([1-9]%d*):(.+)$')
  local counter = redis.call('GET', fence)
  if token and counter and (string.len(token) < string.len(counter) or
     (string.len(token) == string.len(counter) and token <= counter)) then
    return 'ours', token, holder
  end
  return 'foreign', 'foreign:a string of ' .. string.len(value) .. ' bytes, not token:holder'
end
";

/// KEYS: fence. ARGV: floor, then the guard's three. Raises the counter to
/// at least the floor; returns `{1, counter}`, or a guard refusal.
pub(crate) fn raise_floor() -> String {
    guarded(
        2,
        r"
local expires = counter_expires(ARGV[2], KEYS[1])
if expires then return expires end
local current = redis.call('GET', KEYS[1])
if (not current) or (string.len(current) < string.len(ARGV[1])) or
   (string.len(current) == string.len(ARGV[1]) and current < ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, ARGV[1]}
end
return {1, current}
",
    )
}

/// `body` behind [`GUARD`], run with the guard's arguments from ARGV
/// `first`: a refusal is returned before `body` runs.
fn guarded(first: usize, body: &str) -> String {
    format!(
        "{GUARD}{LOCK_RECORD}\nlocal refused = guard({first})\nif refused then return refused end{body}"
    )
}
