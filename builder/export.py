"""`imgbuild export`: a released image as the file a Slurm cluster starts (Enroot / pyxis squashfs).

From the exact digest the release tag names: skopeo copies it to an OCI layout, umoci unpacks the
rootfs, the three files Enroot reads are written from the image's config (Enroot's image format:
/etc/environment, /etc/rc, /etc/fstab), and mksquashfs packs it. The same digest gives the same bytes:
every file time is the image's creation time, directory order is sorted, no extended attributes, one
fixed compressor and block size. A record beside the file (FILE.json) names the source, its digest and
the file's own sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from builder.errors import ImgbuildError
from builder.core import platforms as plat

TOOLS = {"skopeo": "skopeo", "umoci": "umoci", "mksquashfs": "squashfs-tools", "unsquashfs": "squashfs-tools"}
# Fixed so the bytes depend on the image alone (mksquashfs' defaults may differ between builds of it).
SQUASHFS_OPTIONS = ["-noappend", "-no-xattrs", "-comp", "gzip", "-b", "131072", "-processors", "2"]


class ExportError(ImgbuildError):
    exit_code = 9
    label = "export"


def _run(argv: list[str], what: str, timeout: float = 3600) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ExportError(f"{what}: {argv[0]} is not installed",
                          hint=f"apt-get install {TOOLS.get(argv[0], argv[0])}") from None
    except subprocess.TimeoutExpired:
        raise ExportError(f"{what}: {argv[0]} did not finish in {timeout:.0f} s") from None
    if res.returncode != 0:
        raise ExportError(f"{what} failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-800:]}")
    return res.stdout


def image_config(layout: Path) -> dict:
    """The image config of the one image in an OCI layout (index -> manifest -> config)."""
    def blob(digest: str) -> dict:
        algo, hexd = digest.split(":", 1)
        return json.loads((layout / "blobs" / algo / hexd).read_text())
    index = json.loads((layout / "index.json").read_text())
    manifest = blob(index["manifests"][0]["digest"])
    return blob(manifest["config"]["digest"])


def enroot_files(config: dict, env_over: dict | None = None) -> dict[str, str]:
    """What Enroot reads from an image (doc/image-format.md): the environment, the start command (the
    arguments given at start replace the image's CMD, as with docker run), and the mounts (none). env_over:
    a site partition's runtime env, laid over the image's (its HCA names, socket interface, GID index)."""
    cfg = config.get("config") or {}
    items = dict(item.split("=", 1) if "=" in item else (item, "") for item in cfg.get("Env") or [])
    items.update(env_over or {})
    env = "".join(f"{k}={v}\n" for k, v in items.items())
    entry = " ".join(shlex.quote(a) for a in cfg.get("Entrypoint") or [])
    cmd = " ".join(shlex.quote(a) for a in cfg.get("Cmd") or [])
    workdir = cfg.get("WorkingDir") or "/"
    rc = ("# Written by imgbuild export from the image's config: the command Enroot starts.\n"
          f"cd {shlex.quote(workdir)} || exit 1\n"
          'if [ $# -gt 0 ]; then\n'
          f'    exec {entry + " " if entry else ""}"$@"\n'
          "else\n"
          f"    exec {(entry + ' ' + cmd).strip() or '/bin/sh'}\n"
          "fi\n")
    return {"etc/environment": env, "etc/rc": rc, "etc/fstab": "# Written by imgbuild export: no mounts of its own.\n"}


def squashfs(image: str, out: Path, say: Callable[[str], None] = lambda line: None, insecure: bool = True,
             platform: str | None = None, provenance: dict | None = None, partition=None) -> dict:
    """Export `image` (a reference by digest: REGISTRY/REPO@sha256:...) to `out`. Returns the record, which
    carries `provenance` (builder.ship.trust.verify_release's, where the site signs) for whoever runs the file.
    platform: the entry of a release of several platforms (an index) to export; default this machine's,
    the node's (a Grace node exports linux/arm64). A single image is exported as it is."""
    platform = platform or plat.host()
    if "@sha256:" not in image:
        raise ExportError(f"{image!r} is not a reference by digest; an export must name the exact image")
    if os.geteuid() != 0:
        raise ExportError("umoci unpacks with the image's owners only as root", hint="run the export as root")
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="imgbuild-export-", dir=out.parent) as tmp:
        layout, bundle = Path(tmp) / "oci", Path(tmp) / "bundle"
        say(f"export: copying {image} ({platform})")
        os_, arch = platform.split("/", 1)
        _run(["skopeo", "copy", *(["--src-tls-verify=false"] if insecure else []), "--override-os", os_,
              "--override-arch", arch, f"docker://{image}", f"oci:{layout}:image"], "skopeo copy")
        say("export: unpacking the rootfs")
        _run(["umoci", "unpack", "--image", f"{layout}:image", str(bundle)], "umoci unpack")
        config = image_config(layout)
        rootfs = bundle / "rootfs"
        for rel, text in enroot_files(config, dict(partition.env) if partition else None).items():
            path = rootfs / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or path.exists():
                path.unlink()
            path.write_text(text)
            path.chmod(0o755 if rel == "etc/rc" else 0o644)
        # Every time stamp is the image's creation time: the bytes then depend on the image alone.
        created = config.get("created") or "1970-01-01T00:00:00Z"
        epoch = int(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())
        part = out.with_name(out.name + ".part")
        say("export: packing squashfs")
        _run(["mksquashfs", str(rootfs), str(part), *SQUASHFS_OPTIONS, "-all-time", str(epoch),
              "-mkfs-time", str(epoch)], "mksquashfs")
        digest = hashlib.sha256()
        with open(part, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        record = {"source": image, "source_digest": image.split("@", 1)[1], "platform": platform,
                  "format": "squashfs (Enroot image format)",
                  "file": out.name, "sha256": "sha256:" + digest.hexdigest(), "size": part.stat().st_size,
                  "created": created, "mksquashfs_options": SQUASHFS_OPTIONS + ["-all-time", str(epoch)],
                  "seconds": round(time.time() - started, 1)}
        if provenance is not None:
            record["provenance"] = provenance
        if partition is not None:   # the file is for those nodes: their env is in its /etc/environment
            record["partition"] = {"name": partition.name, "env": dict(partition.env)}
        os.replace(part, out)   # a half-written file never has the final name
    out.with_name(out.name + ".json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def unpack(sqsh: Path, dest: Path) -> Path:
    """The squashfs unpacked to `dest` (what Enroot's `create` does), for running a check in it."""
    if dest.exists():
        shutil.rmtree(dest)
    _run(["unsquashfs", "-no-xattrs", "-d", str(dest), str(sqsh)], "unsquashfs")
    return dest


def run_in_rootfs(rootfs: Path, argv: list[str], env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """Start a command in an unpacked Enroot rootfs the way Enroot does, without Enroot (not installable
    here): new mount and PID namespaces, /proc, /dev and /dev/shm from the host, the image's
    /etc/environment, and /etc/rc given the command. No network namespace: the host's, as on a node."""
    script = ("set -e; r=$1; shift; "
              "mount -t proc proc \"$r/proc\"; mount --rbind /dev \"$r/dev\"; mkdir -p \"$r/dev/shm\"; "
              "mount -t tmpfs -o size=1g tmpfs \"$r/dev/shm\"; mount --rbind /sys \"$r/sys\"; "
              "cp /etc/hosts \"$r/etc/hosts\" 2>/dev/null || true; "
              "exec chroot \"$r\" /bin/sh -c 'while IFS= read -r kv; do case $kv in *=*) export \"$kv\";; esac; "
              "done < /etc/environment; exec /bin/sh /etc/rc \"$@\"' rc \"$@\"")
    full = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", script, "sh", str(rootfs),
            *argv]
    return subprocess.run(full, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


__all__ = ["ExportError", "squashfs", "unpack", "run_in_rootfs", "enroot_files", "image_config"]
