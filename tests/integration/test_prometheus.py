"""The Grafana dashboard and the alert rules, proved against a real Prometheus.

A running stack (a render worker, a CPU worker, the gRPC front, the REST API and Flower, each
with its metrics endpoint) is scraped every second by Debian's ``prometheus`` through a
file-SD target list like the one ``voicelane up`` writes, with the alert rules loaded. While a
job, gRPC and WebSocket streams, a spoken chat (against the stand-in Ollama server), an OpenAI
speech request and a refused call run, every PromQL
expression of ``deploy/grafana/dashboards/voicelane.json`` and the query part of every rule
in ``deploy/prometheus/alerts.yml`` must return data.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import websockets
import yaml

from tests.support.stack import ACME_KEY, ROOT, Stack, wait_for
from voicelane.api.ollama_standin import OllamaStandin, StandinConfig
from voicelane.api.stack import _target, _write_targets
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "voicelane.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
METRICS_TOKEN = "metrics-token-for-tests-0123456789"
FLOWER_LOGIN = ("watcher", "flower-pass")
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
TEXT = "The weather is nice today. We will walk along the river."
COMPARISON = re.compile(r"\s(?:>|<|==|!=|>=|<=)\s+[-\d.e+]+\s*$")


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def alert_queries() -> list[tuple[str, str]]:
    """(alert, its query without the threshold comparison)."""
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    out = []
    for rule in rules:
        query, replaced = COMPARISON.subn("", rule["expr"])
        assert replaced == 1, f"{rule['alert']}: expected '<query> <op> <number>'"
        out.append((rule["alert"], query))
    return out


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (make test installs it)")
        pytest.skip("prometheus is not installed (make install-prometheus)")
    return binary


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    binary = prometheus_binary()
    directory = tmp_path_factory.mktemp("prometheus")
    redis_server = RedisServer(directory / "redis").start()
    standin = OllamaStandin(StandinConfig(tokens_per_s=0)).start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={
            "VOICELANE_METRICS_TOKEN": METRICS_TOKEN,
            "OLLAMA_HOST": standin.url,
            "VOICELANE_LLM__MODEL": "qwen2.5:7b",
        },
    )
    process: subprocess.Popen[bytes] | None = None
    try:
        ports = stack.metered_processes()
        stack.api()
        stack.flower()
        stack.wait_realtime_workers()
        targets = directory / "targets.json"
        _write_targets(targets, [_target(f"127.0.0.1:{p}", n) for n, p in ports.items()])
        (directory / "token").write_text(METRICS_TOKEN)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": "voicelane", "file_sd_configs": [{"files": [str(targets)]}]},
                {
                    "job_name": "voicelane-api",
                    "authorization": {"credentials_file": str(directory / "token")},
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{stack.api_port}"], "labels": {"process": "api"}}
                    ],
                },
                {
                    "job_name": "flower",
                    "basic_auth": {"username": FLOWER_LOGIN[0], "password": FLOWER_LOGIN[1]},
                    "static_configs": [{"targets": [f"127.0.0.1:{stack.flower_port}"]}],
                },
            ],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        log = (directory / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"

        def all_up() -> bool:
            if process is not None and process.poll() is not None:
                raise AssertionError((directory / "prometheus.log").read_text()[-3000:])
            try:
                result = query(url, "up")
            except httpx.HTTPError:
                return False
            return len(result) == 5 and all(r["value"][1] == "1" for r in result)

        wait_for(all_up, 60, "Prometheus to scrape all five processes")
        yield stack, url
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)
        stack.stop()
        redis_server.stop()
        standin.stop()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()  # 503 "Service Unavailable" while Prometheus starts
    body = response.json()
    assert body["status"] == "success", f"{promql}: {body}"
    return list(body["data"]["result"])


async def traffic(stack: Stack) -> None:
    """What a dashboard shows: a job, live streams on every front, a chat, a refused call."""
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        chat = pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="Hello there.")])
        async for _response in stub.Chat(chat, metadata=METADATA, timeout=60):
            pass
        for _ in range(2):
            request = pb.SynthesizeRequest(text=TEXT)
            async for _chunk in stub.Synthesize(request, metadata=METADATA, timeout=60):
                pass
        with pytest.raises(grpc.aio.AioRpcError):
            bad = pb.SynthesizeRequest(text=TEXT, voice="klingon")
            async for _chunk in stub.Synthesize(bad, metadata=METADATA, timeout=60):
                pass
    url = f"ws://127.0.0.1:{stack.api_port}/v1/stream"
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with websockets.connect(url, additional_headers=headers) as socket:
        await socket.send(json.dumps({"text": TEXT}))
        async for _message in socket:
            pass


def test_every_dashboard_and_alert_query_returns_data(prometheus: tuple[Stack, str]) -> None:
    stack, url = prometheus
    with stack.client() as client:
        job_id = client.post("/v1/jobs", json={"text": TEXT * 30}).json()["id"]
        asyncio.run(traffic(stack))
        speech = client.post("/v1/audio/speech", json={"input": TEXT, "response_format": "wav"})
        assert speech.status_code == 200
        wait_for(lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "done", 120, "job")
    queries = [(f"dashboard: {q}", q) for q in dashboard_queries()]
    queries += [(f"alert {name}: {q}", q) for name, q in alert_queries()]

    def missing() -> list[str]:
        return [label for label, q in queries if not query(url, q)]

    # Rates need two scrapes after the events; a few seconds at 1 s per scrape.
    try:
        wait_for(lambda: not missing(), 60, "every query to return data")
    except AssertionError:
        raise AssertionError("no data:\n" + "\n".join(missing())) from None
    rules = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = {rule["name"] for group in rules for rule in group["rules"]}
    assert loaded == {name for name, _ in alert_queries()}
    assert all(rule["health"] == "ok" for group in rules for rule in group["rules"])


def test_the_alert_rules_pass_promtool() -> None:
    prometheus_binary()
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool comes with Debian's prometheus package"
    done = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_targets_file_names_each_process(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    _write_targets(path, [_target("127.0.0.1:9101", "grpc")])
    assert json.loads(path.read_text()) == [
        {"targets": ["127.0.0.1:9101"], "labels": {"job": "voicelane", "process": "grpc"}}
    ]
