"""``python -m providers.sandbox``: run the seeded stand-ins until SIGTERM/SIGINT.

``make run`` starts this before web, worker and beat and waits for each stand-in's
``/_sandbox/health``; it can also run on its own, e.g. to try the contract suite's operations
by hand. It writes the environment that points Alfred at it to ``<root>/sandbox.env``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from providers.sandbox.aws import RATES
from providers.sandbox.github import Limits
from providers.sandbox.stack import Ports, Sandbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m providers.sandbox", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path(".alfred/sandbox"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port-base",
        type=int,
        default=8600,
        help="AWS on base+1, GitHub on base+2, ArgoCD on base+3 (default 8600)",
    )
    parser.add_argument("--route53-change-delay", type=float, default=2.0)
    parser.add_argument("--converge-delay", type=float, default=3.0)
    parser.add_argument(
        "--no-rate-limits",
        action="store_true",
        help="do not throttle as AWS and GitHub do (Route53: 5/s; GitHub: 80 writes/min)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    sandbox = Sandbox(
        root=args.root.resolve(),
        host=args.host,
        ports=Ports.from_base(args.port_base),
        route53_change_delay=args.route53_change_delay,
        converge_delay=args.converge_delay,
        # AWS's own request rates: Alfred's budgets keep under them (docs/providers.md)
        rates=None if args.no_rate_limits else RATES,
        github_limits=None if args.no_rate_limits else Limits(),
    )
    with sandbox:
        environ = sandbox.environ()
        # Written whole or not at all: the launcher reads it as soon as it exists.
        partial = sandbox.root / "sandbox.env.partial"
        partial.write_text("".join(f"{name}={value}\n" for name, value in sorted(environ.items())))
        os.replace(partial, sandbox.root / "sandbox.env")
        print(f"AWS     {sandbox.aws.url}  (Route53 stand-in, moto for ACM/Lambda)", flush=True)
        print(f"GitHub  {sandbox.github.url}/api/v3  (repositories in {sandbox.github.root})")
        print(f"ArgoCD  {sandbox.argocd.url}")
        for provider, summary in sandbox.seeded.items():
            print(f"seeded {provider}: {summary}")
        print("ready", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
