#!/usr/bin/env bash
# Build every Space image from this checkout, as the tests do (tests/spaces/docker.py): the base
# first (scripts/docker_base.sh), then the shared dagent-base and dagent-suite (spaces/base/Dockerfile),
# then the white-box, black-box and demo images, which start FROM dagent-base, then the HF sandbox
# image (spaces/sandbox, FROM the golds' python:3.11.7). Holds the build lock the tests take, so a test that wants an
# image waits for it and then rebuilds from the cache in seconds.
#   bash scripts/docker_images.sh        # tags dagent-base, dagent-suite, dagent-test-whitebox, -blackbox, -demo, -sandbox
# DAGENT_TORCH_WHEELS: where the demo's CPU torch comes from (default: download.pytorch.org, or this
# machine's /opt/wheels served on loopback where that page cannot be reached).
set -euo pipefail
cd "$(dirname "$0")/.."
exec 9>/tmp/dagent-docker-build.lock
flock 9
bash scripts/docker_base.sh
for target in dagent-base dagent-suite; do  # the shared base's two images every Space image uses
  start=$SECONDS
  docker build -q --network host -f spaces/base/Dockerfile --target "$target" -t "$target" . >/dev/null
  echo "$target: built in $((SECONDS - start)) s"
done
for spec in data-agent:whitebox data-agent-blackbox:blackbox; do
  start=$SECONDS
  docker build -q --network host -f "spaces/${spec%%:*}/Dockerfile" -t "dagent-test-${spec##*:}" . >/dev/null
  echo "dagent-test-${spec##*:}: built in $((SECONDS - start)) s"
done
wheels=${DAGENT_TORCH_WHEELS:-}
server=""
if [ -z "$wheels" ] && ! timeout 20 curl -sfI https://download.pytorch.org/whl/cpu/torch/ >/dev/null 2>&1 \
   && ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  # a fixed port where it is free: the demo image's test builds with the same TORCH_WHEELS URL, so
  # it finds this build in Docker's cache instead of installing torch again (~2 minutes)
  port=$(python3 -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' "${DAGENT_WHEELS_PORT:-47615}")
  (cd /opt/wheels && exec python3 -m http.server "$port" --bind 127.0.0.1) >/dev/null 2>&1 &
  server=$!
  wheels="http://127.0.0.1:$port/"
  sleep 1
fi
start=$SECONDS
docker build -q --network host -f spaces/demo/Dockerfile ${wheels:+--build-arg TORCH_WHEELS=$wheels} \
  -t dagent-test-demo . >/dev/null || { [ -n "$server" ] && kill "$server"; exit 1; }
echo "dagent-test-demo: built in $((SECONDS - start)) s"
[ -n "$server" ] && kill "$server"
DAGENT_BASE_IMAGE=$(sed -n 's/^FROM //p' spaces/sandbox/Dockerfile) bash scripts/docker_base.sh
start=$SECONDS
docker build -q --network host -t dagent-test-sandbox spaces/sandbox >/dev/null
echo "dagent-test-sandbox: built in $((SECONDS - start)) s"
exit 0
