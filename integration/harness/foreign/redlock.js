// node-redlock 4 (with ioredis), unchanged, driven in lines for the tests
// that hold a lock the way a Node.js service does. Run by node with
// NODE_PATH at the packages integration/services.sh installs
// (fencing_harness::foreign::Client::redlock):
//   node redlock.js REDIS_URL KEY
// Prints "ready" once connected; then, a line each:
//   try      -> "took" (and releases at once) or "busy"
//   take     -> waits up to 20 s, prints the lock's random value
//   release  -> "released"
//   anything else disconnects and exits.
const serveLines = require("./lines");
const Redis = require("ioredis");
const Redlock = require("redlock");

const [url, key] = process.argv.slice(2);
const client = new Redis(url);
const once = new Redlock([client], { retryCount: 0 });
const waiting = new Redlock([client], { retryCount: 200, retryDelay: 100 });
const TTL_MS = 60000;
let held = null;

async function handle(line) {
  switch (line.trim()) {
    case "try":
      try {
        const lock = await once.lock(key, TTL_MS);
        console.log("took");
        await lock.unlock();
      } catch (e) {
        if (e.name !== "LockError") throw e;
        console.log("busy");
      }
      break;
    case "take":
      held = await waiting.lock(key, TTL_MS);
      console.log(held.value);
      break;
    case "release":
      await held.unlock();
      held = null;
      console.log("released");
      break;
    default:
      client.disconnect();
      process.exit(0);
  }
}

serveLines(client, "redlock", handle);
