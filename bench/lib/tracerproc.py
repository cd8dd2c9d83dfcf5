"""The processes bench/sites.py and bench/c/cost.py start: the target pinned to one CPU
and the tracer to another, each started through `spawn` and stopped by pid."""

import os
import signal
import subprocess
import time

CHILDREN = []


def pin(who):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return []
    return ["taskset", "-c", str(cpus[0] if who == "target" else cpus[1])]


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    CHILDREN.append(p)
    return p


def stop(p, sig=signal.SIGINT, timeout=60):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in CHILDREN:
        CHILDREN.remove(p)


def stop_all():
    for p in list(CHILDREN):
        stop(p, signal.SIGTERM)


def wait_for(path, text, proc, what, timeout=120):
    t0 = time.monotonic()
    while True:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            with open(path, errors="replace") as f:
                raise RuntimeError(f"{what} exited ({proc.returncode}):\n{f.read()}")
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{what} not ready in {timeout} s")
        time.sleep(0.02)
