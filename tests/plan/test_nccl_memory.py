"""NCCL's NVLink SHARP buffers, the non-torch memory vLLM subtracts at TP > 2 on NVSwitch boards, against NCCL's
own code (nvls.cc) and the measurement of vLLM issue #9699 (NVLS on vs off, 8 x H200)."""

from __future__ import annotations

import pytest

from kvbudget.api import PlanRequest, Tokens, plan_deployment
from kvbudget.engines.nccl_memory import COMMUNICATORS, nvls_bytes

MiB = 2**20


def test_the_eager_buffers_are_the_size_nccl_logged_per_head() -> None:
    # vLLM issue #9699 (vLLM 0.6.3, NCCL 2.20): 'NVLS comm ... nHeads 8 buffSize 4194304 memSize 2097152
    # nvlsPerRankSize 301989888 nvlsTotalSize 2415919104', per communicator on every GPU
    figure, words = nvls_bytes(8, "nvlink4", "0.6.3")
    assert figure == COMMUNICATORS * 2_415_919_104
    assert "NVLS" in words


def test_two_communicators_match_the_blocks_nvls_cost_in_issue_9699() -> None:
    # Llama-3.1-405B at TP 8 on H200, vLLM 0.6.3: 17,595 GPU blocks with NVLS, 227xx without; a block is
    # 126 layers x 1 KV head per GPU x 128 x 2 (K, V) x 2 B x 16 tokens = 1,032,192 B
    block = 126 * 1 * 128 * 2 * 2 * 16
    low, high = (22_700 - 17_595) * block, (22_799 - 17_595) * block
    figure, _ = nvls_bytes(8, "nvlink4", "0.6.3")
    assert 0.9 * low <= figure <= high  # one communicator (2.25 GiB) would be less than half the measured cost
    assert nvls_bytes(8, "nvlink4", "0.6.3")[0] // COMMUNICATORS < 0.5 * low


def test_from_nccl_2_22_the_buffer_is_16_channels_of_one_mib_per_head() -> None:
    # NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8 = 1 MiB, x 2 (reduce, broadcast), 16 channels on SM90: 32 MiB per head;
    # vLLM 0.9 moved to torch 2.7 (NCCL 2.26)
    assert nvls_bytes(4, "nvlink4", "0.9.2")[0] == COMMUNICATORS * 4 * 32 * MiB
    assert nvls_bytes(4, "nvlink4", "0.8.5")[0] == COMMUNICATORS * 4 * 288 * MiB


@pytest.mark.parametrize(
    ("tp", "link"),
    [
        (2, "nvlink4"),  # ncclNvlsInit: no NVLS with 2 GPUs or fewer
        (1, "nvlink5"),
        (4, "nvlink3"),  # A100: NVSwitch without multicast
        (8, "pcie-gen5-x16"),
        (4, None),  # a bare --gpu-memory: no board known
    ],
)
def test_no_nvls_without_more_than_two_gpus_on_a_multicast_nvswitch(tp: int, link: str | None) -> None:
    assert nvls_bytes(tp, link, "0.6.3") == (0, "")


def _plan(engine: str, gpu: str, tp: int) -> str:
    request = PlanRequest(model="qwen3-235b-a22b", gpu=gpu, engine=engine, context=Tokens("8k"), tp=tp, weights="fp8")
    return plan_deployment(request).overhead.basis


def test_a_vllm_plan_at_tp_4_on_h100_counts_the_nvls_buffers_and_sglang_does_not() -> None:
    assert "NCCL NVLS buffers" in _plan("vllm@0.9.2", "h100", 4)
    # SGLang sets NCCL_NVLS_ENABLE=0 unless --enable-nccl-nvls (sglang PR #631, PR #3502)
    assert "NVLS" not in _plan("sglang", "h100", 4)
    # A100's NVSwitch has no multicast
    assert "NVLS" not in _plan("vllm@0.9.2", "a100-80gb", 4)
