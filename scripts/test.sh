#!/usr/bin/env bash
# The test command: installs the real NBD clients, file-system tools and the
# headless browser (chromium, chromium-driver, python3-selenium) the
# black-box tests drive (when run as root and they are missing), runs clippy
# with warnings as errors, then runs every test of the workspace. Tests that
# still lack a tool, root, a loop device or FUSE say why they skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# command → Debian package
declare -A pkg=(
  [fio]=fio [nbdinfo]=libnbd-bin [nbdcopy]=libnbd-bin [nbdsh]=python3-libnbd [nbdfuse]=nbdfuse
  [nbdkit]=nbdkit [qemu-img]=qemu-utils [qemu-io]=qemu-utils [mkfs.btrfs]=btrfs-progs
  [mkfs.ext4]=e2fsprogs [mkfs.xfs]=xfsprogs [xfs_repair]=xfsprogs [fusermount3]=fuse3 [losetup]=mount [python3]=python3
  [openssl]=openssl [pkg-config]=pkg-config [etcd]=etcd-server [etcdctl]=etcd-client
  [protoc]=protobuf-compiler [chromium]=chromium [chromedriver]=chromium-driver
)
missing=()
for cmd in "${!pkg[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
done
# The NBD server's TLS links OpenSSL (openssl-sys finds it through pkg-config);
# the etcd client's gRPC code is generated with protoc (scripts/build-deps.sh).
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
# protoc's well-known types, which etcd's protos import: libprotobuf-dev is
# only a recommendation of protobuf-compiler, and this installs none.
[ -e /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)
# The nbd crate's Python-driven TLS test uses the system interpreter's bindings.
[ -e /usr/lib/python3/dist-packages/nbd.py ] || missing+=(python3-libnbd)
# The dashboard's browser test drives Chromium with the system Python's selenium.
[ -d /usr/lib/python3/dist-packages/selenium ] || missing+=(python3-selenium)
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test.sh: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "test.sh: missing ${missing[*]} (not root or no apt-get): the tests that need them will skip"
  fi
fi

export RUST_BACKTRACE=1
# A clean build gains nothing from incremental compilation's cache, which
# costs disk (see [profile.dev] in Cargo.toml); a developer may turn it on.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Lints first (the workspace's [workspace.lints] in Cargo.toml; same as `make lint`).
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo build --workspace --all-targets --quiet
cargo test --workspace --no-fail-fast "$@"
