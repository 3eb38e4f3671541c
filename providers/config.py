"""Where the providers are: one immutable configuration read from the environment.

Pure (no Django): the settings module, the sandbox launcher and the contract suite all build
it from a mapping. AWS follows boto3's own environment (``AWS_REGION``/``AWS_DEFAULT_REGION``,
credentials chain, ``AWS_ENDPOINT_URL``, ``AWS_MAX_ATTEMPTS``), so pointing Alfred at real AWS
is the ordinary AWS setup; GitHub and ArgoCD take ``ALFRED_GITHUB_*`` and ``ALFRED_ARGOCD_*``.

``make run`` starts the stand-ins (``providers/sandbox``) and sets these variables to them
unless ``ALFRED_PROVIDERS=external``; see the README ("Providers").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_REGION = "us-east-1"


def _digest(secret: str) -> str:
    """A name for a credential that names no secret (a budget's key, a log line)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16] if secret else ""


@dataclass(frozen=True)
class AwsConfig:
    region: str
    endpoint_url: str | None  # None: AWS itself (boto3 also honours per-service overrides)
    max_attempts: int  # botocore standard retry mode, for calls safe to repeat
    fleet_tag: str  # the tag whose value names a Lambda fleet
    # Static keys when the mapping names them (the sandbox does); None: boto3's credentials
    # chain (instance role, SSO, profile...). Kept out of repr.
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    # Whose rate budget its requests draw from (providers.budgets): the account's id when
    # given (ALFRED_AWS_ACCOUNT_ID), so every credential of one account shares it; else the
    # access key's id; else one budget for the credentials chain's account.
    account: str = field(default="default", repr=False)


@dataclass(frozen=True)
class GitHubConfig:
    api_url: str  # https://api.github.com, or https://<host>/api/v3 for GitHub Enterprise
    token: str | None
    helm_repo: str  # owner/name of the Helm values (nginx hosts, Mystique Kirby routing)
    helm_branch: str
    booking_repo: str  # owner/name of the nginx booking files (Calipso, next-deimos)
    booking_branch: str  # the configured base branch


@dataclass(frozen=True)
class ArgoCDConfig:
    url: str | None
    token: str | None
    verify_tls: bool
    project: str | None  # ArgoCD answers a missing app with 403 unless the project is named
    nginx_apps: tuple[str, ...]  # applications that serve the nginx hosts values
    kirby_apps: tuple[str, ...]  # applications that serve the Mystique Kirby routing values


@dataclass(frozen=True)
class ProviderConfig:
    mode: str  # "sandbox" (make run's stand-ins) or "external"
    aws: AwsConfig
    github: GitHubConfig
    argocd: ArgoCDConfig

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProviderConfig:
        def get(name: str, default: str) -> str:
            return (env.get(name) or default).strip()

        def names(name: str, default: str) -> tuple[str, ...]:
            return tuple(part.strip() for part in get(name, default).split(",") if part.strip())

        return cls(
            mode=get("ALFRED_PROVIDERS", "external"),
            aws=AwsConfig(
                region=get("AWS_REGION", get("AWS_DEFAULT_REGION", DEFAULT_REGION)),
                endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
                max_attempts=int(get("AWS_MAX_ATTEMPTS", "5")),
                fleet_tag=get("ALFRED_LAMBDA_FLEET_TAG", "alfred:fleet"),
                access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
                secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
                session_token=env.get("AWS_SESSION_TOKEN") or None,
                account=get("ALFRED_AWS_ACCOUNT_ID", "")
                or _digest(get("AWS_ACCESS_KEY_ID", ""))
                or "default",
            ),
            github=GitHubConfig(
                api_url=get("ALFRED_GITHUB_API_URL", "https://api.github.com").rstrip("/"),
                token=env.get("ALFRED_GITHUB_TOKEN") or None,
                helm_repo=get("ALFRED_HELM_REPO", "platform/helm-values"),
                helm_branch=get("ALFRED_HELM_BRANCH", "main"),
                booking_repo=get("ALFRED_BOOKING_REPO", "platform/nginx-booking"),
                booking_branch=get("ALFRED_BOOKING_BRANCH", "main"),
            ),
            argocd=ArgoCDConfig(
                url=(env.get("ALFRED_ARGOCD_URL") or "").rstrip("/") or None,
                token=env.get("ALFRED_ARGOCD_TOKEN") or None,
                verify_tls=get("ALFRED_ARGOCD_VERIFY_TLS", "1").lower()
                not in {"0", "false", "no", "off"},
                project=env.get("ALFRED_ARGOCD_PROJECT") or None,
                nginx_apps=names("ALFRED_ARGOCD_NGINX_APPS", "nginx-ingress"),
                kirby_apps=names("ALFRED_ARGOCD_KIRBY_APPS", "mystique"),
            ),
        )
