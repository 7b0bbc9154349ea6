"""Connecting to a Ray head with token authentication (specsim/study/executors.py): the token is
sent to an explicit --address when one is available, and a refusal is one error naming --address
and what to set. No cluster is started: Ray itself is replaced where a connection would be made."""

import os

import pytest

from specsim.errors import SpecError
from specsim.study import executors


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in (executors.RAY_AUTH_MODE, executors.RAY_AUTH_TOKEN, executors.RAY_AUTH_TOKEN_PATH):
        monkeypatch.setenv(var, "")     # recorded, so what the code under test sets is undone after
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_token_on_disk_turns_token_mode_on_for_an_explicit_address(clean_env, monkeypatch):
    executors.use_ray_token_auth()
    assert executors.RAY_AUTH_MODE not in os.environ and executors.ray_token_source() is None
    (clean_env / ".ray").mkdir()
    (clean_env / ".ray" / "auth_token").write_text("t" * 64)
    assert executors.ray_token_source() == str(clean_env / ".ray" / "auth_token")
    executors.use_ray_token_auth()
    assert os.environ[executors.RAY_AUTH_MODE] == "token"
    monkeypatch.setenv(executors.RAY_AUTH_MODE, "disabled")            # an explicit mode is respected
    executors.use_ray_token_auth()
    assert os.environ[executors.RAY_AUTH_MODE] == "disabled"
    monkeypatch.setenv(executors.RAY_AUTH_TOKEN, "abc")
    assert executors.ray_token_source() == executors.RAY_AUTH_TOKEN


def test_a_refusing_cluster_is_one_error_naming_address_and_what_to_set(clean_env):
    class RefusingRay:
        def is_initialized(self):
            return False

        def init(self, **kw):
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")

    with pytest.raises(SpecError) as e:
        executors._run_ray(RefusingRay(), [], lambda *a: None, 1, "10.0.0.1:6379")
    err = e.value
    assert err.field == "--address" and err.value == "10.0.0.1:6379"
    for needle in ("Failed to connect to Ray cluster", "RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN",
                   "ray get-auth-token", "here RAY_AUTH_MODE is unset and no token is available"):
        assert needle in err.allowed
