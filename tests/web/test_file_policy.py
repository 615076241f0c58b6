"""What the web server reads: catalog names and uploaded content, files only under its data directory, requests
only for its own host name (docs/web.md, "What the server reads")."""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("fastapi", reason="the web app needs fastapi (pip install madmax[web])")

from fastapi.testclient import TestClient

from madmax.config.checks import file_allowed, files_under, readable_file
from madmax.config.loaders import find_in_catalog
from madmax.errors import ConfigError
from madmax.hardware.profile import catalog_path
from madmax.web import Settings, create_app

SMALL = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 64, "strategy": "tp=2"}
SERVING = {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 1, "task": "inference", "mode": "rate"}
OUTSIDE = "this server reads files only under its data directory"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("served")
    with TestClient(create_app(Settings(data_dir=data, workers=1))) as client:
        yield client, data


@pytest.mark.parametrize("field", ["model", "system"])
def test_a_server_path_outside_the_data_directory_is_not_read(served, tmp_path, field):
    client, _ = served
    real = tmp_path / "secret.yaml"  # exists, but outside the data directory: the same answer as a missing file
    real.write_text(yaml.safe_dump(dict(find_in_catalog(f"{field}s", SMALL[field]))))
    answers = [client.post("/simulate", json={**SMALL, field: str(p)}) for p in (real, tmp_path / "missing.yaml")]
    assert [a.status_code for a in answers] == [400, 400]
    first, second = (a.json()["error"] for a in answers)
    assert OUTSIDE in first and first.replace("secret", "missing") == second  # nothing says the file exists


def test_a_device_is_never_read(served):
    client, _ = served
    answer = client.post("/simulate", json={**SERVING, "arrivals": "/dev/zero"})
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("task.arrivals='/dev/zero' is outside this server's data directory")


def test_a_profile_outside_is_refused_and_a_shipped_one_is_read(served):
    client, _ = served
    outside = client.post("/simulate", json={**SMALL, "calibration": "/etc/hostname"})
    assert outside.status_code == 400 and OUTSIDE in outside.json()["error"]
    shipped = client.post("/simulate", json={**SMALL, "calibration": "calibration/h200_profile.yaml"})
    assert shipped.status_code == 200, shipped.json()


def test_files_under_the_data_directory_are_read(served):
    client, data = served
    model = data / "mine.yaml"
    model.write_text(yaml.safe_dump({**dict(find_in_catalog("models", "llama-3-8b")), "name": "mine"}))
    arrivals = data / "arrivals.csv"
    arrivals.write_text("arrival_s,prompt_len,output_len\n0,128,16\n0.1,256,8\n")
    trained = client.post("/simulate", json={**SMALL, "model": str(model)})
    assert trained.status_code == 200 and trained.json()["model"] == "mine"
    served_rows = client.post("/simulate", json={**SERVING, "arrivals": str(arrivals)})
    assert served_rows.status_code == 200, served_rows.json()


def test_a_link_out_of_the_data_directory_is_not_followed(served, tmp_path):
    client, data = served
    target = tmp_path / "elsewhere.yaml"
    target.write_text(yaml.safe_dump(dict(find_in_catalog("models", "llama-3-8b"))))
    link = data / "link.yaml"
    link.symlink_to(target)
    answer = client.post("/simulate", json={**SMALL, "model": str(link)})
    assert answer.status_code == 400 and OUTSIDE in answer.json()["error"]


def test_a_sweep_asks_for_at_most_the_servers_workers(tmp_path):
    with TestClient(create_app(Settings(data_dir=tmp_path, sweep_workers=2))) as client:
        answer = client.post("/sweep", json={"spec": {"name": "w", "models": "llama-3-8b", "systems": "dgx-h100",
                                                      "num_gpus": 8}, "workers": 1_000_000_000})
    assert answer.status_code == 400
    assert answer.json()["error"] == ("workers=1000000000 is more than this server runs for one sweep; allowed: "
                                      "1 to 2")


def test_a_sweeps_stack_file_outside_the_data_directory_is_not_read(served, tmp_path):
    client, _ = served
    stack = tmp_path / "stack.yaml"  # a valid stack file, outside the data directory
    stack.write_text(yaml.safe_dump({"name": "mine", "description": "mine"}))
    spec = {"name": "stacked", "models": "llama-3-8b", "systems": "dgx-h100", "num_gpus": 8,
            "stacks": ["fsdp2", str(stack)]}
    answer = client.post("/sweep", json={"spec": spec})
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("sweep.stacks.1:") and OUTSIDE in answer.json()["error"]


def test_only_the_servers_own_host_names_are_answered(tmp_path):
    app = create_app(Settings(data_dir=tmp_path, allowed_hosts=("127.0.0.1", "localhost", "::1")))
    for url, status in (("http://localhost:8000", 200), ("http://127.0.0.1", 200), ("http://[::1]:8000", 200),
                        ("http://rebound.example:8000", 421)):
        with TestClient(app, base_url=url) as client:
            answer = client.get("/health")
        assert answer.status_code == status, url
    assert answer.json()["error"].startswith("host 'rebound.example:8000' is not this server's")


def test_the_policy_is_scoped_and_checks_regular_files(tmp_path, monkeypatch):
    inside, outside = tmp_path / "in", tmp_path / "out.yaml"
    inside.mkdir()
    (inside / "a.yaml").write_text("x: 1\n")
    outside.write_text("x: 1\n")
    with files_under(inside):
        assert file_allowed(inside / "a.yaml") and not file_allowed(outside)
        assert file_allowed(catalog_path("models.yaml"))  # the installed package's catalog is always read
    assert file_allowed(outside)  # the CLI and the Python API read the user's own files
    with pytest.raises(ConfigError, match=r"^task.arrivals='/dev/zero' is not a regular file"):
        readable_file("/dev/zero", "task.arrivals")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 * 2**20 + 1))
    monkeypatch.setattr("madmax.config.checks.MAX_FILE_BYTES", 2**20)
    with pytest.raises(ConfigError, match=r"big.yaml' is 2 MiB; allowed: at most 1 MiB"):
        readable_file(big, "model")


def test_the_cli_reads_no_device_either():
    from typer.testing import CliRunner

    from madmax.cli import app

    result = CliRunner().invoke(app, ["simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "1", "--task",
                                      "inference", "--mode", "rate", "--arrivals", "/dev/zero"])
    assert result.exit_code == 2 and "task.arrivals='/dev/zero' is not a regular file" in result.output


def test_a_simulation_past_the_servers_limit_is_stopped_and_the_pool_replaced(tmp_path):
    """No simulation answers within a millisecond (a process round trip alone takes longer): it is stopped with
    one sentence, and the server goes on answering."""
    with TestClient(create_app(Settings(data_dir=tmp_path, workers=1, simulate_time_limit_s=1e-3))) as client:
        answer = client.post("/simulate", json=SMALL)
        assert answer.status_code == 400
        assert answer.json()["error"].startswith("the simulation ran past this server's limit of 0.001 s")
        assert client.get("/health").json()["simulate_time_limit_s"] == 1e-3
