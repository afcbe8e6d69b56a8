//! The Lua scripts. Each runs atomically on the server.
//!
//! Keys per resource: `{prefix}{resource}:lock` holds `token:holder` with a
//! TTL; `{prefix}{resource}:fence` is the counter and never expires.
//! Tokens travel as strings: Lua numbers are doubles and would round tokens
//! above 2^53.

/// KEYS: lock, fence. ARGV: holder, ttl ms.
/// Returns `{1, token}` if granted (a live holder acquiring again keeps its
/// token, as Hazelcast's FencedLock does), `{0, token, holder}` if held.
pub(crate) const ACQUIRE: &str = r"
local current = redis.call('GET', KEYS[1])
if current then
  local sep = string.find(current, ':', 1, true)
  local token, holder = string.sub(current, 1, sep - 1), string.sub(current, sep + 1)
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token}
  end
  return {0, token, holder}
end
redis.call('INCR', KEYS[2])
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, token}
";

/// KEYS: lock. ARGV: `token:holder`, ttl ms. Returns 1 if renewed.
pub(crate) const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// KEYS: lock. ARGV: `token:holder`. Returns 1 if released.
pub(crate) const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// KEYS: fence. ARGV: floor. Raises the counter to at least the floor;
/// returns the counter.
pub(crate) const RAISE_FLOOR: &str = r"
local current = redis.call('GET', KEYS[1])
if (not current) or (string.len(current) < string.len(ARGV[1])) or
   (string.len(current) == string.len(ARGV[1]) and current < ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return current
";
