#!/usr/bin/env bash
# Builds DIR: a Debian trixie root (Python 3.13, by debootstrap) with NeMo Gym VERSION in a venv at /opt/nemo-gym, and
# DIR/python, that venv's python run in the root by bubblewrap: the host's network, /dev, /proc, /tmp, its DNS and
# CA files, and the git checkout of the current directory (read-only), all at the same paths. NeMo Gym needs
# Python >= 3.12; the machines have 3.11. Built into DIR.new and moved, so a killed build never looks finished.
#   tests/frameworks/nemo_gym_root.sh DIR VERSION     (as root; `make nemo-gym`)
set -euo pipefail
dir=${1:?usage: nemo_gym_root.sh DIR VERSION}
version=${2:?usage: nemo_gym_root.sh DIR VERSION}
mirror=${RUBRICD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "nemo-gym: $*"; }

[[ $(id -u) == 0 ]] || { say "debootstrap needs root (once): run 'sudo make nemo-gym'"; exit 1; }
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v bwrap >/dev/null || missing+=(bubblewrap)
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -q && apt-get install -y -q "${missing[@]}"; } </dev/null >/dev/null
fi

rm -rf "$dir.new" && mkdir -p "$dir.new"
say "building Debian trixie with NeMo Gym $version into $dir (two to four minutes on 2 cores, once)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates trixie "$dir.new/root" "$mirror" \
  >"$dir.new/debootstrap.log" 2>&1 || { say "debootstrap failed:"; tail -5 "$dir.new/debootstrap.log"; exit 1; }
rm -rf "$dir.new"/root/var/cache/apt/archives/*.deb "$dir.new"/root/var/lib/apt/lists/*

cat >"$dir.new/python" <<'WRAPPER'
#!/bin/sh
# NeMo Gym's python (3.13) in the Debian trixie root beside this file (its python3 until the venv exists),
# run by bubblewrap with this environment and network, /dev, /proc, /tmp, the host's DNS and CA files, and the git
# checkout of the current directory (read-only), all at the same paths.
root=$(dirname "$(readlink -f "$0")")/root; py=/opt/nemo-gym/bin/python
[ -x "$root$py" ] || py=/usr/bin/python3
if top=$(git rev-parse --show-toplevel 2>/dev/null); then set -- --ro-bind "$top" "$top" "$py" "$@"; else set -- "$py" "$@"; fi
exec bwrap --bind "$root" / --dev-bind /dev /dev --proc /proc --bind /tmp /tmp --die-with-parent \
  --ro-bind-try /etc/resolv.conf /etc/resolv.conf --ro-bind-try /etc/hosts /etc/hosts \
  --ro-bind-try /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt "$@"
WRAPPER
chmod +x "$dir.new/python"

# What NeMo Gym's servers, SimpleAgent and rollout collection import (not its CLI's, Hugging Face's or MCP's), then
# NeMo Gym without its other dependencies. PIP_FIND_LINKS may name a host directory the root does not have.
export PIP_FIND_LINKS=
"$dir.new/python" -m venv /opt/nemo-gym
"$dir.new/python" -m pip install -q openai==2.7.2 anthropic==0.109.2 pydantic==2.14.4 fastapi==0.165.0 \
  uvicorn==0.54.0 itsdangerous==2.2.0 aiohttp==3.14.5 requests==2.34.2 orjson==3.13.0 omegaconf==2.3.1 \
  hydra-core==1.3.8 rich==15.0.0 ray==2.60.0 wandb==0.31.0 pandas==2.3.3 tqdm==4.70.1 devtools==0.13.0 yappi==1.7.6 \
  gprof2dot==2025.4.14 pydot==4.0.1 "msgspec>=0.19" "redis>=5.0"
"$dir.new/python" -m pip install -q --no-deps "nemo-gym==$version"
rm -rf "$dir" && mv "$dir.new" "$dir"
say "built $dir"
