"""All three stand-ins in one process, seeded for a believable demo.

``make run`` runs this as a supervised child (``python -m providers.sandbox``) on fixed
loopback ports and hands :meth:`Sandbox.environ` to web, worker and beat; the test suite starts
one in-process on ephemeral ports. The ArgoCD stand-in reads branch heads straight from the
GitHub stand-in, so its applications converge on what was actually committed.

State lives under ``root`` and survives restarts, as the database does, so that work in flight
at a restart of ``make run`` finds the zones, certificates, aliases, commits and syncs it
recorded: the Git repositories are real repositories under ``root/github``; AWS keeps its
state in ``root/aws/`` (``route53.json``, ``aws.json``: :mod:`providers.sandbox.aws`) and
ArgoCD in ``root/argocd.json``, each written after every change. The demo seed adds only what
is missing (a zone, a function, a repository, an application), so it never undoes a change
made since. A fresh ``root`` (every test's own directory) is a fresh sandbox; delete
``.alfred/sandbox/`` to start ``make run``'s afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from providers.sandbox.argocd import ArgoCDStandIn
from providers.sandbox.argocd import seed_demo as seed_argocd
from providers.sandbox.aws import ALB_ZONE_ID_US_EAST_1, AwsStandIn, seed_aws
from providers.sandbox.github import GitHubStandIn, Limits
from providers.sandbox.state import StateFile

logger = logging.getLogger(__name__)

REGION = "us-east-1"
AWS_KEY = "sandbox"  # any value: the stand-in does not check signatures
GITHUB_TOKEN = "sandbox-github-token"  # noqa: S105 - a local stand-in's fixed token
ARGOCD_TOKEN = "sandbox-argocd-token"  # noqa: S105
# The platform edge the sandbox's domains alias to (acme.com's, as seeded).
EDGE_DNS_NAME = "dualstack.acme-edge-alb-1234567890.us-east-1.elb.amazonaws.com"


@dataclass(frozen=True)
class Ports:
    aws: int = 0
    github: int = 0
    argocd: int = 0

    @classmethod
    def from_base(cls, base: int) -> Ports:
        return cls(aws=base + 1, github=base + 2, argocd=base + 3)


class Sandbox:
    def __init__(
        self,
        *,
        root: Path,
        host: str = "127.0.0.1",
        ports: Ports | None = None,
        route53_change_delay: float = 2.0,
        converge_delay: float = 3.0,
        aws_kind: type[AwsStandIn] = AwsStandIn,
        github_limits: Limits | None = None,
        **aws_options: Any,
    ) -> None:
        """``aws_options``: more of :class:`AwsStandIn`'s (``acm_issue_delay``, ``rates``...);
        ``aws_kind``: a subclass of it (a test's, with journals of its own);
        ``github_limits``: GitHub's rate limits, metered as GitHub does (None: none)."""
        ports = ports or Ports()
        self.root = root
        self.aws = aws_kind(
            host=host,
            port=ports.aws,
            route53_change_delay=route53_change_delay,
            state_dir=root / "aws",
            **aws_options,
        )
        self.github = GitHubStandIn(
            root=root / "github",
            token=GITHUB_TOKEN,
            host=host,
            port=ports.github,
            limits=github_limits,
        )
        self.argocd = ArgoCDStandIn(
            heads=self.github.head,
            trees=self.github.tree_sha,  # a commit outside an app's path starts no sync
            token=ARGOCD_TOKEN,
            converge_delay=converge_delay,
            host=host,
            port=ports.argocd,
            state=StateFile(root / "argocd.json"),
        )
        self.seeded: dict[str, Any] = {}

    def start(self, *, seed: bool = True) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        started: list[Any] = []
        try:
            for standin in (self.aws, self.github, self.argocd):
                standin.start()
                started.append(standin)
            if seed:
                self.seeded = {
                    "aws": seed_aws(self.aws.url, region=REGION),
                    "github": self.github.seed_demo(),
                    "argocd": seed_argocd(self.argocd),
                }
        except BaseException:
            for standin in reversed(started):
                standin.stop()
            raise
        return self

    def stop(self) -> None:
        for standin in (self.argocd, self.github, self.aws):
            standin.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def clear_faults(self) -> None:
        for standin in (self.aws, self.github, self.argocd):
            standin.faults.clear()

    def environ(self) -> dict[str, str]:
        """The environment that points boto3, the GitHub backend and the ArgoCD client here."""
        return {
            "ALFRED_PROVIDERS": "sandbox",
            "AWS_ENDPOINT_URL": self.aws.url,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": AWS_KEY,
            "AWS_SECRET_ACCESS_KEY": AWS_KEY,
            "ALFRED_GITHUB_API_URL": f"{self.github.url}/api/v3",
            "ALFRED_GITHUB_TOKEN": GITHUB_TOKEN,
            "ALFRED_ARGOCD_URL": self.argocd.url,
            "ALFRED_ARGOCD_TOKEN": ARGOCD_TOKEN,
            "ALFRED_PLATFORM_EDGE_DNS_NAME": EDGE_DNS_NAME,
            "ALFRED_PLATFORM_EDGE_ZONE_ID": ALB_ZONE_ID_US_EAST_1,
        }
