"""The simulator's HTTP app (test/demo tool, not a model): an OpenAI-compatible surface.

Routes: POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models,
GET /health, GET|POST /admin/config, GET /admin/stats, POST /admin/reset.
Everything per request is cheap (an async sleep for latency, one JSON decode,
a few regexes), so one process keeps hundreds of slow requests in flight.
"""

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypedDict

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import BANNER, answers, embeddings, judging, pairwise, updates
from .faults import FaultPlan, SimConfig, directive

MODEL = "rubricd-simulator"
CONFIG_ENV = "RUBRICD_SIM_CONFIG"  # the resolved config, for the workers of serve_workers
FLIP_SEED = 20  # the flip sequence's seed: the same verdicts flip on every run of the same requests in order
MALFORMED = "Simulated malformed output: this is prose, not JSON. Sorry about that."
INVALID = '{"unexpected": "simulated output that does not match the schema"}'
_MAX_PREFIXES = 4096
log = logging.getLogger("rubricd.simulator")


class Simulator:
    """One simulator's state: its config, fault plan, prefix cache and counters."""

    def __init__(self, config: SimConfig) -> None:
        self.initial = config
        self.config = config
        self.faults = FaultPlan()
        self.prefixes: OrderedDict[bytes, float] = OrderedDict()
        self.outcomes: Counter[str] = Counter()
        self.schemas: Counter[str] = Counter()
        self.embeddings = self.in_flight = self.max_in_flight = 0
        self.ids = itertools.count(1)
        self.flips = random.Random(FLIP_SEED)
        self.harmed: set[str] = set()  # the runs whose harmful proposal was made (the fault `harmful`)
        self._slots: tuple[int, asyncio.Semaphore] | None = None

    def reset(self) -> None:
        """Back to the startup config, with no history (for tests and benchmarks)."""
        self.config = self.initial
        self.faults.reset()
        self.prefixes.clear()
        self.outcomes.clear()
        self.schemas.clear()
        self.embeddings, self.max_in_flight = 0, self.in_flight
        self.flips = random.Random(FLIP_SEED)
        self.harmed.clear()

    def cached_tokens(self, system: str) -> int:
        """Simulated prefix caching: a system message seen within the TTL is cached."""
        if not system:
            return 0
        key, now = hashlib.blake2b(system.encode(), digest_size=16).digest(), time.monotonic()
        seen = self.prefixes.pop(key, None)
        self.prefixes[key] = now
        if len(self.prefixes) > _MAX_PREFIXES:
            self.prefixes.popitem(last=False)
        return tokens(system) if seen is not None and now - seen <= self.config.cache_ttl_s else 0

    def slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """One of the `slots` requests served at once (the rest queue, first come first served), as a model
        server's parallel slots; no limit without `slots`."""
        if self.config.slots is None:
            return contextlib.nullcontext()
        if self._slots is None or self._slots[0] != self.config.slots:
            self._slots = (self.config.slots, asyncio.Semaphore(self.config.slots))
        return self._slots[1]

    def stats(self) -> dict[str, Any]:
        return {
            "requests": sum(self.outcomes.values()),
            "outcomes": dict(self.outcomes),
            "schemas": dict(self.schemas),
            "embeddings": self.embeddings,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
        }


def tokens(text: str) -> int:
    """A rough token count (4 characters a token), enough for usage accounting."""
    return len(text) // 4 + 1


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json")


def _error(status: int, message: str, request: Request | None = None, retry_after_s: float = 0.0) -> Response:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if status == 401 and request is not None:
        # Echo the key the way providers do (here in full), so tests prove callers redact it.
        message = f"Incorrect API key provided: {request.headers.get('authorization', '').removeprefix('Bearer ')}"
    reply = _json({"error": {"message": message, "type": kind, "param": None, "code": str(status)}}, status)
    if retry_after_s and status in (429, 503):
        reply.headers["retry-after"] = f"{retry_after_s:g}"
    return reply


async def _body(request: Request) -> dict[str, Any]:
    body = msgspec.json.decode(await request.body())
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body


async def _client_left(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _wait(request: Request, seconds: float) -> bool:
    """Sleep `seconds` unless the client goes away first; True if it stayed."""
    try:
        await asyncio.wait_for(_client_left(request), seconds)
        return False
    except TimeoutError:
        return True


async def chat_completions(request: Request) -> Response:
    sim: Simulator = request.app.state.sim
    try:
        body = await _body(request)
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        d = directive(request.headers, [answers.text_of(m) for m in messages])
    except (ValueError, msgspec.DecodeError) as e:
        return _error(400, str(e))
    if refused := answers.refusal(body, sim.config.dialects):
        sim.outcomes["refused"] += 1
        return _error(500, refused)
    system = "\n".join(answers.text_of(m) for m in messages if m.get("role") in ("system", "developer"))
    schema, _ = answers.requested_schema(body, system, sim.config.dialects)
    fault = sim.faults.decide(sim.config, d, hashlib.blake2b(msgspec.json.encode(messages)).digest(), schema)
    async with sim.slot():
        return await _serve(request, sim, body, messages, d, fault)


async def _serve(
    request: Request, sim: "Simulator", body: dict[str, Any], messages: list[dict[str, Any]], d: Any, fault: str | None
) -> Response:
    sim.in_flight += 1
    sim.max_in_flight = max(sim.max_in_flight, sim.in_flight)
    try:
        delay = d.latency_ms / 1000 if d.latency_ms is not None else sim.config.latency_s()
        # A `timeout` holds the request until the client gives up, as a hung endpoint does.
        stayed = await _wait(request, delay) if delay else True
        if stayed and fault == "timeout":
            stayed = await _wait(request, sim.config.timeout_hold_s)
        if not stayed and fault != "timeout":
            sim.outcomes["client_left"] += 1
            return Response(status_code=499)  # nobody to answer
        sim.outcomes[fault or "ok"] += 1
        if fault == "timeout" or (fault and fault.isdigit()):
            retry_after_s = d.retry_after if d.retry_after is not None else sim.config.retry_after_s
            status = 504 if fault == "timeout" else int(fault)
            return _error(status, f"simulated failure: {fault}", request, retry_after_s)
        return _json(_completion(sim, body, messages, fault))
    finally:
        sim.in_flight -= 1


def _harmed(content: str, sim: Simulator, harm: str, user: str) -> str:
    """The run's first proposal that adds a rubric made harmful (`harm`), once per run; the others as they are."""
    summary = judging.block(user, "step_summary") or {}
    run = str(summary.get("run_id") if isinstance(summary, dict) else "")
    if run in sim.harmed or (made := updates.harmful(content, harm)) is None:
        return content
    sim.harmed.add(run)
    sim.outcomes[f"harmful_{harm}"] += 1
    return made


def _completion(sim: Simulator, body: dict[str, Any], messages: list[dict[str, Any]], fault: str | None) -> dict:
    content, schema = answers.answer(body, sim.config.dialects)
    sim.schemas[schema] += 1
    if schema == "JudgeVerdict" and sim.config.flip_rate:
        content = _flipped(content, sim)
    if schema == "UpdateProposal" and sim.config.churn:
        content = updates.churned(content, answers.text_of(messages[-1]))
    if schema == "UpdateProposal" and sim.config.harmful:
        content = _harmed(content, sim, sim.config.harmful, answers.text_of(messages[-1]))
    if schema == "PairwiseVerdict" and (right := pairwise.accuracy(str(body.get("model") or ""))) is not None:
        content = pairwise.erring(content, right, str(body.get("model")) + json.dumps(messages))
    finish = "stop"
    if fault == "malformed":
        content = MALFORMED
    elif fault == "invalid":
        content = INVALID
    elif fault == "truncated":
        content, finish = content[: len(content) // 2], "length"
    system = answers.text_of(messages[0]) if messages and messages[0].get("role") == "system" else ""
    prompt = sum(tokens(answers.text_of(m)) + 4 for m in messages)
    completion = tokens(content)
    return {
        "id": f"chatcmpl-sim-{next(sim.ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or MODEL,
        "system_fingerprint": MODEL,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "logprobs": None,
                "message": {"role": "assistant", "content": content, "refusal": None},
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sim.cached_tokens(system)},
        },
    }


def _flipped(content: str, sim: Simulator) -> str:
    """A judge verdict with each `met` inverted at `flip_rate` (a turn verdict's met and unmet turns swapped; its
    explanation says so)."""
    verdicts = json.loads(content)
    for verdict in verdicts.values():
        if sim.flips.random() < sim.config.flip_rate:
            if "met" in verdict:
                verdict["met"] = not verdict["met"]
            else:
                verdict["met_turns"], verdict["unmet_turns"] = verdict["unmet_turns"], verdict["met_turns"]
            verdict["explanation"] += " [flipped]"
            sim.outcomes["flipped_verdicts"] += 1
    return json.dumps(verdicts)


async def create_embeddings(request: Request) -> Response:
    sim: Simulator = request.app.state.sim
    try:
        body = await _body(request)
    except (ValueError, msgspec.DecodeError) as e:
        return _error(400, str(e))
    texts = body.get("input", "")
    texts = [texts] if isinstance(texts, str) else [t if isinstance(t, str) else str(t) for t in texts]
    dims = min(max(int(body.get("dimensions") or embeddings.DIMS), 1), 4096)
    as_b64 = body.get("encoding_format") == "base64"
    data = []
    for i, text in enumerate(texts):
        vec = embeddings.embed(text, dims)
        data.append({"object": "embedding", "index": i, "embedding": embeddings.as_base64(vec) if as_b64 else vec})
    sim.embeddings += len(texts)
    used = sum(tokens(t) for t in texts)
    return _json(
        {
            "object": "list",
            "data": data,
            "model": body.get("model") or MODEL,
            "usage": {"prompt_tokens": used, "total_tokens": used},
        }
    )


async def models(request: Request) -> Response:
    return _json({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "rubricd"}]})


async def health(request: Request) -> Response:
    return _json({"status": "ok", "tool": BANNER})


async def admin_config(request: Request) -> Response:
    """GET the config, or POST a partial one (e.g. {"latency_ms": 500}) to change it live."""
    sim: Simulator = request.app.state.sim
    if request.method == "POST":
        try:
            patch = await _body(request)
            sim.config = msgspec.convert({**msgspec.to_builtins(sim.config), **patch}, SimConfig)
        except (ValueError, msgspec.DecodeError) as e:
            return _error(400, str(e))
        log.info("config changed: %s", msgspec.json.encode(sim.config).decode())
    return _json(sim.config)


async def admin_stats(request: Request) -> Response:
    return _json(request.app.state.sim.stats())


async def admin_reset(request: Request) -> Response:
    request.app.state.sim.reset()
    return _json(request.app.state.sim.stats())


def create_app(config: SimConfig | None = None) -> Starlette:
    if config is None and os.environ.get(CONFIG_ENV):  # a worker of serve_workers
        config = msgspec.json.decode(os.environ[CONFIG_ENV], type=SimConfig)
    sim = Simulator(config or SimConfig.from_env())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.warning("%s; config %s", BANNER, msgspec.json.encode(sim.config).decode())
        yield

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/embeddings", create_embeddings, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/admin/config", admin_config, methods=["GET", "POST"]),
            Route("/admin/stats", admin_stats, methods=["GET"]),
            Route("/admin/reset", admin_reset, methods=["POST"]),
        ],
    )
    app.state.sim = sim
    return app


class ServerOptions(TypedDict):
    """Keyword arguments of uvicorn.Config / uvicorn.run (typed, so they can be passed with **)."""

    access_log: bool
    loop: str
    http: str
    limit_concurrency: int
    backlog: int
    timeout_keep_alive: int
    timeout_graceful_shutdown: int


# uvicorn tuned for many slow concurrent requests (uvloop/httptools when installed).
SERVER_OPTIONS = ServerOptions(
    access_log=False,
    loop="auto",
    http="auto",
    limit_concurrency=100_000,
    backlog=2048,
    timeout_keep_alive=60,
    timeout_graceful_shutdown=2,
)


def server_config(app: Starlette, host: str, port: int, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, **SERVER_OPTIONS)


def serve_workers(config: SimConfig, workers: int, host: str, port: int, log_level: str) -> None:
    """Serve one port from `workers` processes, for load a single Python process cannot answer.

    Each worker builds its app from the environment, so `config` travels there;
    /admin/* then reaches one worker only: set latency and failures with flags,
    RUBRICD_SIM_* or `[sim:...]` markers instead.
    """
    os.environ[CONFIG_ENV] = msgspec.json.encode(config).decode()
    uvicorn.run(
        "simulator.app:create_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        **SERVER_OPTIONS,
    )


@contextmanager
def serve_in_background(
    config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0
) -> Iterator[tuple[str, Simulator]]:
    """Run a simulator in a thread (port 0: a free one); yields (base_url ending in /v1, state)."""
    app = create_app(config or SimConfig())
    server = uvicorn.Server(server_config(app, host, port))
    thread = threading.Thread(target=server.run, name="rubricd-simulator", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the simulator did not start")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1", app.state.sim
    finally:
        server.should_exit = True
        thread.join(timeout=10)
