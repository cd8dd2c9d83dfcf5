#!/usr/bin/env bash
# gprobe on the kernels that clusters run: boots Debian's own kernel packages under QEMU with
# a busybox initramfs holding gprobe, its libraries and the test programs, and runs
# scripts/vm/tests.sh in each (then scripts/vm/check.py judges what each saw).
#
#   scripts/vm.sh matrix               every kernel, and this machine's: prints the table
#                                      check x kernel; exit 1 when a check fails
#   scripts/vm.sh run KERNEL -- 'CMD'  boots KERNEL (5.10, 6.1, 6.12, 7.2), runs the shell
#                                      command CMD in it (gprobe is /bin/gprobe, the test
#                                      programs are in /t/bin) and prints its output
#   scripts/vm.sh kernels              downloads the kernels into the cache, only
#
# Environment: GPROBE_BIN (the gprobe to test; default the debug build of the suite,
# ${CARGO_TARGET_DIR:-target}/debug/gprobe), VM_CACHE (default ~/.cache/gprobe/vm),
# VM_TIMEOUT (seconds per VM, default 900), VM_JOBS (VMs at once, default 2), VM_KVM=1
# (use /dev/kvm; it hangs under nested virtualization, so TCG is the default), VM_HOST=0
# (leave out this machine's column), VM_KERNELS (a subset, e.g. "5.10 7.2"), VM_RESULTS=DIR
# (keep each kernel's results and console there).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gprobe/vm}"
vm_timeout="${VM_TIMEOUT:-900}"
vm_jobs="${VM_JOBS:-2}"
gprobe_bin="${GPROBE_BIN:-${CARGO_TARGET_DIR:-$here/target}/debug/gprobe}"

# name, Debian suite, package, pinned version. From 7.x the image is in linux-binary-*.
KERNELS=(
  "5.10 bullseye linux-image-5.10.0-32-amd64 5.10.223-1"
  "6.1 bookworm linux-image-6.1.0-56-amd64 6.1.192-2"
  "6.12 trixie linux-image-6.12.117+deb13-amd64 6.12.117-1"
  "7.2 sid linux-binary-7.2.13+deb14-amd64 7.2.13-1"
)
read -r -a selected <<<"${VM_KERNELS:-5.10 6.1 6.12 7.2}"

work="$(mktemp -d /tmp/gprobe-vm.XXXXXX)"
# Every QEMU started is listed here (VMs boot in background jobs): killed by pid at exit.
cleanup() {
  local p
  if [[ -f "$work/qemu.pids" ]]; then
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$work/qemu.pids"
  fi
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
  echo "vm.sh: $*" >&2
  exit 1
}

# QEMU, a static busybox for the initramfs and cpio, from Debian, when missing.
need_tools() {
  local missing=() p
  for p in qemu-system-x86 busybox-static cpio; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "vm.sh: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# apt-get with a sources list and state of its own (never the machine's): the suites the
# kernels come from.
apt_private() {
  apt-get -q -o Dir::Etc::sourcelist="$cache/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null \
    -o Dir::State::Lists="$cache/apt/lists" -o Dir::Cache="$cache/apt/cache" \
    -o Dir::State::status=/dev/null -o Acquire::Languages=none -o APT::Sandbox::User=root "$@"
}

kernel_field() { # NAME FIELD(1-based: 2 suite, 3 package, 4 version)
  local k
  for k in "${KERNELS[@]}"; do
    read -r -a f <<<"$k"
    [[ "${f[0]}" == "$1" ]] && { echo "${f[$(($2 - 1))]}"; return 0; }
  done
  die "unknown kernel $1 (known: 5.10 6.1 6.12 7.2)"
}

# Downloads each selected kernel's package once and keeps its vmlinuz in the cache.
kernels() {
  local name pkg ver updated=false tmp img
  for name in "${selected[@]}"; do
    [[ -s "$cache/kernels/$name/vmlinuz" ]] && continue
    pkg="$(kernel_field "$name" 3)"
    ver="$(kernel_field "$name" 4)"
    if ! $updated; then
      mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial"
      cat >"$cache/apt/sources.list" <<EOF
deb http://deb.debian.org/debian bullseye main
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian-security bookworm-security main
deb http://deb.debian.org/debian trixie main
deb http://deb.debian.org/debian sid main
EOF
      echo "vm.sh: reading Debian's package lists (private state in $cache/apt)" >&2
      apt_private update >/dev/null
      updated=true
    fi
    tmp="$work/deb-$name"
    mkdir -p "$tmp"
    echo "vm.sh: downloading $pkg=$ver" >&2
    (cd "$tmp" && apt_private download "$pkg=$ver" >/dev/null) || die "apt-get download $pkg=$ver failed"
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    mkdir -p "$cache/kernels/$name"
    # boot/vmlinuz-VERSION; from 7.x usr/lib/modules/VERSION/vmlinuz.
    img="$(find "$tmp/x" -type f \( -path '*/boot/vmlinuz-*' -o -path '*/lib/modules/*/vmlinuz' \) | head -1)"
    [[ -n "$img" ]] || die "no vmlinuz in $pkg=$ver"
    cp "$img" "$cache/kernels/$name/vmlinuz.tmp"
    mv "$cache/kernels/$name/vmlinuz.tmp" "$cache/kernels/$name/vmlinuz"
    rm -rf "$tmp"
  done
}

# The test programs, built once per content (sources, compilers, this recipe) into
# $cache/progs/HASH: http-client with the newest Go of the suite (also stripped) and with
# Go 1.19, the two-service program, and the C targets (static, with a USDT probe).
go_new="${GPROBE_GO127:-$here/.cache/venv/bin/go}"
go_old="${GPROBE_GO119:-/usr/lib/go-1.19/bin/go}"
progs=""
programs() {
  local src=(examples/http-client/main.go e2e/testdata/services/main.go
    e2e/testdata/ctarget/ctarget.c e2e/testdata/forker/forker.c)
  [[ -x "$go_new" && -x "$go_old" ]] || die "Go not found ($go_new, $go_old): run scripts/setup.sh --test"
  local hash
  hash="$({
    (cd "$here" && sha256sum "${src[@]}")
    "$go_new" version
    "$go_old" version
    cc --version | head -1
    declare -f programs go_build
  } | sha256sum | cut -c1-16)"
  progs="$cache/progs/$hash"
  [[ -d "$progs" ]] && return 0
  echo "vm.sh: building the test programs into $progs" >&2
  local out="$work/progs"
  mkdir -p "$out"
  go_build "$go_new" examples/http-client "$out/http-client-go127"
  go_build "$go_old" examples/http-client "$out/http-client-go119"
  go_build "$go_new" examples/http-client "$out/http-client-go127s" -ldflags=-s\ -w
  go_build "$go_new" e2e/testdata/services "$out/services"
  cc -O1 -pthread -g -static -o "$out/ctarget" "$here/e2e/testdata/ctarget/ctarget.c"
  cc -O1 -g -static -o "$out/forker" "$here/e2e/testdata/forker/forker.c"
  mkdir -p "$cache/progs"
  mv "$out" "$progs"
}
go_build() { # GO SRC_DIR OUT [FLAGS...]: a static build, as e2e/src/go.rs makes them
  local go="$1" dir="$2" out="$3"
  shift 3
  (cd "$here/$dir" && GOTOOLCHAIN=local GO111MODULE=off CGO_ENABLED=0 GOFLAGS=-mod=mod \
    GOCACHE="$cache/go/cache" GOPATH="$cache/go/path" "$go" build -o "$out" "$@" .)
}

# An initramfs (uncompressed: the kernel unpacks it faster than TCG inflates gzip) with
# busybox, gprobe and its libraries, the test programs, the tests and, for `run`, a command.
initramfs() { # OUT [CMD]
  local root="$work/root-$$-$RANDOM" lib
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,t/bin,t/out}
  cp /bin/busybox "$root/bin/busybox"
  # Debug info is most of a debug build and nothing gprobe reads of itself.
  objcopy --strip-debug "$gprobe_bin" "$root/bin/gprobe"
  for lib in $(ldd "$gprobe_bin" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  # containerd, for the agent's CRI (its readiness is the runtime answering).
  if command -v containerd >/dev/null; then
    cp "$(command -v containerd)" "$root/bin/containerd"
  fi
  cp "$progs"/* "$root/t/bin/"
  cp "$here/scripts/vm/tests.sh" "$root/t/tests.sh"
  cp "$here/scripts/vm/init" "$root/init"
  [[ -n "${2:-}" ]] && printf '%s\n' "$2" >"$root/t/cmd"
  (cd "$root" && find . | cpio -o -H newc --quiet) >"$1"
  rm -rf "$root"
}

# Boots kernel NAME with INITRD; the console (without \r) goes to LOG. Returns once the VM
# has powered off, or after VM_TIMEOUT seconds (then QEMU is killed, and 124 returned).
boot() { # NAME INITRD LOG
  local name="$1" kvm=() cpu=(-cpu max) pid t0
  if [[ "${VM_KVM:-0}" == 1 ]]; then
    kvm=(-enable-kvm)
    cpu=(-cpu host)
  fi
  t0=$SECONDS
  # no_timer_check: 5.10 under load otherwise panics "IO-APIC + timer doesn't work".
  qemu-system-x86_64 "${kvm[@]}" "${cpu[@]}" -m 2048 -smp 1 -display none -monitor none \
    -serial "file:$3.raw" -no-reboot -kernel "$cache/kernels/$name/vmlinuz" -initrd "$2" \
    -append "console=ttyS0 panic=-1 no_timer_check loglevel=1" </dev/null >"$3.qemu" 2>&1 &
  pid=$!
  echo "$pid" >>"$work/qemu.pids"
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - t0 > vm_timeout)); then
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      tr -d '\r' <"$3.raw" >"$3"
      echo "vm.sh: kernel $name: timed out after ${vm_timeout}s" >>"$3"
      return 124
    fi
    sleep 1
  done
  wait "$pid" 2>/dev/null || true
  tr -d '\r' <"$3.raw" >"$3"
  rm -f "$3.raw"
  grep -q "@@GPROBE-VM-DONE" "$3" || return 1
}

# Runs the tests in a VM of kernel NAME; the results go to DIR.
vm_tests() { # NAME INITRD DIR
  local log="$3.console" rc=0 t0=$SECONDS
  mkdir -p "$3"
  boot "$1" "$2" "$log" || rc=$?
  sed -n '/^@@GPROBE-VM-RESULTS$/,/^@@GPROBE-VM-RESULTS-END$/p' "$log" | sed '1d;$d' |
    base64 -d 2>/dev/null | tar -xz -C "$3" 2>/dev/null || true
  echo "$((SECONDS - t0))" >"$3/seconds"
  [[ $rc == 0 ]] || echo "VM ended badly (exit $rc): $(tail -3 "$log" | tr '\n' ' ')" >"$3/vm-error"
}

host_tests() { # DIR
  local t0=$SECONDS
  mkdir -p "$1"
  # timeout signals its whole process group: the tests, gprobe and the programs.
  GPROBE="$gprobe_bin" PROGS="$progs" OUT="$1" WHERE=host timeout -k 10 "$vm_timeout" \
    sh "$here/scripts/vm/tests.sh" >"$1/tests.log" 2>&1 ||
    echo "the tests on this machine ended with status $? (124: timed out after ${vm_timeout}s)" >"$1/vm-error"
  echo "$((SECONDS - t0))" >"$1/seconds"
}

matrix() {
  [[ -x "$gprobe_bin" ]] || die "no gprobe at $gprobe_bin: build it (cargo build -p gprobe-agent) or set GPROBE_BIN"
  need_tools
  kernels
  programs
  local t0=$SECONDS initrd="$work/initrd.cpio" name cols=() running=0
  initramfs "$initrd"
  for name in "${selected[@]}"; do
    if ((running >= vm_jobs)); then
      wait -n || true
      running=$((running - 1))
    fi
    vm_tests "$name" "$initrd" "$work/res-$name" &
    running=$((running + 1))
    cols+=("$name=$work/res-$name")
  done
  # This machine's own kernel: the same tests, no VM, while the last VMs run.
  if [[ "${VM_HOST:-1}" != 0 ]]; then
    if ((running >= vm_jobs)); then
      wait -n || true
    fi
    host_tests "$work/res-host"
    cols+=("host $(uname -r)=$work/res-host")
  fi
  wait
  if [[ -n "${VM_RESULTS:-}" ]]; then
    mkdir -p "$VM_RESULTS"
    cp -a "$work"/res-* "$VM_RESULTS/"
    echo "vm.sh: each kernel's results (and console) are in $VM_RESULTS" >&2
  fi
  echo "== kernel matrix (${SECONDS}s; $((SECONDS - t0))s for the VMs and the host's tests)"
  python3 "$here/scripts/vm/check.py" "${cols[@]}"
}

run_one() { # NAME CMD
  [[ -x "$gprobe_bin" ]] || die "no gprobe at $gprobe_bin: build it or set GPROBE_BIN"
  need_tools
  selected=("$1")
  kernels
  programs
  local initrd="$work/initrd.cpio" log="$work/console" rc=0
  initramfs "$initrd" "$2"
  boot "$1" "$initrd" "$log" || rc=$?
  sed -n '/^@@GPROBE-VM-BOOTED/,/^@@GPROBE-VM-RC/p' "$log"
  if [[ $rc != 0 ]]; then
    tail -20 "$log" >&2
    die "kernel $1: the VM did not end cleanly (exit $rc)"
  fi
  local status
  status="$(sed -n 's/^@@GPROBE-VM-RC //p' "$log")"
  return "${status:-1}"
}

case "${1:-}" in
  matrix) matrix ;;
  kernels)
    need_tools
    kernels
    ;;
  run)
    [[ $# -ge 4 && "$3" == "--" ]] || die "usage: scripts/vm.sh run KERNEL -- 'shell command'"
    kernel_field "$2" 1 >/dev/null
    run_one "$2" "$4"
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
