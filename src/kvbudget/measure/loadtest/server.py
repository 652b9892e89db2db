"""What the server is: engine, version, served model, and the limits it states about itself.

Detection, in order of trust: the prefix of its Prometheus metric names (``vllm:``, ``sglang:``,
``llamacpp:``, ``tgi_``); llama.cpp's ``/props`` (``total_slots``); ``/v1/models`` ``owned_by``
(``vllm``, ``sglang``, ``llamacpp``; Ollama says ``library``); else ``openai-compatible``.
Versions: vLLM and SGLang ``/version``, llama.cpp ``/props`` ``build_info``, Ollama
``/api/version``. Limits: llama.cpp ``/props`` (``total_slots``, per-slot ``n_ctx``) and ``/slots``;
vLLM's ``max_model_len`` in ``/v1/models``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kvbudget.measure.loadtest.client import Client, ServerError

PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("llamacpp:", "llamacpp"), ("tgi_", "tgi"))
OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "library": "ollama", "ollama": "ollama"}


@dataclass
class ServerInfo:
    url: str
    engine: str = "openai-compatible"
    version: str | None = None
    model: str | None = None  # the served model id (sent as "model" in requests)
    max_model_len: int | None = None  # vLLM's per-request limit
    total_slots: int | None = None  # llama.cpp
    slot_n_ctx: int | None = None  # llama.cpp cells per slot
    has_metrics: bool = False
    has_slots: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "url": self.url,
            "engine": self.engine,
            "version": self.version,
            "model": self.model,
            "total_slots": self.total_slots,
            "slot_n_ctx": self.slot_n_ctx,
            "max_model_len": self.max_model_len,
            "metrics": self.has_metrics,
        }

    @property
    def context_limit(self) -> int | None:
        """The most tokens one sequence may hold, as the server states it."""
        return self.slot_n_ctx if self.slot_n_ctx is not None else self.max_model_len


def _json(body: str) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


def engine_from_metrics(text: str) -> str | None:
    """The engine whose metric prefix appears in a /metrics body (None: none known)."""
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        for prefix, engine in PREFIXES:
            if line.startswith(prefix):
                return engine
    return None


async def detect(client: Client) -> ServerInfo:
    """Probe the server. ServerError when nothing answers at all."""
    info = ServerInfo(url=client.url)
    status, body = await client.get("/v1/models")  # raises ServerError when unreachable
    owner = None
    models = _json(body) if status == 200 else None
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        first = models["data"][0]
        if isinstance(first, dict):
            info.model = str(first.get("id")) if first.get("id") is not None else None
            owner = OWNERS.get(str(first.get("owned_by", "")).lower())
            if isinstance(first.get("max_model_len"), int):
                info.max_model_len = first["max_model_len"]
    elif status != 200:
        info.notes.append(f"GET /v1/models answered HTTP {status}")
    status, body = await client.get("/metrics")
    if status == 200:
        found = engine_from_metrics(body)
        if found:
            info.engine, info.has_metrics = found, True
    status, body = await client.get("/props")
    props = _json(body) if status == 200 else None
    if isinstance(props, dict) and "total_slots" in props:
        info.engine = "llamacpp" if info.engine == "openai-compatible" else info.engine
        _read_props(info, props)
    if info.engine == "openai-compatible" and owner:
        info.engine = owner
    if info.engine == "llamacpp":
        await _read_slots(client, info)
        if not info.has_metrics:
            info.notes.append(
                "llama-server has no /metrics (start it with --metrics): deferred requests cannot be seen"
            )
    else:
        if info.engine in ("vllm", "sglang", "ollama"):
            await _read_version(client, info)
        if not info.has_metrics:
            info.notes.append(
                "the server exposes no known /metrics: deferred and preempted requests cannot be seen; "
                "the verdict rests on refusals, errors and TTFT"
            )
    return info


def _read_props(info: ServerInfo, props: dict[str, object]) -> None:
    slots = props.get("total_slots")
    info.total_slots = int(slots) if isinstance(slots, int) else None
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict) and isinstance(settings.get("n_ctx"), int):
        info.slot_n_ctx = settings["n_ctx"]
    build = props.get("build_info")
    if isinstance(build, str):
        info.version = build


async def _read_slots(client: Client, info: ServerInfo) -> None:
    status, body = await client.get("/slots")
    slots = _json(body) if status == 200 else None
    if isinstance(slots, list) and slots:
        info.has_slots = True
        sizes = [s.get("n_ctx") for s in slots if isinstance(s, dict)]
        if sizes and all(isinstance(n, int) for n in sizes):
            info.total_slots = len(sizes)
            info.slot_n_ctx = min(n for n in sizes if isinstance(n, int))


async def _read_version(client: Client, info: ServerInfo) -> None:
    for path in ("/version", "/api/version", "/get_server_info"):
        try:
            status, body = await client.get(path)
        except ServerError:
            return
        data = _json(body) if status == 200 else None
        if isinstance(data, dict) and isinstance(data.get("version"), str):
            info.version = data["version"]
            return
