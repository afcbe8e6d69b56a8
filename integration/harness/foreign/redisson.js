// node-redisson 1.0.4 (with ioredis): Redisson's RLock ported to Node.js,
// its lock scripts run through EVAL on Redisson's keys (a hash at the lock
// name, field "<client uuid>:<client id>", unlock message "0" on
// redisson_lock__channel:{name}). Driven in lines for the tests
// (fencing_harness::foreign::Client::redisson):
//   node redisson.js REDIS_URL NAME plain|fenced LEASE_MS
// "fenced" stands in for Java's RFencedLock, which only Maven has: the
// try-lock script also INCRs redisson_lock_token:{NAME} (on re-entry too),
// and the token is that counter read while holding the lock, as
// RFencedLock.getToken() reads it. Prints "ready" once connected; then, a
// line each:
//   try      -> "took" (and unlocks at once) or "busy"
//   take     -> waits for the lock (the test bounds the wait); prints
//               "took" (plain) or its token (fenced)
//   release  -> "released", or "lost" if the lock is no longer its own
//   anything else disconnects and exits.
const serveLines = require("./lines");
const { Redisson } = require("node-redisson");

const [url, name, mode, leaseMs] = process.argv.slice(2);
const parsed = new URL(url);
const redisson = new Redisson({
  redis: { options: { host: parsed.hostname, port: Number(parsed.port || 6379) } },
});
const counter = `redisson_lock_token:{${name}}`;
if (mode === "fenced") {
  // RFencedLock's grant: take or re-enter the hash as RLock does, and
  // count the grant in the token counter, in one script.
  redisson.redis.defineCommand("rTryLockInner", {
    numberOfKeys: 1,
    lua: `
if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return redis.call('pttl', KEYS[1])
end
redis.call('incr', 'redisson_lock_token:{' .. KEYS[1] .. '}')
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil`,
  });
}
const lock = redisson.getLock(name);
const lease = Number(leaseMs);

async function handle(line) {
  switch (line.trim()) {
    case "try":
      if (await lock.tryLock(0, lease)) {
        console.log("took");
        await lock.unlock();
      } else {
        console.log("busy");
      }
      break;
    case "take":
      // Waiting forever: with a bounded wait, node-redisson 1.0.4 gives up
      // at the first unlock message it does not get within the holder's TTL.
      await lock.tryLock(false, lease);
      console.log(mode === "fenced" ? await redisson.redis.get(counter) : "took");
      break;
    case "release":
      try {
        await lock.unlock();
        console.log("released");
      } catch (e) {
        if (e.name !== "RedissonLockError" && !/not locked by current/.test(e.message)) throw e;
        console.log("lost");
      }
      break;
    default:
      await redisson.quit();
      process.exit(0);
  }
}

serveLines(redisson.redis, "node-redisson", handle);
