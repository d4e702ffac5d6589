#!/usr/bin/env bash
# The base every dagent image starts FROM: python:3.11-slim-trixie (Debian 13 "trixie", CPython 3.11,
# Node 20 from apt, which pi needs: >= 20.6).
#
#   bash scripts/docker_base.sh            # present already, or pulled, or (no registry) built here
#
# Where Docker Hub answers, this is `docker pull`. Where it does not (machines that reach only a
# Debian mirror and the package index), it builds a stand-in with the same name and layout from
# Debian packages: mmdebstrap's trixie minbase, a CPython 3.11 copied into /usr/local as the official
# image has it (trixie ships no python3.11; PY311_PREFIX, default this machine's python3.11), pip, and
# the machine's CA bundle (TLS to the package index goes through it). About a minute; built once.
set -euo pipefail
TAG=${DAGENT_BASE_IMAGE:-python:3.11-slim-trixie}

if docker image inspect "$TAG" >/dev/null 2>&1; then echo "base image $TAG: present"; exit 0; fi
if timeout 60 docker pull -q "$TAG" >/dev/null 2>&1; then echo "base image $TAG: pulled"; exit 0; fi
echo "base image $TAG: no registry answered; building a stand-in from Debian packages" >&2

command -v mmdebstrap >/dev/null || { echo "mmdebstrap is missing: apt-get install -y mmdebstrap" >&2; exit 1; }
PY=${PY311_PREFIX:-$(python3.11 -c 'import sys; print(sys.base_prefix)' 2>/dev/null || true)}
[ -n "$PY" ] && [ -e "$PY/lib/libpython3.11.so.1.0" ] || {
  echo "no shared CPython 3.11 to copy: set PY311_PREFIX to one (e.g. a pyenv version)" >&2; exit 1; }

WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/hook.sh" <<'HOOK'
#!/bin/sh
set -e
R="$1"; P="$PY311_PREFIX"
mkdir -p "$R/usr/local/bin" "$R/usr/local/lib" "$R/usr/local/include"
cp -a "$P/bin/python3.11" "$R/usr/local/bin/"
cp -a "$P"/lib/libpython3.11.so* "$P/lib/libpython3.so" "$R/usr/local/lib/"
cp -a "$P/include/python3.11" "$R/usr/local/include/"
tar -C "$P/lib" --exclude='python3.11/site-packages/*' --exclude='python3.11/test' \
    --exclude='__pycache__' -cf - python3.11 | tar -C "$R/usr/local/lib" -xf -
for n in python3 python; do ln -sf python3.11 "$R/usr/local/bin/$n"; done
chroot "$R" ldconfig
chroot "$R" /usr/local/bin/python3.11 -m ensurepip --default-pip >/dev/null
for n in pip pip3; do ln -sf pip3.11 "$R/usr/local/bin/$n"; done
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$R/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
  chroot "$R" update-ca-certificates >/dev/null
fi
rm -rf "$R/var/lib/apt/lists/"*
HOOK
chmod +x "$WORK/hook.sh"
PY311_PREFIX="$PY" mmdebstrap --variant=minbase --quiet \
  --include=ca-certificates,libssl3t64,libffi8,libsqlite3-0,zlib1g,libbz2-1.0,liblzma5,libreadline8t64,libncursesw6,libuuid1,libexpat1,libnsl2,libtirpc3t64 \
  --customize-hook="$WORK/hook.sh \"\$1\"" trixie "$WORK/rootfs.tar"
docker import "$WORK/rootfs.tar" dagent-base-rootfs:trixie >/dev/null
cat > "$WORK/Dockerfile" <<'DOCKERFILE'
FROM dagent-base-rootfs:trixie
ENV LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
CMD ["python3"]
DOCKERFILE
docker build -q --network host -t "$TAG" "$WORK" >/dev/null
docker rmi -f dagent-base-rootfs:trixie >/dev/null 2>&1 || true
echo "base image $TAG: built ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
