#!/usr/bin/env bash
# Builds gprobe's container images from the release binaries, as OCI archives, without a
# container engine or a registry (scripts/oci-image.py writes them), and prints one line per
# image: the archive's path and the image's reference.
#
#   scripts/images.sh [--tag TAG] [--out DIR] [--repository-prefix PREFIX] [--no-build]
#
#   gprobe-agent     /usr/local/bin/gprobe (entrypoint; command `agent`), its shared
#                    libraries (glibc, libgcc_s) from this machine, an empty /tmp; user 0
#   gprobe-operator  /usr/local/bin/gprobe-operator and its shared libraries; user 65532
#
# Defaults: TAG = the workspace's version, DIR = target/images, PREFIX = gprobe.local (a
# reference with a domain, so that no runtime rewrites it to docker.io/library/...).
# Without --no-build it first runs `cargo build --release` of both binaries.
# Import the archives with `scripts/cluster.sh load ARCHIVE...` (or `ctr -n k8s.io image
# import`, `kind load image-archive`, `docker load`) and install the chart with
#   --set images.agent.repository=gprobe.local/gprobe-agent --set images.agent.tag=TAG
#   --set images.operator.repository=gprobe.local/gprobe-operator --set images.operator.tag=TAG
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag=""
out="$root/target/images"
prefix=gprobe.local
build=true
while (($#)); do
  case "$1" in
  --tag) tag="$2" && shift 2 ;;
  --out) out="$2" && shift 2 ;;
  --repository-prefix) prefix="$2" && shift 2 ;;
  --no-build) build=false && shift ;;
  *)
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
done
if [[ -z "$tag" ]]; then
  tag="$(awk -F'"' '/^\[workspace.package\]/ {p=1} p && /^version/ {print $2; exit}' "$root/Cargo.toml")"
  [[ -n "$tag" ]] || tag=dev
fi
release="${CARGO_TARGET_DIR:-$root/target}/release"
if $build; then
  (cd "$root" &&
    cargo build --release --locked -p gprobe-agent --bin gprobe -p gprobe-operator --bin gprobe-operator >&2)
fi
for b in gprobe gprobe-operator; do
  [[ -x "$release/$b" ]] || { echo "images.sh: $release/$b is missing: run without --no-build" >&2; exit 1; }
done
mkdir -p "$out"
src=https://github.com/gprobe-dev/gprobe
python3 "$root/scripts/oci-image.py" --ref "$prefix/gprobe-agent:$tag" --out "$out/gprobe-agent-$tag.tar" \
  --file "$release/gprobe:/usr/local/bin/gprobe" --libs-of /usr/local/bin/gprobe --dir /tmp \
  --entrypoint /usr/local/bin/gprobe --cmd agent --user 0:0 \
  --label org.opencontainers.image.title=gprobe-agent --label "org.opencontainers.image.source=$src" \
  --label org.opencontainers.image.version="$tag"
python3 "$root/scripts/oci-image.py" --ref "$prefix/gprobe-operator:$tag" --out "$out/gprobe-operator-$tag.tar" \
  --file "$release/gprobe-operator:/usr/local/bin/gprobe-operator" --libs-of /usr/local/bin/gprobe-operator \
  --entrypoint /usr/local/bin/gprobe-operator --user 65532:65532 \
  --label org.opencontainers.image.title=gprobe-operator --label "org.opencontainers.image.source=$src" \
  --label org.opencontainers.image.version="$tag"
