"""botocore sessions are shared per process, thread and credentials (building one parses the
service models: ~200 ms, in nearly every step before)."""

from __future__ import annotations

import threading

from providers.aws.clients import shared_session


def test_one_session_per_thread_and_credentials():
    first = shared_session(aws_access_key_id="a", aws_secret_access_key="b")
    again = shared_session(aws_access_key_id="a", aws_secret_access_key="b")
    other_keys = shared_session(aws_access_key_id="c", aws_secret_access_key="d")
    elsewhere: list[object] = []
    thread = threading.Thread(
        target=lambda: elsewhere.append(
            shared_session(aws_access_key_id="a", aws_secret_access_key="b")
        )
    )
    thread.start()
    thread.join()

    assert again is first
    assert other_keys is not first
    assert elsewhere[0] is not first  # a session is not thread-safe: never shared across


def test_a_session_without_keys_follows_the_environment(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    first = shared_session()
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")

    assert shared_session() is not first
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert shared_session() is first
