#!/usr/bin/env bash
# The README's first command on a bare Debian or Ubuntu, as a new user meets it: a root file system
# with only python3, python3-venv, git, curl and CA certificates (mmdebstrap, from the distribution's
# own archive), a clean clone of this repository's HEAD, `bash scripts/setup.sh`, then the main job on
# a slice of `test`.
#
#   bash scripts/fresh_machine.sh                       # Debian 13 (trixie): Python 3.13, Node 20.19 in apt
#   DIST=noble bash scripts/fresh_machine.sh            # Ubuntu 24.04: Python 3.12, Node 18.19 (too old for pi)
#   DIST=bookworm LIMIT=40 bash scripts/fresh_machine.sh
#
# Ubuntu's archive (main and universe, with -updates and -security, as an installed Ubuntu has them) is
# checked against Ubuntu's 2018 archive signing key, pinned here by fingerprint: the key is taken from
# the archive's own ubuntu-keyring package and used only if its fingerprint is the pinned one.
#
# Prints the container's Python, then the evaluation's summary (pass@1, the suite's digest) as the
# last line: `fresh-machine: python=3.13.5 pass1=1.0 tasks=20 digest=509abd29cab53a6a`. Needs Docker
# and mmdebstrap (scripts/setup.sh --tests installs both as root). The image (`dagent-fresh:$DIST`) is
# built once, about a minute and a half; the set-up downloads every dependency from the package index
# (about 3.3 GB: PyPI's torch for Linux is the CUDA build), as a user's first run does.
#
# The container runs with `--security-opt seccomp=unconfined --security-opt systempaths=unconfined`:
# Docker's defaults give bubblewrap no namespaces, and the suite build needs a sandbox with /workdir
# (docs/sandboxes.md). The only thing taken from this machine is its extra CA certificates
# (/usr/local/share/ca-certificates: where TLS to the index is intercepted), as scripts/docker_base.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${DIST:-trixie}; LIMIT=${LIMIT:-20}; TAG=dagent-fresh:$DIST
UBUNTU_ARCHIVE_KEY=F6ECB3762474EDA9D21B7022871920D1991BC93C  # Ubuntu Archive Automatic Signing Key (2018)
command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "no Docker daemon: bash scripts/setup.sh --tests" >&2; exit 2; }

if ! docker image inspect "$TAG" >/dev/null 2>&1; then
  command -v mmdebstrap >/dev/null || { echo "mmdebstrap is missing: apt-get install -y mmdebstrap" >&2; exit 2; }
  WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
  cat > "$WORK/hook.sh" <<'HOOK'
#!/bin/sh
set -e
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$1/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"
  chroot "$1" update-ca-certificates >/dev/null
fi
HOOK
  chmod +x "$WORK/hook.sh"
  OPTS=(); MIRRORS=()  # Debian: mmdebstrap's defaults (deb.debian.org, main)
  case "$DIST" in
    focal|jammy|noble|oracular|plucky|questing)  # Ubuntu: its archive, its key
      UBUNTU=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
      deb=$(curl -sf "$UBUNTU/dists/$DIST/main/binary-amd64/Packages.gz" | gzip -dc \
            | awk '/^Package: ubuntu-keyring$/{p=1} p && /^Filename:/ && !f {print $2; f=1}')  # to the end (pipefail)
      [ -n "$deb" ] && curl -sf -o "$WORK/keyring.deb" "$UBUNTU/$deb" \
        || { echo "Ubuntu's archive ($UBUNTU) did not answer: set UBUNTU_MIRROR to one that does" >&2; exit 2; }
      dpkg-deb -x "$WORK/keyring.deb" "$WORK/keyring"
      mkdir -m 700 "$WORK/gnupg"
      gpg -q --homedir "$WORK/gnupg" --import "$WORK/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg" 2>/dev/null
      gpg -q --homedir "$WORK/gnupg" --export "$UBUNTU_ARCHIVE_KEY" > "$WORK/ubuntu.gpg"
      [ -s "$WORK/ubuntu.gpg" ] || { echo "ubuntu-keyring holds no key $UBUNTU_ARCHIVE_KEY: refusing the archive" >&2; exit 2; }
      chmod 755 "$WORK"; chmod 644 "$WORK/ubuntu.gpg"  # apt reads it as _apt
      OPTS=(--keyring="$WORK/ubuntu.gpg")
      MIRRORS=("deb $UBUNTU $DIST main universe" "deb $UBUNTU $DIST-updates main universe"
               "deb $UBUNTU $DIST-security main universe") ;;
  esac
  echo "fresh-machine: building $TAG (mmdebstrap minbase + apt python3 python3-venv git curl ca-certificates)" >&2
  # apt named: every installed Debian and Ubuntu has it, and Ubuntu's minbase leaves it out
  mmdebstrap --variant=minbase --quiet --include=apt,python3,python3-venv,git,curl,ca-certificates \
    --customize-hook="$WORK/hook.sh \"\$1\"" "${OPTS[@]}" "$DIST" "$WORK/rootfs.tar" "${MIRRORS[@]}"
  docker import -c 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$WORK/rootfs.tar" "$TAG" >/dev/null
fi

NAME=dagent-fresh-$$
INNER=$(mktemp)
cleanup() { docker rm -f "$NAME" >/dev/null 2>&1 || true; rm -f "$INNER"; }
trap cleanup EXIT
cat > "$INNER" <<'INNER'
set -euo pipefail
git config --global --add safe.directory '*'
git clone -q /origin.git /home/user/dagent && cd /home/user/dagent   # the committed tree only: a clean clone
echo "fresh-machine: $(python3 --version), $(git log --oneline -1 | cut -c1-60)" >&2
bash scripts/setup.sh
.venv/bin/dagent eval --agent oracle --split test --limit "$LIMIT" --out /tmp/fresh-eval >&2
.venv/bin/python - <<'PY'
import json, platform
from pathlib import Path
out = Path("/tmp/fresh-eval")
summary = json.loads(next(out.rglob("summary.json")).read_text())
arm = next(iter(json.loads((out / "scores.json").read_text()).values()))
print(f"fresh-machine: python={platform.python_version()} pass1={arm['pass_at']['1']} tasks={arm['tasks']} "
      f"digest={summary['provenance']['suite']['digest']}")
PY
INNER
# PIP_NO_CACHE_DIR: the same downloads, without a second copy of them (~3.3 GB a machine) in the
# container's layer: the tests run two at once beside everything else, and CI ran out of disk.
docker run --rm --init --name "$NAME" --network host \
  --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
  -v "$PWD/.git:/origin.git:ro" -v "$INNER:/fresh.sh:ro" -e LIMIT="$LIMIT" -e PIP_NO_CACHE_DIR=1 "$TAG" bash /fresh.sh
