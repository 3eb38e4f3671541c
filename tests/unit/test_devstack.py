"""The launcher's environment handling (the process itself: tests/integration/test_devstack.py)."""

from __future__ import annotations

from alfred.devstack import with_sandbox


def test_no_aws_setting_of_the_developer_reaches_the_children_in_sandbox_mode():
    # given: a developer shell with a profile, a session token and a per-service endpoint
    developer = {
        "PATH": "/usr/bin",
        "AWS_PROFILE": "production-admin",
        "AWS_SESSION_TOKEN": "real-token",
        "AWS_ENDPOINT_URL_ROUTE53": "https://route53.amazonaws.com",
        "ALFRED_DEBUG": "1",
    }
    sandbox = {"AWS_ENDPOINT_URL": "http://127.0.0.1:8601", "AWS_ACCESS_KEY_ID": "sandbox"}

    # when
    env = with_sandbox(developer, sandbox)

    # then: only the sandbox's AWS settings are left, everything else is kept
    assert {k: v for k, v in env.items() if k.startswith("AWS_")} == sandbox
    assert env["PATH"] == "/usr/bin"
    assert env["ALFRED_DEBUG"] == "1"
