use super::walk::relative;
use super::*;
use Language::{Go, Java, JavaScript, Python, Rust};

static MATCHERS: std::sync::LazyLock<Auditor> = std::sync::LazyLock::new(Auditor::default);

fn hits(language: Language, text: &str) -> Vec<Hit> {
    MATCHERS.scan_text(language, text.as_bytes()).hits
}

#[test]
fn every_language_compiles() {
    for language in Language::ALL {
        LanguageMatcher::new(language).unwrap();
    }
}

fn summary(hits: &[Hit]) -> Vec<(usize, &'static str, Option<bool>)> {
    hits.iter()
        .map(|h| (h.line, h.rule.kind, h.fenced))
        .collect()
}

/// Asserts what `text` reports: (line, kind, fenced) for every finding.
#[track_caller]
fn assert_sites(language: Language, text: &str, want: &[(usize, &str, Option<bool>)]) {
    assert_eq!(summary(&hits(language, text)), want);
}

#[test]
fn redis_set_nx_without_a_token_is_unfenced() {
    let src = "import redis\n\
               r = redis.Redis()\n\
               if r.set('job', me, nx=True, px=30000):\n\
               \x20   db.execute('UPDATE report SET body = %s', (body,))\n";
    assert_sites(Python, src, &[(3, "redis-set-nx", Some(false))]);
}

#[test]
fn a_token_in_the_window_fences_the_lock_and_names_the_evidence() {
    let src = "ok = r.set('job', me, nx=True, px=30000)\n\
               token = r.incr('job:fence')\n\
               store.write('report', body, fencing_token=token)\n";
    let h = hits(Python, src);
    assert_eq!(summary(&h), [(1, "redis-set-nx", Some(true))]);
    assert_eq!(h[0].evidence, Some((3, "a fencing token")));
    assert!(h[0].message().contains("fenced: a fencing token at line 3"));
}

#[test]
fn evidence_outside_the_window_does_not_count() {
    let mut src = String::from("ok = r.set('job', me, nx=True, px=30000)\n");
    src.push_str(&"pass\n".repeat(WINDOW_AFTER + 1));
    src.push_str("store.write(k, v, fencing_token=t)\n");
    assert_sites(Python, &src, &[(1, "redis-set-nx", Some(false))]);
}

#[test]
fn file_scope_evidence_counts_anywhere() {
    let mut src = String::from("use fencing_tokens::FencedStore;\n");
    src.push_str(&"\n".repeat(300));
    src.push_str(
        "let ok = redis::cmd(\"SET\").arg(k).arg(v).arg(\"NX\").arg(\"PX\").arg(30_000);\n",
    );
    assert_sites(Rust, &src, &[(302, "redis-set-nx", Some(true))]);
}

#[test]
fn comments_are_neither_findings_nor_evidence_but_hints_are_read_there() {
    let src = "// r.set('job', me, nx=True) would be a lock\n\
               /* SET lock me NX PX 30000\n\
               \x20  still a comment: fencing_token */\n\
               let ok = con.set_nx(\"job\", me)?; // only one process should write at a time\n\
               con.expire(\"job\", 30)?;\n";
    assert_sites(
        Rust,
        src,
        &[(4, "redis-set-nx", Some(false)), (4, "single-writer", None)],
    );
}

#[test]
fn python_docstrings_are_comments_but_sql_strings_are_code() {
    let src = "def run(cur):\n\
               \x20   \"\"\"Takes pg_advisory_lock(1) first.\"\"\"\n\
               \x20   cur.execute(\n\
               \x20       \"\"\"\n\
               \x20       SELECT pg_advisory_lock(42)\n\
               \x20       \"\"\"\n\
               \x20   )\n";
    assert_sites(Python, src, &[(5, "pg-advisory-lock", Some(false))]);
}

#[test]
fn a_definition_is_a_mention_and_is_dropped_when_the_lock_is_also_taken() {
    let def_only = "import redis\ndef acquire_lock(name):\n    return r.get(name)\n";
    let h = hits(Python, def_only);
    assert_eq!(summary(&h), [(2, "acquire-lock", None)]);
    assert!(h[0].message().contains("its definition"));
    let both = format!("{def_only}acquire_lock('job')\n");
    assert_sites(Python, &both, &[(4, "acquire-lock", Some(false))]);
    // Control flow is not a definition.
    let js = "if (acquireLock('job')) {\n  db.update(row); // in redis\n}\n";
    assert_sites(JavaScript, js, &[(1, "acquire-lock", Some(false))]);
}

#[test]
fn generic_call_names_need_their_library_or_a_lock_service_in_the_file() {
    let local = "_imp.acquire_lock()\ntry:\n    pass\nfinally:\n    _imp.release_lock()\n";
    // (language, call, a first line that is not its context, one that is).
    let cases = [
        (
            Python,
            local,
            "# distributed under the License on an AS IS BASIS\n",
            "# the lease lives in etcd\n",
            "acquire-lock",
        ),
        (
            Go,
            "m := rs.NewMutex(\"job\")\n",
            "import \"github.com/redis/go-redis/v9\"\n",
            "import \"github.com/go-redsync/redsync/v4\"\n",
            "redsync",
        ),
    ];
    for (language, call, unrelated, context, kind) in cases {
        assert!(hits(language, call).is_empty(), "{call}");
        assert!(
            hits(language, &format!("{unrelated}{call}")).is_empty(),
            "{unrelated}"
        );
        assert_sites(
            language,
            &format!("{context}{call}"),
            &[(2, kind, Some(false))],
        );
    }
}

#[test]
fn code_comparisons_are_not_sql_version_checks() {
    assert!(hits(Python, "ok = a and ce.version == se.version\n").is_empty());
    let sql = "cur.execute('UPDATE t SET v = %s WHERE id = %s AND version = %s', args)\n";
    assert_sites(Python, sql, &[(1, "version-check", None)]);
}

#[test]
fn one_finding_per_line_and_category_in_table_order() {
    let src = "m, _ := concurrency.NewMutex(s, \"/job\") // clientv3/concurrency\n";
    assert_sites(Go, src, &[(1, "etcd-lock", Some(false))]);
}

#[test]
fn columns_count_characters_and_long_lines_are_cut() {
    let src = "/* é */ let ok = con.set_nx(\"job\", me)?;\n";
    // The line starts with a comment opener, so it is a comment.
    assert!(hits(Rust, src).is_empty());
    let src = "let é = con.set_nx(\"job\", me)?; con.expire(\"job\", 30)?;\n";
    assert_eq!(hits(Rust, src)[0].column, 13);
    let long = format!("x = {} r.set('k', v, nx=True, ex=9)", "a".repeat(500));
    let h = hits(Python, &long);
    assert!(h[0].snippet.starts_with('…') && h[0].snippet.contains("nx=True"));
    assert!(h[0].snippet.chars().count() <= SNIPPET_CHARS + 2);
}

#[test]
fn set_nx_without_an_expiry_is_not_a_lease() {
    // Python: a set-if-absent, other commands' NX, and the lease.
    let py = "import redis\n\
              r.set('first-seen', now, nx=True)\n\
              r.expire('k', 10, nx=True)\n\
              r.zadd('z', {'a': 1}, nx=True)\n\
              r.json().set('obj', Path('foo'), 'baz', nx=True)\n\
              r.setnx('marker', 1)\n\
              r.set(\n    'job',\n    me,\n    nx=True,\n    ex=30,\n)\n";
    assert_sites(Python, py, &[(10, "redis-set-nx", Some(false))]);
    // SETNX followed by EXPIRE is the classic (racy) lease.
    let setnx = "if r.setnx('job', me):\n    r.expire('job', 30)\n";
    assert_sites(Python, setnx, &[(1, "redis-set-nx", Some(false))]);
    // Go: the expiry is SetNX's last argument; 0 and KeepTTL mean none.
    let go = "ok, _ := c.SetNX(ctx, key, time.Now().Unix(), 0).Result()\n\
              ok, _ = c.SetNX(ctx, key, v, redis.KeepTTL).Result()\n\
              ok, _ = c.SetNX(ctx, key, v, 30*time.Second).Result()\n\
              args := redis.SetArgs{Mode: \"NX\"}\n\
              z := redis.ZAddArgs{NX: true}\n";
    assert_sites(Go, go, &[(3, "redis-set-nx", Some(false))]);
    // Strings: the command needs EX/PX.
    let lua = "redis.call('SET', KEYS[1], ARGV[1], 'NX')\n\
               redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n";
    assert_sites(JavaScript, lua, &[(2, "redis-set-nx", Some(false))]);
}

#[test]
fn declarations_and_constructors_are_definitions() {
    let go = "type Conn interface {\n\
              \tSetNX(name string, value string, expiry time.Duration) (bool, error)\n}\n";
    assert!(hits(Go, go).is_empty());
    let java = "public class LeaderLatch {\n\
                \x20   public LeaderLatch(CuratorFramework client, String latchPath) {\n\
                \x20       this(client, latchPath, \"\");\n\
                \x20   }\n\
                \x20   void start() { latch = new LeaderLatch(client, \"/x\"); }\n}\n";
    assert_sites(Java, java, &[(5, "zookeeper-election", Some(false))]);
    let py = "from kazoo.client import KazooClient\n\
              class Lock(object):\n    pass\n";
    assert_sites(Python, py, &[(2, "zookeeper-lock", None)]);
}

#[test]
fn a_redis_clients_own_set_code_is_not_a_lock_site() {
    let py = "class Commands:\n\
              \x20   def set(self, name, value, ex=None, px=None, nx=False):\n\
              \x20       pieces = [name, value]\n\
              \x20       if ex: pieces += ['EX', ex]\n\
              \x20       if nx: pieces.append('NX')\n\
              \x20       return self.execute_command('SET', *pieces)\n\
              \x20   def lock_like(self):\n\
              \x20       return self.set('k', 'v', nx=True, ex=10)\n";
    assert!(hits(Python, py).is_empty());
    assert!(MATCHERS.scan_text(Python, py.as_bytes()).redis_client);
}

#[test]
fn relative_paths_use_slashes_and_a_file_root_names_the_file() {
    assert_eq!(relative(Path::new("a"), Path::new("a/b/c.rs")), "b/c.rs");
    assert_eq!(relative(Path::new("a/c.rs"), Path::new("a/c.rs")), "c.rs");
}

#[test]
fn import_and_package_lines_are_never_findings_but_still_evidence() {
    use Language::{Kotlin, TypeScript};
    let cases: [(Language, &str); 7] = [
        (
            Java,
            "package com.acme.jobs.shedlock;\nimport net.javacrumbs.shedlock.core.LockProvider;\nimport org.redisson.api.RLock;\n",
        ),
        (
            Kotlin,
            "import net.javacrumbs.shedlock.spring.annotation.SchedulerLock\n",
        ),
        (
            Go,
            "package lock\n\nimport (\n\t\"github.com/go-redsync/redsync/v4\"\n\tconc \"go.etcd.io/etcd/client/v3/concurrency\"\n)\nimport \"github.com/go-redsync/redsync/v4/redis/goredis/v9\"\n",
        ),
        (
            Python,
            "import redis_lock\nfrom kazoo.recipe.lock import Lock\nfrom redis.lock import Lock as RedisLock\n",
        ),
        (
            JavaScript,
            "const Redlock = require('redlock');\nimport Redlock from 'redlock';\n",
        ),
        (
            TypeScript,
            "import { default as Redlock } from \"redlock\";\nexport { Redlock } from './redlock';\n",
        ),
        (
            Rust,
            "use redis::cmd; // SET NX\npub use rslock::LockManager;\n",
        ),
    ];
    for (language, src) in cases {
        assert_sites(language, src, &[]);
    }
    // The use after the import is the finding, and an import of fencing is
    // still the file's evidence.
    let src = "use fencing_tokens::FencedStore;\n\
               let ok = redis::cmd(\"SET\").arg(k).arg(v).arg(\"NX\").arg(\"PX\").arg(30_000);\n";
    assert_sites(Rust, src, &[(2, "redis-set-nx", Some(true))]);
    let src = "import net.javacrumbs.shedlock.core.SchedulerLock;\n\
               class Jobs {\n\
               \x20 @SchedulerLock(name = \"report\", lockAtMostFor = \"10m\")\n\
               \x20 public void report() { db.update(); }\n\
               }\n";
    let found = summary(&hits(Java, src));
    assert!(
        found.iter().all(|(line, _, _)| *line == 3) && !found.is_empty(),
        "{found:?}"
    );
}
