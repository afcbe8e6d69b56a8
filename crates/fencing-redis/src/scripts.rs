//! The Lua scripts. Each runs atomically on the server.
//!
//! Keys per resource (see [`Layout`](crate::Layout)): the lock, with a
//! TTL, and the counter, which never expires. Ours: `{prefix}{resource}:lock`
//! holds `token:holder`, `{prefix}{resource}:fence` counts. Redisson's: a
//! hash at the lock name, our holder its field `fencing:{holder}` whose
//! value is the token, and `RFencedLock`'s counter.
//! Tokens travel as strings: Lua numbers are doubles and would round tokens
//! above 2^53.
//!
//! Anything else at the lock key (redis-py's or node-redlock's random
//! value, a hand-written `SET NX`, a Redisson holder's field) is another
//! client's lock: held by a foreign holder, never overwritten, renewed or
//! deleted.

/// How the lock key records our holder.
#[derive(Clone, Copy)]
pub(crate) enum Record {
    /// A string `token:holder`.
    String,
    /// A Redisson lock hash with the one field `fencing:{holder}` = token.
    RedissonHash,
}

impl Record {
    /// The Lua function that reads the record (`lock_record` or
    /// `redisson_record`), in the shape every script expects.
    fn reader(self) -> &'static str {
        match self {
            Self::String => "lock_record",
            Self::RedissonHash => "redisson_record",
        }
    }

    /// Lua that writes a new grant: `token` for `ARGV[1]`, TTL `ARGV[2]`.
    fn write(self) -> &'static str {
        match self {
            Self::String => "redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])",
            Self::RedissonHash => {
                "redis.call('HSET', KEYS[1], 'fencing:' .. ARGV[1], token)\n\
                 redis.call('PEXPIRE', KEYS[1], ARGV[2])"
            }
        }
    }

    /// A Lua condition: the lock key holds holder `ARGV[1]`'s record with
    /// token `ARGV[2]`.
    fn holds(self) -> &'static str {
        match self {
            Self::String => {
                "redis.call('TYPE', KEYS[1]).ok == 'string' and \
                 redis.call('GET', KEYS[1]) == ARGV[2] .. ':' .. ARGV[1]"
            }
            Self::RedissonHash => {
                "redis.call('TYPE', KEYS[1]).ok == 'hash' and \
                 redis.call('HGET', KEYS[1], 'fencing:' .. ARGV[1]) == ARGV[2]"
            }
        }
    }
}

/// The check every script that can mint or raise a token runs first, on
/// the node that will execute the write: a connection manager reconnects
/// on its own and may land on another node (a promoted replica behind a
/// moved address), and a replica may attach to the primary at any time.
///
/// ARGV (from `first`): the `run_id` of the server the issuer checked
/// (empty: no checks, the caller accepted a volatile counter), the fewest
/// and the most connected replicas allowed (empty: no upper bound). The
/// last of KEYS is the verdict key (`Layout::verdict_key`).
/// Returns nil if this node may grant; `{-1, run_id}` if it is not the
/// checked server (the issuer checks it, then retries); `{-2, setting,
/// value[, online replicas]}` if it must not grant (role, replicas, the
/// append-only file, an evicting `maxmemory-policy`; `counter_expires`
/// refuses a counter with a TTL the same way). `INFO` is allowed in scripts (`ROLE` and
/// `CONFIG` are not); `run_id` changes with every server process, so a
/// restart or another node is always checked again.
///
/// The process and its role and replicas are checked in every grant. The
/// append-only file and the memory policy (`INFO persistence` and `INFO
/// memory`, the two costly sections: about 20 µs of Redis's one thread)
/// are remembered for [`RECHECK_WINDOW`](crate::RECHECK_WINDOW) in the
/// verdict key, written with `REPL_NONE` (the write reaches no replica and
/// no AOF; its expiry does, as a `DEL`). A verdict is trusted only as a
/// string holding this very process's `run_id`, so a copy of it (an RDB,
/// an AOF rewrite, a full sync: they copy every key in memory) on another
/// process, which has another `run_id`, spares that process nothing; and
/// only with a TTL no longer than it was set with, so `PERSIST` or a
/// longer `EXPIRE` does not stretch the window. Redis counts TTLs on its
/// wall clock: a backward step of the server's clock lengthens the window
/// by the step (a step longer than the time since the check makes the TTL
/// too long, and the checks run again). A key at that name that is not
/// our verdict is never written over: the checks then run in full every
/// time.
const GUARD: &str = r"
local function remembered(verdict, run_id)
  if redis.call('TYPE', verdict).ok ~= 'string' then return false end
  if redis.call('GET', verdict) ~= run_id then return false end
  local ttl = redis.call('PTTL', verdict)
  return ttl > 0 and ttl <= VERDICT_MS
end

local function remember(verdict, run_id)
  -- Without set_repl (Redis below 3.2) it would reach replicas: not kept.
  if not redis.set_repl then return end
  local kind = redis.call('TYPE', verdict).ok
  if kind ~= 'none' and not (kind == 'string' and redis.call('GET', verdict) == run_id) then
    return
  end
  redis.set_repl(redis.REPL_NONE)
  -- pcall: a server out of memory refuses the SET; the next grant checks
  -- in full again, and this one goes on to its own write or answer.
  redis.pcall('SET', verdict, run_id, 'PX', VERDICT_MS)
  redis.set_repl(redis.REPL_ALL)
end

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
  local verdict = KEYS[#KEYS]
  if remembered(verdict, run_id) then return nil end
  if string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)') ~= '1' then
    return {-2, 'appendonly', 'no'}
  end
  -- `CONFIG SET` can switch it at run time; an allkeys-* policy may evict
  -- the counter.
  local policy = string.match(redis.call('INFO', 'memory'), 'maxmemory_policy:([%w-]+)')
  if policy and string.sub(policy, 1, 7) == 'allkeys' then
    return {-2, 'maxmemory-policy', policy}
  end
  remember(verdict, run_id)
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

/// KEYS: lock, fence, the guard's verdict. ARGV: holder, ttl ms, then the
/// guard's three.
/// A missing counter (the first grant, or one deleted by hand) is set to
/// Redis's `TIME` in microseconds first, so the grant is one above it.
/// Returns `{1, token, 1}` if granted with a new token, `{1, token, 0}` if
/// a live holder acquired again and keeps its token (as Hazelcast's
/// FencedLock does), `{0, token, holder}` if held (`{0, '0', what}` by a
/// foreign holder), `{-3, counter}` if the counter is at `i64::MAX`
/// (Redis's `INCR` cannot go above it), or a guard refusal.
pub(crate) fn acquire(record: Record) -> String {
    let (read, write) = (record.reader(), record.write());
    guarded(
        3,
        &format!(
            r"
local kind, token, holder = {read}(KEYS[1], KEYS[2])
if kind == 'foreign' then return {{0, '0', token}} end
if kind == 'ours' then
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {{1, token, 0}}
  end
  return {{0, token, holder}}
end
local counter = redis.call('GET', KEYS[2])
if counter and not at_most(counter, '9223372036854775806') then
  return {{-3, counter}}
end
local expires = counter_expires(ARGV[3], KEYS[2])
if expires then return expires end
if not counter then redis.call('SET', KEYS[2], clock_micros()) end
redis.call('INCR', KEYS[2])
local token = redis.call('GET', KEYS[2])
{write}
return {{1, token, 1}}
"
        ),
    )
}

/// KEYS: lock. ARGV: holder, token, ttl ms. Returns 1 if renewed. (Another
/// client's lock on the key of a lease that ended is a lost lease.)
pub(crate) fn renew(record: Record) -> String {
    let holds = record.holds();
    format!(
        r"
if {holds} then
  return redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
"
    )
}

/// KEYS: lock. ARGV: holder, token, our wake-up channel[, another client's
/// channel, as Redisson's waiters listen on]. Returns 1 if released, and
/// then publishes the lock key on our channel and Redisson's unlock
/// message (`0`) on its own: in the script, so only a release that
/// happened wakes anyone. `pcall`: an ACL that denies a channel costs
/// waiters their wake-up, not the holder its release.
pub(crate) fn release(record: Record) -> String {
    let holds = record.holds();
    format!(
        r"
if {holds} then
  local deleted = redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[3], KEYS[1])
  if ARGV[4] then redis.pcall('PUBLISH', ARGV[4], '0') end
  return deleted
end
return 0
"
    )
}

/// KEYS: lock, fence. Returns `{}` if free, `{'ours', token, holder}` or
/// `{'foreign', what}`.
pub(crate) fn holder(record: Record) -> String {
    let read = record.reader();
    format!(
        r"{RECORDS}
local kind, token, holder = {read}(KEYS[1], KEYS[2])
if kind == 'ours' then return {{kind, token, holder}} end
if kind == 'foreign' then return {{kind, token}} end
return {{}}
"
    )
}

/// What the lock key holds: nothing (nil), a record this issuer wrote
/// (`'ours', token, holder`, its token a decimal no higher than the
/// counter, as every grant leaves it), or another client's lock
/// (`'foreign', what`: its type and size, never its value, which for
/// redis-py and redlock is the capability to release it, nor a Redisson
/// holder's field). `lock_record` reads our string `token:holder`;
/// `redisson_record` a Redisson lock hash whose one field is
/// `fencing:{holder}` with the token as its value.
const RECORDS: &str = r"
local function at_most(a, b)
  return string.len(a) < string.len(b) or (string.len(a) == string.len(b) and a <= b)
end

-- Where a missing counter starts: Redis's clock in microseconds. A counter
-- deleted by hand (DEL, FLUSHDB) started again at 1 would grant tokens
-- every store refuses; at the clock it is above every token the deleted
-- one gave, unless it granted more than one per microsecond or a floor
-- put it above the clock. A string: Lua numbers are doubles.
local function clock_micros()
  local now = redis.call('TIME')
  return now[1] .. string.format('%06d', tonumber(now[2]))
end

local function ours(token, fence)
  local counter = redis.call('GET', fence)
  return token and string.match(token, '^[1-9]%d*$') and counter and at_most(token, counter)
end

local function lock_record(lock, fence)
  local kind = redis.call('TYPE', lock).ok
  if kind == 'none' then return nil end
  if kind ~= 'string' then return 'foreign', 'foreign:a Redis ' .. kind end
  local value = redis.call('GET', lock)
  local token, holder = string.match(value, '^(%d+):(.+)$')
  if ours(token, fence) then return 'ours', token, holder end
  return 'foreign', 'foreign:a string of ' .. string.len(value) .. ' bytes, not token:holder'
end

local function redisson_record(lock, fence)
  local kind = redis.call('TYPE', lock).ok
  if kind == 'none' then return nil end
  if kind ~= 'hash' then return 'foreign', 'foreign:a Redis ' .. kind .. ', not a Redisson lock' end
  local fields = redis.call('HGETALL', lock)
  if #fields == 2 then
    local holder = string.match(fields[1], '^fencing:(.+)$')
    if holder and ours(fields[2], fence) then return 'ours', fields[2], holder end
  end
  return 'foreign', 'foreign:a Redisson lock (' .. (#fields / 2) .. ' field(s))'
end
";

/// KEYS: fence, the guard's verdict. ARGV: floor, then the guard's three. Raises the counter to
/// at least the floor (a missing counter to at least Redis's clock, as a
/// grant would start it: a floor after a `DEL` must not bring tokens back
/// down); returns `{1, counter}`, or a guard refusal.
pub(crate) fn raise_floor() -> String {
    guarded(
        2,
        r"
local expires = counter_expires(ARGV[2], KEYS[1])
if expires then return expires end
local current = redis.call('GET', KEYS[1])
if not current then
  local floor = ARGV[1]
  local clock = clock_micros()
  if at_most(floor, clock) then floor = clock end
  redis.call('SET', KEYS[1], floor)
  return {1, floor}
end
if not at_most(ARGV[1], current) then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, ARGV[1]}
end
return {1, current}
",
    )
}

/// KEYS: lock, fence, the guard's verdict. ARGV: idle seconds, then the
/// guard's three. Deletes the counter of a resource nobody holds (no lock
/// key: ours, or another client's) whose counter nobody read or wrote for
/// the idle seconds (`OBJECT IDLETIME`: every grant increments it), if it
/// is at least the idle time below Redis's clock in microseconds, where
/// the counter a later grant makes starts (so a clock that trails this one
/// by less, a promoted replica's, still starts above it). The counter is
/// only read once it is judged idle: a read makes its idle time 0, and a
/// sweep that keeps it must not restart its idleness. Returns `{1}` if
/// deleted, `{0}` if in use, `{2}` if there was none, `{3}` if it is not
/// that far below the clock (a floor put it there), `{-4, why}` if Redis
/// keeps no idle time (an LFU `maxmemory-policy`), or a guard refusal.
pub(crate) fn remove_idle(record: Record) -> String {
    let read = record.reader();
    guarded(
        2,
        &format!(
            r"
local idle = redis.pcall('OBJECT', 'IDLETIME', KEYS[2])
if type(idle) == 'table' and idle.err then return {{-4, idle.err}} end
if redis.call('EXISTS', KEYS[2]) == 0 then return {{2}} end
if idle < tonumber(ARGV[1]) then return {{0}} end
if {read}(KEYS[1], KEYS[2]) then return {{0}} end
local counter = redis.call('GET', KEYS[2])
local clock = tonumber(clock_micros())
-- Doubles: exact for every clock in microseconds until the year 2255; a
-- counter too large for them is far above the clock anyway.
if tonumber(counter) + tonumber(ARGV[1]) * 1000000 >= clock then return {{3}} end
redis.call('DEL', KEYS[2])
return {{1}}
"
        ),
    )
}

/// `body` behind [`GUARD`], run with the guard's arguments from ARGV
/// `first`: a refusal is returned before `body` runs.
///
/// Effects replication first: a grant reads `TIME` before it writes, which
/// Redis below 5 (or with `lua-replicate-commands no`) refuses in a script
/// replicated verbatim; Redis 7 replicates effects only and keeps the call
/// as a no-op, and a server that dropped it is skipped.
fn guarded(first: usize, body: &str) -> String {
    let verdict_ms = crate::RECHECK_WINDOW.as_millis();
    format!(
        "if redis.replicate_commands then redis.replicate_commands() end\nlocal VERDICT_MS = {verdict_ms}\n{GUARD}{RECORDS}\nlocal refused = guard({first})\nif refused then return refused end{body}"
    )
}
