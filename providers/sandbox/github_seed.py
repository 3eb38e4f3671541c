"""The demo content of the GitHub stand-in: two platform repositories as a team would keep them.

``platform/helm-values`` holds the Helm values the routing stage edits (nginx hosts, Mystique
Kirby routing); ``platform/nginx-booking`` holds the nginx booking snippets the booking stage
edits (Calipso CORS map, next-deimos server names). The formats are the ones
:mod:`providers.gitops.editors` documents; the contract and unit tests use these files as their
realistic starting point.
"""

from __future__ import annotations

from providers.gitops import concerns
from providers.gitops.concerns import (
    CALIPSO_CORS_PATH,
    DEIMOS_SERVER_NAMES_PATH,
    MYSTIQUE_VALUES_PATH,
    NGINX_VALUES_PATH,
)
from providers.gitops.messages import add_message

HELM_REPO = "platform/helm-values"
BOOKING_REPO = "platform/nginx-booking"
BRANCH = "main"

HELM_README = """\
# platform/helm-values

Helm values for the edge of the platform, deployed by ArgoCD:

| Chart | Values | ArgoCD application |
|---|---|---|
| `charts/nginx` | `charts/nginx/values.yaml` | `nginx-ingress` |
| `charts/mystique` | `charts/mystique/values.yaml` | `mystique` |

Alfred (the infrastructure control plane) adds domains here: `feat(nginx-hosts): add <domain>`
appends the domain and its `www.` name to `server.hosts`; `feat(kirby-routing): add <domain>`
routes them to Kirby when the domain is onboarded with Kirby mode enabled. Each commit body
lists the exact entries it owns (`Alfred-Entry:` trailers); a rollback removes only those.

Edit by hand as usual; keep one hostname per list item and the two-space indentation.
"""

NGINX_CHART = """\
apiVersion: v2
name: nginx
description: The nginx edge in front of the storefront, the API and Kirby.
type: application
version: 3.8.1
appVersion: "1.27.4"
"""

NGINX_VALUES = """\
# Helm values for the nginx edge (chart: charts/nginx, ArgoCD application: nginx-ingress).
replicaCount: 3

image:
  repository: ghcr.io/acme-platform/nginx-edge
  tag: "1.27.4"
  pullPolicy: IfNotPresent

server:
  # Every hostname the edge accepts. Alfred appends a domain and its www. name
  # (feat(nginx-hosts) commits) and removes only the entries its commits own.
  hosts:
    - acme.com
    - www.acme.com
    - shop.acme.com
    - www.shop.acme.com
    - status.acme.io  # statuspage, no www
  clientMaxBodySize: 16m
  proxyReadTimeout: 60s

resources:
  requests:
    cpu: 250m
    memory: 256Mi
  limits:
    memory: 512Mi
"""

MYSTIQUE_CHART = """\
apiVersion: v2
name: mystique
description: Mystique, the request router between the storefront and Kirby (the CMS).
type: application
version: 1.12.0
appVersion: "2.4.2"
"""

MYSTIQUE_VALUES = """\
# Helm values for Mystique (chart: charts/mystique, ArgoCD application: mystique).
mystique:
  replicaCount: 2
  defaultUpstream: http://storefront.shop.svc.cluster.local:3000
  kirby:
    upstream: http://kirby.cms.svc.cluster.local:8080
    # Hosts whose requests go to Kirby instead of the storefront. Alfred adds a domain here
    # when it is onboarded with Kirby mode enabled (feat(kirby-routing) commits).
    hosts:
      - magazine.acme.com
      - www.magazine.acme.com
  timeouts:
    connect: 2s
    read: 30s
"""

BOOKING_README = """\
# platform/nginx-booking

nginx snippets for the booking services, included by their server blocks:

- `calipso/cors-origins.conf`: the browser origins the Calipso API answers with CORS
  credentials (`map $http_origin $cors_allow_origin`).
- `next-deimos/server-names.conf`: the hostnames the next-deimos server block answers for.

Alfred books a domain in both files in one `feat(nginx-booking): add <domain>` commit and
lists the entries it owns in the commit body. The production nginx deployment that picks the
files up is done by the platform team.
"""

CALIPSO_CORS = """\
# Calipso API: browser origins allowed to call it with credentials.
# Included in the http block; the server echoes $cors_allow_origin as
# Access-Control-Allow-Origin. One origin per line. Entries of the form
# "~^https://(www\\.)?<domain>$" are booked by Alfred (feat(nginx-booking) commits).
map $http_origin $cors_allow_origin {
    default "";
    "~^https://(www\\.)?acme\\.com$" $http_origin;
    "~^https://(www\\.)?shop\\.acme\\.com$" $http_origin;
    # partner portal, agreed in OPS-1841
    "https://portal.partner-travel.example" $http_origin;
}
"""

DEIMOS_SERVER_NAMES = """\
# next-deimos: the hostnames its server block answers for.
# Included from sites/next-deimos.conf inside the server block. One name per line;
# a lone ';' ends the list. Alfred books a domain and its www. name here
# (feat(nginx-booking) commits).
server_name
    acme.com
    www.acme.com
    shop.acme.com
    www.shop.acme.com
    ;
"""

HELM_FILES: dict[str, str] = {
    "README.md": HELM_README,
    "charts/nginx/Chart.yaml": NGINX_CHART,
    NGINX_VALUES_PATH: NGINX_VALUES,
    "charts/mystique/Chart.yaml": MYSTIQUE_CHART,
    MYSTIQUE_VALUES_PATH: MYSTIQUE_VALUES,
}

BOOKING_FILES: dict[str, str] = {
    "README.md": BOOKING_README,
    CALIPSO_CORS_PATH: CALIPSO_CORS,
    DEIMOS_SERVER_NAMES_PATH: DEIMOS_SERVER_NAMES,
}


def demo_history() -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Per repository, its commits oldest first: (message, files after the commit).

    The shop.acme.com entries arrive in Alfred commits after a hand-made initial layout, so the
    demo log shows what Alfred's commits look like (and their trailers parse)."""
    history: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for repo, files, concern in (
        (HELM_REPO, HELM_FILES, concerns.NGINX_HOSTS),
        (BOOKING_REPO, BOOKING_FILES, concerns.NGINX_BOOKING),
    ):
        domain = "shop.acme.com"
        owned = concern.entries_for(domain)
        initial = dict(files)
        for path, editor in concern.files:
            initial[path] = editor.remove(files[path], [e.entry for e in owned if e.path == path])
        message = add_message(
            concern.scope, domain, owned, operation=f"demo-seed:add-domain:{domain}"
        )
        history[repo] = [
            ("chore: initial platform layout\n", initial),
            (message.render(), dict(files)),
        ]
    return history
