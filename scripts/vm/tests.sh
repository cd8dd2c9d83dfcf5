#!/bin/sh
# gprobe's kernel checks, run on one kernel: inside a VM by scripts/vm/init (busybox), or on
# this machine by `scripts/vm.sh matrix` (the host column). Each scenario runs the real
# gprobe on real programs and keeps what it saw in $OUT (gprobe's JSONL and summary, the
# programs' own output, /proc and /sys facts); scripts/vm/check.py then judges every check
# from those files, so a scenario that did not run has nothing to pass on.
#
#   GPROBE=gprobe PROGS=dir-of-test-programs OUT=results-dir [WHERE=vm|host] tests.sh [SCENARIO...]
set -u
G=${GPROBE:?GPROBE: the gprobe binary}
P=${PROGS:?PROGS: the folder of the test programs (scripts/vm.sh builds them)}
O=${OUT:?OUT: the folder for the results}
WHERE=${WHERE:-vm}
mkdir -p "$O"
T=$(mktemp -d /tmp/gprobe-vm-tests.XXXXXX)
trap 'rm -rf "$T"' EXIT
uname -r >"$O/kernel"
echo "$WHERE" >"$O/where"

# Waits until FILE has at least N lines matching the fixed string S (at most SECS seconds,
# and no longer than process PID lives, when given).
wait_for() {
	f=$1 s=$2 n=$3 secs=$4 pid=${5:-} i=0
	while :; do
		# A file not there yet (a background job's redirection) counts 0.
		got=$(grep -cF -- "$s" "$f" 2>/dev/null)
		[ "${got:-0}" -ge "$n" ] && return 0
		i=$((i + 1))
		[ "$i" -gt $((secs * 10)) ] && return 1
		[ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
		sleep 0.1
	done
}

# Starts gprobe in the background on SPEC for scenario NAME: $gp is its pid. Returns once it
# is tracing (1 when it is not within 120 s: its stderr says why).
gprobe_bg() {
	name=$1
	shift
	"$G" run "$@" --output-file "$O/$name.jsonl" --summary-file "$O/$name.summary.json" \
		2>"$O/$name.err" &
	gp=$!
	if ! wait_for "$O/$name.err" "ready: tracing" 1 120 "$gp"; then
		gprobe_stop "$name"
		return 1
	fi
}

# Stops the gprobe of gprobe_bg (SIGINT: detach, drain, summary) and keeps its exit status.
gprobe_stop() {
	kill -INT "$gp" 2>/dev/null
	wait "$gp"
	echo $? >"$O/$1.rc"
}

# PID:STATE of each live process running FILE (T: stopped), from one read of /proc (the
# name in its stat first, then its executable).
procs_of() {
	# shellcheck disable=SC2013 # PID:STATE has no blanks
	for l in $(cat /proc/[0-9]*/stat 2>/dev/null | grep -F "(${1##*/}) " |
		sed 's/^\([0-9]*\) .*) \(.\).*/\1:\2/'); do
		[ "$(readlink "/proc/${l%%:*}/exe" 2>/dev/null)" = "$1" ] && echo "$l"
	done
}

# The kernel state gprobe may leave: uprobes defined in tracefs, BPF pins and, in a VM
# where nothing else uses BPF, every process holding a BPF object open.
kernel_state() {
	tr=/sys/kernel/tracing
	[ -e $tr/uprobe_events ] || tr=/sys/kernel/debug/tracing
	{
		echo "uprobe_events:"
		cat $tr/uprobe_events 2>&1
		echo "bpffs:"
		find /sys/fs/bpf -mindepth 1 2>&1
		if [ "$WHERE" = vm ]; then
			echo "bpf fds:"
			grep -lE '^(prog_id|map_id|link_id):' /proc/[0-9]*/fdinfo/* 2>/dev/null
		fi
	} >"$1"
}

spec_get() { # NAME EXECUTABLE [WHEN]
	when=
	[ -n "${3:-}" ] && when="      when: '$3'"
	cat <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: $1}
spec:
  selector: {executable: "$2"}
  probes:
    - symbol: "net/http.(*Client).Get"
      signature: "func(c *Client, url string) (resp *Response, err error)"
      capture: [url, err]
      latency: true
$when
  limits: {eventsPerSecond: 0}
YAML
}

# a, e: Go 1.27 (register ABI), latency; b: Go 1.19 and a stripped Go 1.27 build.
scenario_go() {
	for v in go127 go119 go127s; do
		spec_get "get-$v" "$P/http-client-$v" >"$T/get-$v.yaml"
		"$G" run "$T/get-$v.yaml" --output-file "$O/go-$v.jsonl" --summary-file "$O/go-$v.summary.json" \
			-- "$P/http-client-$v" -n 5 -delay 0 -interval 0 >"$O/go-$v.out" 2>"$O/go-$v.err"
		echo $? >"$O/go-$v.rc"
		refused_here "$O/go-$v.err" && break
	done
}

# Whether gprobe's uprobe program was refused by this kernel's verifier (in FILE, a gprobe's
# stderr): it is refused every time, each try taking most of a minute in an emulated VM.
refused_here() {
	grep -q "loading BPF program gprobe_uprobe" "$1" 2>/dev/null
}

# f: `when: err != nil` on 10 GETs, of which 3 fail.
scenario_when() {
	spec_get when "$P/http-client-go127" 'err != nil' >"$T/when.yaml"
	"$G" run "$T/when.yaml" --output-file "$O/when.jsonl" --summary-file "$O/when.summary.json" \
		-- "$P/http-client-go127" -n 10 -delay 0 -interval 0 -errors-every 3 >"$O/when.out" 2>"$O/when.err"
	echo $? >"$O/when.rc"
}

# c, d: C functions (uretprobe for results) and a semaphore-guarded USDT probe.
scenario_c() {
	cat >"$T/c.yaml" <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: c}
spec:
  selector: {executable: "$P/ctarget"}
  probes:
    - {symbol: add, capture: [a, b, r0], latency: true}
    - {symbol: sub, capture: [a, b]}
    - {usdt: "ctarget:order", signature: "(const char *item, int qty)", capture: [item, qty]}
  limits: {eventsPerSecond: 0}
YAML
	"$G" run "$T/c.yaml" --output-file "$O/c.jsonl" --summary-file "$O/c.summary.json" \
		-- "$P/ctarget" -n 5 -threads 2 >"$O/c.out" 2>"$O/c.err"
	echo $? >"$O/c.rc"
}

hold_spec() { # NAME: work() of forker and sub() of ctarget, selected by their literal paths
	cat <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: $1-forker}
spec:
  selector: {executable: "$P/forker"}
  probes:
    - {symbol: work, capture: [x]}
  limits: {eventsPerSecond: 0}
---
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: $1-ctarget}
spec:
  selector: {executable: "$P/ctarget"}
  probes:
    - {symbol: sub, capture: [a, b]}
  limits: {eventsPerSecond: 0}
YAML
}

# g: a process started while gprobe runs is held at exec (its first calls are traced) and
# the children a traced process forks are held at fork; i: the kernel before, during and
# after (a stop leaves nothing).
scenario_holds() {
	kernel_state "$O/state-before"
	hold_spec holds >"$T/holds.yaml"
	gprobe_bg holds "$T/holds.yaml" || return 0
	kernel_state "$O/state-during"
	ls "/proc/$gp/fd" >/dev/null 2>&1 && echo "$gp" >"$O/holds.pid"
	"$P/ctarget" -n 3 -threads 0 >"$O/holds-exec.out" 2>&1
	"$P/forker" -n 10 -quick </dev/null >"$O/holds-fork.out" 2>&1
	gprobe_stop holds
	kernel_state "$O/state-after"
}

# h: gprobe killed (-9) while it holds processes: none may stay stopped.
scenario_kill() {
	hold_spec kill >"$T/kill.yaml"
	gprobe_bg kill "$T/kill.yaml" || return 0
	# gprobe stopped (SIGSTOP) cannot release what its hooks hold: the programs started now
	# stay held (for its lease, 3 s) until the kill. Then none may stay stopped.
	kill -STOP "$gp"
	i=0
	while [ $i -lt 20 ]; do
		"$P/ctarget" -n 1 -threads 0 -delay-ms 4000 >/dev/null 2>&1 &
		i=$((i + 1))
	done
	# Killed as soon as one is seen held (at most 2 s on).
	t0=$(date +%s)
	while [ $(($(date +%s) - t0)) -lt 2 ]; do
		procs_of "$P/ctarget" >"$O/kill.at-kill"
		grep -q ':T' "$O/kill.at-kill" && break
	done
	kill -9 "$gp"
	wait "$gp"
	echo $? >"$O/kill.rc"
	sleep 3
	procs_of "$P/ctarget" >"$O/kill.after"
	# The programs end on their own after their 4 s delay; one left stopped is killed here.
	for l in $(procs_of "$P/ctarget"); do
		kill -9 "${l%%:*}"
	done
	wait
}

# j: the agent with --spec-dir reports Ready on /readyz, with the kernel's reasons. It is
# ready once the container runtime answers: a private containerd (CRI only, no pods). On a
# kernel gprobe cannot trace on, it stays up and /readyz answers 503 with the reason.
scenario_agent() {
	c=$T/containerd
	mkdir -p "$T/specs" "$c/root" "$c/state"
	command -v containerd >/dev/null || {
		echo "no containerd here" >"$O/agent.err"
		return 0
	}
	cat >"$c/config.toml" <<TOML
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/sock"
[ttrpc]
  address = "$c/sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
TOML
	containerd --config "$c/config.toml" >"$O/containerd.log" 2>&1 &
	cp=$!
	i=0
	while [ ! -S "$c/sock" ] && [ $i -lt 600 ]; do
		i=$((i + 1))
		sleep 0.1
	done
	spec_get agent "$P/http-client-go127" >"$T/specs/agent.yaml"
	NODE_NAME=vm "$G" agent --spec-dir "$T/specs" --cri-socket "$c/sock" --health-addr 127.0.0.1:19876 \
		>"$O/agent.out" 2>"$O/agent.err" &
	ap=$!
	i=0
	: >"$O/agent.readyz"
	while [ $i -lt 600 ]; do
		if wget -q -O "$O/agent.readyz.body" http://127.0.0.1:19876/readyz 2>/dev/null; then
			echo 200 >"$O/agent.readyz"
			break
		fi
		kill -0 "$ap" 2>/dev/null || break
		# A kernel gprobe cannot trace on: the agent stays up, never ready, and says why.
		grep -q "the agent stays up, not ready" "$O/agent.err" && break
		i=$((i + 1))
		sleep 0.2
	done
	[ -s "$O/agent.readyz" ] || wget -O "$O/agent.readyz.body" http://127.0.0.1:19876/readyz \
		>"$O/agent.readyz" 2>&1
	kill -INT "$ap" 2>/dev/null
	wait "$ap"
	echo $? >"$O/agent.rc"
	kill "$cp"
	wait "$cp"
}

# k: the traceparent write: front's spans propagate to back, requests that carry a
# traceparent of their own (the headers client, inside a propagating span) are left alone.
scenario_propagate() {
	cat >"$T/prop.yaml" <<YAML
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: prop}
spec:
  selector: {executable: "$P/services"}
  probes:
    - {symbol: main.frontHandler, capture: [r.URL.RawQuery], latency: true, propagate: true}
    - {symbol: main.backHandler, capture: [r.URL.RawQuery], latency: true}
    - {symbol: main.headers, capture: [n], latency: true, propagate: true}
  limits: {eventsPerSecond: 0}
YAML
	gprobe_bg prop "$T/prop.yaml" || return 0
	"$P/services" -role back -addr 127.0.0.1:18081 -log "$O/prop.back" &
	bp=$!
	"$P/services" -role front -addr 127.0.0.1:18080 -backend http://127.0.0.1:18081 \
		-log "$O/prop.front" &
	fp=$!
	wait_for "$O/prop.err" "pid $bp)" 3 60 "$gp"
	wait_for "$O/prop.err" "pid $fp)" 3 60 "$gp"
	wait_for "$O/prop.back" listening 1 30
	wait_for "$O/prop.front" listening 1 30
	timeout 120 "$P/services" -role client -front http://127.0.0.1:18080 -n 12 >"$O/prop.client" 2>&1
	echo $? >"$O/prop.client.rc"
	timeout 120 "$P/services" -role headers -backend http://127.0.0.1:18081 -n 3 -headers 5 \
		-first 101 >"$O/prop.headers" 2>&1
	echo $? >"$O/prop.headers.rc"
	kill "$fp" "$bp"
	wait "$fp" "$bp"
	gprobe_stop prop
}

[ $# -gt 0 ] || set -- go when c holds kill agent propagate
refused=
for s in "$@"; do
	# Once the program is refused, only the agent's answer to that is left to see.
	if [ -n "$refused" ] && [ "$s" != agent ]; then
		echo "== scenario $s skipped: gprobe's program was refused (go)"
		continue
	fi
	echo "== scenario $s ($(date +%s))"
	"scenario_$s"
	for f in "$O"/*.err; do
		refused_here "$f" && refused=1
	done
done
echo "== done ($(date +%s))"
