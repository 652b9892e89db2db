"""The engines' own Prometheus metrics that a plan's alerting rules watch (``plan/alerts.py``), each name cited to
the engine's source. An engine's ``alert_metrics`` hook (``engines/contract.py``) returns its record here; engines
without such metrics return None and only the gateway's rules hold their plan.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineMetrics:
    label: str  # the engine as the alert's summary names it
    kv_usage: str | None  # PromQL selector of the 0-1 KV-cache usage gauge; None: the engine exports none
    waiting: str  # gauge of requests waiting inside the engine
    preemptions: str | None = None  # counter as scraped (with _total); None: the engine never preempts
    preempted: str = "preempted"  # the engine's word for it
    waiting_hint: str = ""  # what to check when requests wait
    note: str = ""  # said once in the rules file


VLLM = EngineMetrics(
    "vLLM",
    # vllm:kv_cache_usage_perc (a 0-1 fraction) since 0.9.2 (PR #18354); vllm:gpu_cache_usage_perc before,
    # deprecated 0.9.2, hidden 0.11, removed 0.12 (PR #29330): both, by name
    kv_usage='{__name__=~"vllm:(kv|gpu)_cache_usage_perc"}',
    # vllm:num_requests_waiting (gauge): vllm/v1/metrics/loggers.py
    waiting="vllm:num_requests_waiting",
    # vllm:num_preemptions (counter, scraped as _total): vllm/v1/metrics/loggers.py
    preemptions="vllm:num_preemptions_total",
)

# sglang:token_usage (0-1), sglang:num_retracted_requests_total, sglang:num_queue_reqs:
# python/sglang/srt/metrics/collector.py (families of v0.5.17 as kubernetes-sigs/inference-perf lists)
SGLANG = EngineMetrics(
    "SGLang",
    kv_usage="sglang:token_usage",
    waiting="sglang:num_queue_reqs",
    preemptions="sglang:num_retracted_requests_total",
    preempted="retracted",
)

LLAMACPP = EngineMetrics(
    "llama.cpp",
    # llamacpp:kv_cache_usage_ratio: tools/server/server.cpp until PR #13660 (May 2025) removed it; kept for older
    # builds (the rule is silent on newer ones). No preemption: slots are fixed at -np.
    kv_usage="llamacpp:kv_cache_usage_ratio",
    # llamacpp:requests_deferred (gauge, the queue): tools/server/server.cpp, with --metrics
    waiting="llamacpp:requests_deferred",
    waiting_hint=" Check --parallel is at least the sessions.",
    note="llama-server exports metrics with --metrics; builds after May 2025 have no KV usage gauge "
    "(llamacpp:kv_cache_usage_ratio, PR #13660), so only the deferred-requests rule fires there.",
)
