// What the Node.js lock drivers share: once their Redis client is
// connected, print "ready", then hand each line of stdin to `handle`, one at
// a time, in order; any failure (or the client's) ends the process with its
// error on stderr.
const readline = require("readline");

module.exports = function serveLines(redis, what, handle) {
  redis.once("ready", () => {
    console.log("ready");
    const lines = readline.createInterface({ input: process.stdin });
    let queue = Promise.resolve();
    lines.on("line", (line) => {
      queue = queue.then(() => handle(line)).catch((e) => {
        console.error(e);
        process.exit(1);
      });
    });
    lines.on("close", () => queue.then(() => process.exit(0)));
  });
  redis.on("error", (e) => {
    console.error(`${what}'s Redis client: ${e.message}`);
    process.exit(1);
  });
};
