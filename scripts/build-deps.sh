#!/usr/bin/env bash
# Installs what building flexssd needs beyond Rust, when run as root and it is
# missing: protoc (the etcd client's gRPC code is generated at build time) and
# OpenSSL's headers (the NBD server's TLS). `make run` and `make test` call it.
set -euo pipefail
missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
# protoc's well-known types (google/protobuf/descriptor.proto, which etcd's
# protos import) are in libprotobuf-dev, only a recommendation of
# protobuf-compiler: an install without recommends lacks them.
[ -e /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
((${#missing[@]})) || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "build-deps.sh: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "build-deps.sh: the build needs ${missing[*]}; install them (e.g. sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
