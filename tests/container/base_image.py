"""The container test's podman setup and its base image, made from Debian's packages.

No container registry is reachable from the machines that run the tests, so the base image is
``mmdebstrap --variant=minbase bookworm`` with Debian's ``python3`` (3.11), ``python3-venv`` and
``ca-certificates``, imported into podman storage of the test's own under ``.tools/podman/``.
Made once per recipe: a later run finds it there.

Standard library only: ``scripts/install-test-tools`` (podman group) runs this module with the
system's ``python3`` in the background while the Python packages install, so the container test
starts with its base ready (``python3 -m tests.container.base_image``); the test makes it itself
when it is missing.

Podman runs as root here, on machines whose sandbox refuses raised rlimits and whose cgroup
layout crun rejects: a ``containers.conf`` of the test's own (``CONTAINERS_CONF``) sets
``nofile``/``nproc`` within the current limits and picks runc, and ``CONTAINERS_STORAGE_CONF``
keeps images and containers under ``.tools/podman/`` (``/etc/containers`` is never touched).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

#: Debian's packages in the base image: Python 3.11 with its venv module, and TLS roots.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
WORK = Path(__file__).resolve().parents[2] / ".tools" / "podman"
#: What the base needs on the host.
COMMANDS = ("podman", "mmdebstrap", "runc")


class CommandFailed(Exception):
    """A command exited non-zero; the message names it and ends with its stderr."""


def run(
    *args: str, timeout: float, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise CommandFailed(f"{' '.join(args[:3])} ... exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result


def podman_env() -> dict[str, str]:
    """Podman configured for the container test alone (storage, runtime, limits) under ``WORK``."""
    for sub in ("storage", "run", "tmp", "cni"):
        (WORK / sub).mkdir(parents=True, exist_ok=True)
    # Only lower limits are accepted: podman's defaults ask for more than the sandbox allows.
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)
    (WORK / "containers.conf").write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{WORK / "tmp"}"\n'
    )
    (WORK / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\nrunroot = "{WORK / "run"}"\ngraphroot = "{WORK / "storage"}"\n'
    )
    return {
        **os.environ,
        "CONTAINERS_CONF": str(WORK / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(WORK / "storage.conf"),
    }


def base_image(env: dict[str, str]) -> str:
    """The Debian base image's name, built and imported only when this recipe was never built.
    One maker at a time (the background build and a test started beside it wait for each other)."""
    recipe = f"{SUITE} minbase {' '.join(BASE_PACKAGES)}"
    tag = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    image = f"localhost/gateway-test-base:{SUITE}-{tag}"
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if run("podman", "image", "exists", image, timeout=60, env=env, check=False).returncode == 0:
            return image
        tarball = WORK / f"base-{SUITE}-{tag}.tar"
        if not tarball.is_file():
            partial = tarball.with_suffix(".partial.tar")
            run(
                "mmdebstrap", "--variant=minbase", "--format=tar", "--quiet",
                f"--include={','.join(BASE_PACKAGES)}", '--aptopt=Acquire::Retries "3"',
                SUITE, str(partial), MIRROR,
                timeout=400, env=env,
            )  # fmt: skip
            partial.rename(tarball)
        run("podman", "import", str(tarball), image, timeout=120, env=env)
    return image


def main() -> int:
    missing = [command for command in COMMANDS if shutil.which(command) is None]
    if missing:
        print(f"base image not made: {', '.join(missing)} missing", file=sys.stderr)
        return 0  # the container test says so itself (skipped, or failed in CI)
    try:
        print(base_image(podman_env()))
    except (CommandFailed, subprocess.TimeoutExpired) as exc:
        print(f"base image not made (the container test tries again): {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
