"""NeMo Gym's own rollout collection (nemo-gym 0.4.0, `make nemo-gym`'s Python 3.13 root) against rubricd's gateway.

    NUM_REPEATS=2 nemo_gym_collect.py GATEWAY_URL OUT_DIR < rows.jsonl      (rows as NeMo Gym's datasets hold them)

Serves a scripted policy (a Responses-API model server) and two of NeMo Gym's own SimpleAgents: `text_agent`,
whose resources server is the gateway itself, and `tool_agent`, whose resources server is a calculator that
serves the `calc` tool and forwards `/verify` to the gateway (what a launcher that starts every server it names
needs). Then `RolloutCollectionHelper.run_from_config` collects every row (NUM_REPEATS each), and the script
writes OUT_DIR/collected.json: what NeMo Gym kept (its results, its failures file and its aggregate metrics), each
read into NeMo Gym's own types, and the text agent's results as NeMo Gym sends them to `/aggregate_metrics`,
described both by the gateway and by NeMo Gym's own default (`compute_aggregate_metrics`).
"""

import asyncio
import collections
import json
import multiprocessing
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

GATEWAY, OUT = sys.argv[1], Path(sys.argv[2])
NUM_REPEATS = int(os.environ["NUM_REPEATS"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


host, port = GATEWAY.removeprefix("http://").split(":")
PORTS = {name: free_port() for name in ("head", "model", "calc", "text_agent", "tool_agent")}


def answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def agent(name: str, resources: str) -> dict[str, object]:
    ref = {"type": "resources_servers", "name": resources}
    model = {"type": "responses_api_models", "name": "policy_model"}
    server = {"host": "127.0.0.1", "port": PORTS[name], "entrypoint": "app.py", "resources_server": ref}
    return {"responses_api_agents": {"simple_agent": {**server, "model_server": model}}}


CONFIG = {
    "head_server": {"host": "127.0.0.1", "port": PORTS["head"]},
    "policy_model": {"responses_api_models": {"scripted": {"host": "127.0.0.1", "port": PORTS["model"]}}},
    "rubricd": {"resources_servers": {"rubricd": {"host": host, "port": int(port), "entrypoint": "app.py"}}},
    "calc": {"resources_servers": {"calc": {"host": "127.0.0.1", "port": PORTS["calc"], "entrypoint": "app.py"}}},
    "text_agent": agent("text_agent", "rubricd"),
    "tool_agent": agent("tool_agent", "calc"),
}
os.environ["NEMO_GYM_CONFIG_DICT"] = json.dumps(CONFIG)  # what NeMo Gym's servers read their global config from

import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from nemo_gym.base_resources_server import (  # noqa: E402
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.config_types import AggregateMetrics, BaseServerConfig  # noqa: E402
from nemo_gym.reward_profile import compute_aggregate_metrics  # noqa: E402
from nemo_gym.rollout_collection import RolloutCollectionConfig, RolloutCollectionHelper  # noqa: E402
from nemo_gym.server_utils import HeadServer, ServerClient, get_response_json, raise_for_status, request  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from pydantic import BaseModel, ConfigDict  # noqa: E402
from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig  # noqa: E402


class VerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow")


class VerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow")


class CalcArguments(BaseModel):
    expression: str


class Calc(SimpleResourcesServer):
    """A resources server of tools, as NeMo Gym's environments are, whose verifier is rubricd."""

    config: BaseResourcesServerConfig

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/calc")(self.calc)
        return app

    async def calc(self, body: CalcArguments) -> dict[str, str]:
        a, b = body.expression.split("*")
        return {"result": str(int(a) * int(b))}

    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        answer = await request(method="POST", url=f"{GATEWAY}/verify", json=body.model_dump(mode="json"))
        await raise_for_status(answer)
        return VerifyResponse.model_validate(await get_response_json(answer))


def message(text: str) -> dict[str, object]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": content}


def scripted_policy() -> FastAPI:
    """The policy: answers a prompt right, then wrong, in turn; where the calculator is offered, asks it first and
    answers what it says, in two words in turn."""
    app, asked = FastAPI(), collections.Counter[str]()

    @app.post("/v1/responses")
    async def responses(body: dict) -> dict[str, object]:
        items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        prompt = next(str(i["content"]) for i in items if i.get("role") == "user")
        results = [i["output"] for i in items if i.get("type") == "function_call_output"]
        if body.get("tools") and not results:
            arguments = json.dumps({"expression": "17*3"})
            output = [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calc",
                       "arguments": arguments, "status": "completed"}]  # fmt: skip
        elif results:
            asked[prompt] += 1
            result = json.loads(results[0])["result"]
            output = [message(f"The calculator says {result}." if asked[prompt] % 2 else f"It is {result}.")]
        else:
            asked[prompt] += 1
            output = [message("It is 4." if asked[prompt] % 2 else "It is 5.")]
        usage = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
        return {"id": "resp_1", "created_at": 0, "model": "scripted", "object": "response", "output": output,
                "parallel_tool_calls": False, "tool_choice": "auto", "tools": body.get("tools") or [], "usage": usage}  # fmt: skip

    return app


def serve() -> None:
    """Each server in a process of its own (NeMo Gym's HTTP session is one per process)."""
    client = ServerClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=PORTS["head"]),
        global_config_dict=OmegaConf.create(CONFIG),
    )
    agents = {}
    for name in ("text_agent", "tool_agent"):
        config = SimpleAgentConfig.model_validate(
            {**CONFIG[name]["responses_api_agents"]["simple_agent"], "name": name}
        )
        agents[name] = SimpleAgent(config=config, server_client=client)
    calc = Calc(
        config=BaseResourcesServerConfig(host="127.0.0.1", port=PORTS["calc"], entrypoint="app.py", name="calc"),
        server_client=client,
    )
    apps = {
        "head": HeadServer(config=BaseServerConfig(host="127.0.0.1", port=PORTS["head"])).setup_webserver(),
        "model": scripted_policy(),
        "calc": calc.setup_webserver(),
        **{name: a.setup_webserver() for name, a in agents.items()},
    }
    for name, a in agents.items():
        a.setup_exception_middleware(apps[name])
    fork = multiprocessing.get_context("fork")
    for name, app in apps.items():
        kwargs = {"host": "127.0.0.1", "port": PORTS[name], "log_level": "warning"}
        fork.Process(target=uvicorn.run, args=(app,), kwargs=kwargs, daemon=True).start()
    for name in apps:
        deadline = time.monotonic() + 60
        while not answers(PORTS[name]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not start")
            time.sleep(0.1)


async def collect() -> dict[str, object]:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "rows.jsonl").write_text(sys.stdin.read())
    config = RolloutCollectionConfig(
        input_jsonl_fpath=str(OUT / "rows.jsonl"),
        output_jsonl_fpath=str(OUT / "rollouts.jsonl"),
        num_repeats=NUM_REPEATS,
        upload_rollouts_to_wandb=False,
    )
    await RolloutCollectionHelper().run_from_config(config)
    metrics = json.loads((OUT / "rollouts_aggregate_metrics.json").read_text())
    kept, failed = verified(OUT / "rollouts.jsonl"), verified(OUT / "rollouts_failures.jsonl")
    return {
        "kept": kept,
        "failed": failed,
        "metrics": {m["agent_ref"]["name"]: AggregateMetrics.model_validate(m).model_dump() for m in metrics},
        "described": await described([r for r in kept + failed if r["agent_ref"]["name"] == "text_agent"]),
    }


async def described(results: list[dict[str, Any]]) -> dict[str, object]:
    """The results stripped as NeMo Gym's collection strips them for `/aggregate_metrics`, described by the
    gateway and by NeMo Gym's default."""
    stripped = []
    for r in results:
        entry = {k: v for k, v in r.items() if k not in ("response", "responses_create_params")}
        usage = (r.get("response") or {}).get("usage")
        stripped.append(entry | ({"response": {"usage": usage}} if usage else {}))
    answer = await request(method="POST", url=f"{GATEWAY}/aggregate_metrics", json={"verify_responses": stripped})
    await raise_for_status(answer)
    return {"gateway": await get_response_json(answer), "nemo_gym": compute_aggregate_metrics(stripped).model_dump()}


def verified(path: Path) -> list[dict[str, object]]:
    """The results NeMo Gym wrote to `path` (none if it wrote no such file), read into its own type."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [VerifyResponse.model_validate_json(line).model_dump(mode="json") for line in lines]


if __name__ == "__main__":
    serve()
    (OUT / "collected.json").write_text(json.dumps(asyncio.run(collect())))  # NeMo Gym prints on stdout
