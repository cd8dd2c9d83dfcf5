#!/usr/bin/env python3
"""Writes a one-layer OCI image archive (the layout `ctr image import` and `docker load`
read) from files of this machine, without a container engine or a registry.

    oci-image.py --ref gprobe.local/gprobe-agent:v1 --out agent.tar \\
        --entrypoint /usr/local/bin/gprobe --cmd agent \\
        --file target/release/gprobe:/usr/local/bin/gprobe --libs-of /usr/local/bin/gprobe

--file SRC:DEST copies a file (mode kept, owner root); --dir DEST adds an empty folder (mode
1777 for /tmp, else 0755); --libs-of DEST adds the shared libraries that DEST (a file given
with --file) loads, as `ldd` finds them on this machine, at the same paths, and the dynamic
loader. The layer is reproducible: fixed times and owners, sorted entries, so the same
inputs give the same digest. Prints the archive's path and the image reference.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

EPOCH = 0  # every entry's mtime: the same inputs give the same layer digest


def ldd_libs(path):
    """The shared objects `path` loads (absolute paths on this machine), loader included."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    text = out.stdout + out.stderr
    if "not a dynamic executable" in text or "statically linked" in text:
        return []
    if out.returncode != 0:
        sys.exit(f"oci-image: ldd {path} failed: {text.strip()}")
    libs = []
    for line in text.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if m:
            libs.append(m.group(1))
        elif "not found" in line:
            sys.exit(f"oci-image: {path} needs a library this machine lacks: {line.strip()}")
    return libs


def add_dirs(tar, seen, dest):
    """Adds every parent folder of dest (0755, root) that is not in the layer yet."""
    parts = dest.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d not in seen:
            seen.add(d)
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tar.addfile(info)


def layer_bytes(files, dirs):
    buf = io.BytesIO()
    seen = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [(d.strip("/"), None) for d in dirs] + [(dest.strip("/"), src) for dest, src in files.items()]
        for dest, src in sorted(entries):
            add_dirs(tar, seen, "/" + dest)
            if src is None:
                if dest in seen:
                    continue
                seen.add(dest)
                info = tarfile.TarInfo(dest)
                info.type, info.mtime = tarfile.DIRTYPE, EPOCH
                info.mode = 0o1777 if dest == "tmp" else 0o755
                tar.addfile(info)
                continue
            real = os.path.realpath(src)
            st = os.stat(real)
            info = tarfile.TarInfo(dest)
            info.size, info.mode, info.mtime = st.st_size, st.st_mode & 0o7777, EPOCH
            with open(real, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def blob(tar, data):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mode, info.mtime = len(data), 0o644, EPOCH
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}", len(data)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", required=True, help="image reference, e.g. gprobe.local/gprobe-agent:v1")
    p.add_argument("--out", required=True, help="archive to write")
    p.add_argument("--file", action="append", default=[], metavar="SRC:DEST")
    p.add_argument("--dir", action="append", default=[], metavar="DEST")
    p.add_argument("--libs-of", action="append", default=[], metavar="DEST")
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--cmd", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args()

    files = {}
    for spec in a.file:
        src, sep, dest = spec.partition(":")
        if not sep or not dest.startswith("/"):
            sys.exit(f"oci-image: --file {spec}: expected SRC:/ABSOLUTE/DEST")
        if not os.path.isfile(src):
            sys.exit(f"oci-image: --file {spec}: {src} is not a file")
        files[dest] = src
    for dest in a.libs_of:
        if dest not in files:
            sys.exit(f"oci-image: --libs-of {dest}: not given with --file")
        for lib in ldd_libs(files[dest]):
            files.setdefault(lib, lib)

    layer = layer_bytes(files, a.dir)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    gz = gzip.compress(layer, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": a.entrypoint or None,
            "Cmd": a.cmd or None,
            "User": a.user or None,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"] + a.env,
            "Labels": dict(kv.split("=", 1) for kv in a.label) or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "scripts/oci-image.py"}],
    }
    config["config"] = {k: v for k, v in config["config"].items() if v is not None}
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        cfg_digest, cfg_size = blob(tar, json.dumps(config, sort_keys=True).encode())
        layer_digest, layer_size = blob(tar, gz)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}
            ],
        }
        man_digest, man_size = blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": man_digest,
                    "size": man_size,
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": a.ref,
                        "org.opencontainers.image.ref.name": a.ref.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
        for name, data in (
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", json.dumps(index).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, EPOCH
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.out)
    print(f"{os.path.abspath(a.out)} {a.ref}")


if __name__ == "__main__":
    main()
