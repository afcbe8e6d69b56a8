// Apache Curator's InterProcessMutex, unchanged, driven in lines for the
// tests that hold a lock the way a Java service does. Run from source by the
// JDK's launcher (fencing_harness::foreign::Client::curator):
//   java -cp <curator, zookeeper, guava, slf4j jars> CuratorLock.java HOSTS PATH [SESSION_MS]
// Prints "ready" once connected; then, a line each:
//   try      -> "took" (and releases at once) or "busy"
//   take     -> waits up to 20 s, prints the lock node's path
//   held     -> "true" if Curator believes this process holds the lock
//   release  -> "released"
//   anything else closes the session and exits.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLock {
    /** The mutex, with the path of the node it holds made visible. */
    static class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String node() {
            return getLockPath();
        }
    }

    public static void main(String[] args) throws Exception {
        int sessionMs = args.length > 2 ? Integer.parseInt(args[2]) : 15000;
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], sessionMs, 15000, new RetryOneTime(100));
        client.start();
        if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no ZooKeeper session at " + args[0]);
        }
        Mutex lock = new Mutex(client, args[1]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        for (String line; (line = in.readLine()) != null; System.out.flush()) {
            switch (line.trim()) {
                case "try":
                    if (lock.acquire(0, TimeUnit.MILLISECONDS)) {
                        System.out.println("took");
                        lock.release();
                    } else {
                        System.out.println("busy");
                    }
                    break;
                case "take":
                    if (!lock.acquire(20, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("Curator could not take " + args[1]);
                    }
                    System.out.println(lock.node());
                    break;
                case "held":
                    System.out.println(lock.isAcquiredInThisProcess());
                    break;
                case "release":
                    lock.release();
                    System.out.println("released");
                    break;
                default:
                    client.close();
                    return;
            }
        }
        client.close();
    }
}
