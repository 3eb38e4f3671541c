"""Adapters built from a :class:`~providers.config.ProviderConfig`.

The one place that knows which constructor argument each setting feeds: the workflows' steps
ask for ``Providers(settings.ALFRED_PROVIDERS).route53()``, and the sandbox and `make run`
tests build the very same objects from an environment. Every call
returns a fresh adapter: the GitHub backend holds one HTTP session and is not shared between
threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.argocd import ArgoCD
from providers.aws.acm import Acm
from providers.aws.clients import AwsClients, shared_session
from providers.aws.lambda_ import Lambda
from providers.aws.route53 import Route53
from providers.config import ProviderConfig
from providers.errors import Rejected
from providers.gitops.github import GitHubRepository


@dataclass(frozen=True)
class Providers:
    config: ProviderConfig

    def _aws(self) -> AwsClients:
        aws = self.config.aws
        session = None
        if aws.access_key_id and aws.secret_access_key:
            session = shared_session(
                aws_access_key_id=aws.access_key_id,
                aws_secret_access_key=aws.secret_access_key,
                aws_session_token=aws.session_token,
                region_name=aws.region,
            )
        return AwsClients.from_config(aws, session=session)

    def route53(self) -> Route53:
        return Route53(clients=self._aws())

    def acm(self) -> Acm:
        return Acm(clients=self._aws())

    def lambda_(self) -> Lambda:
        return Lambda(clients=self._aws(), tag_key=self.config.aws.fleet_tag)

    def helm_repository(self) -> GitHubRepository:
        """The Helm values (nginx hosts, Mystique Kirby routing); commit to ``helm_branch``."""
        github = self.config.github
        return self._repository(github.helm_repo)

    def booking_repository(self) -> GitHubRepository:
        """The nginx booking files; commit to ``booking_branch`` (the configured base)."""
        github = self.config.github
        return self._repository(github.booking_repo)

    def _repository(self, full_name: str) -> GitHubRepository:
        github = self.config.github
        return GitHubRepository(
            api_url=github.api_url,
            token=github.token,
            full_name=full_name,
            # GitHub asks integrations to space their writes a second apart; the stand-in
            # does not, and a two-file commit is four writes.
            seconds_between_writes=None if self.config.mode == "sandbox" else 1.0,
        )

    def argocd(self) -> ArgoCD:
        argocd = self.config.argocd
        if not argocd.url or not argocd.token:
            raise Rejected(
                "ArgoCD is not configured: set ALFRED_ARGOCD_URL and ALFRED_ARGOCD_TOKEN",
                provider="argocd",
                code="not_configured",
            )
        return ArgoCD(argocd.url, argocd.token, verify=argocd.verify_tls, project=argocd.project)
