"""llama.cpp's layer placement (src/llama-model.cpp load_tensors) and a plan with -ngl or a layer split: which layers
go where, the largest -ngl that fits, the command it prints, and what other engines say to the option."""

from __future__ import annotations

import pytest

from kvbudget.api import PlanRequest, plan_deployment
from kvbudget.engines.llamacpp_offload import output_first, place
from kvbudget.errors import InputError
from kvbudget.plan.flags import engine_command

MiB = 2**20


def test_the_output_layer_goes_first_since_pr_18148() -> None:
    # i_gpu_start = n_layer + 1 - ngl: -ngl 15 on 32 layers is the output layer and layers 18..31
    p = place(32, 15, first=True)
    assert (p.output_device, p.layers_on(0), p.n_gpu_layers) == (0, tuple(range(18, 32)), 15)
    assert p.log_lines()[-1] == "load_tensors: offloaded 15/33 layers to GPU"
    # before it (i_gpu_start = n_layer - ngl) the last 15 repeating layers, the output layer on the CPU
    old = place(32, 15, first=False)
    assert (old.output_device, old.layers_on(0)) == (-1, tuple(range(17, 32)))
    # -ngl 33 (n_layer + 1) or more, or all (-2): every layer either way; -ngl 0: none
    for first in (True, False):
        assert place(32, 99, first=first).full and place(32, -2, first=first).layers_on(-1) == ()
        assert place(32, 0, first=first).layers_on(-1) == tuple(range(32))
        assert place(32, 0, first=first).output_device == -1
    # b7342 still had the old order (the newest build read before the PR); later and unnumbered builds the new one
    assert (output_first("b7342"), output_first("b8586"), output_first("not printed (2026)")) == (False, True, True)


def test_an_even_split_gives_the_first_gpu_the_layers_below_half_of_the_offloaded_count() -> None:
    # splits [0.5, 1.0]; slot il goes to the first device whose split point is above il / 33: il <= 16 on CUDA0
    p = place(32, 33, (1, 1))
    assert (len(p.layers_on(0)), len(p.layers_on(1)), p.output_device) == (17, 15, 1)
    # a 0 proportion keeps a GPU out; a 3:1 split puts three quarters on CUDA0 (il / 33 < 0.75: il <= 24)
    assert place(32, 33, (0, 1)).layers_on(0) == ()
    assert len(place(32, 33, (3, 1)).layers_on(0)) == 25


def _plan(**change: object) -> PlanRequest:
    fields: dict[str, object] = {
        "model": "llama-3.1-8b", "engine": "llamacpp", "gpu_memory": "5141MiB", "context": "32k", "weights": "q4_0",
    }  # fmt: skip
    return PlanRequest.from_options({**fields, **change})


def test_a_model_too_large_names_the_largest_n_gpu_layers_that_fits() -> None:
    # 4.06 GiB of Q4_0 weights, a 32K session's 4 GiB of KV: not all in 5,141 MiB less the 1,024 MiB fit margin
    # (4,117 MiB). At 15 layers: 2,049.43 MiB of weights + 14 x 128 MiB of KV + a 271.42 MiB compute buffer = 4,113
    # MiB; at 16: 2,166.46 + 1,920 + 271.42 = 4,358 MiB (llama.cpp's --fit picked 15 on this card, too)
    with pytest.raises(InputError, match=r"--n-gpu-layers 15 \(15 of 33 layers on the GPU"):
        plan_deployment(_plan())
    fitted = plan_deployment(_plan(n_gpu_layers="auto"))
    assert fitted.layer_split is not None and fitted.layer_split.n_gpu_layers == 15 and fitted.sessions == 1
    # one more layer does not fit: the error says so and names 15
    with pytest.raises(InputError, match=r"with 16 of 33 layers on the GPU.*smallest fix: --n-gpu-layers 15"):
        plan_deployment(_plan(n_gpu_layers="16"))


def test_the_serve_command_and_the_json_carry_the_placement() -> None:
    plan = plan_deployment(_plan(n_gpu_layers="auto"))
    command = engine_command(plan)["text"]
    assert isinstance(command, str) and command.endswith("-fa on -ngl 15")
    doc = plan.to_dict()["gpu_layers"]
    assert isinstance(doc, dict) and (doc["asked"], doc["offloaded"], doc["largest_that_fits"]) == ("auto", "15/33", 15)
    devices = {d["device"]: d for d in doc["devices"]}
    # 14 layers of 1,024 x 32,768 x 2 x 2 B on the GPU, 18 on the host
    assert (devices["CUDA0"]["kv_bytes"], devices["CPU"]["kv_bytes"]) == (14 * 128 * MiB, 18 * 128 * MiB)
    # the two model buffers are the whole Q4_0 file: 32 layers of 122,716,160 B, token_embd 128,256 x 4,096 x 18/32 B,
    # output 128,256 x 4,096 x 210/256 B (Q6_K) and output_norm 4,096 x 4 B
    whole = 32 * 122_716_160 + 128_256 * 4096 * 18 // 32 + 128_256 * 4096 * 210 // 256 + 4096 * 4
    assert devices["CUDA0"]["weights_bytes"] + devices["CPU"]["weights_bytes"] == whole


def test_a_split_over_two_gpus_holds_each_to_its_own_memory() -> None:
    request = PlanRequest.from_options(
        {
            "model": "qwen3-30b-a3b",
            "engine": "llamacpp",
            "gpu": "rtx-4090",
            "context": "16k",
            "weights": "q4_0",
            "tensor_split": "1,3",
            "gpus": "2",
        }
    )
    plan = plan_deployment(request)
    assert plan.layer_split is not None and plan.replicas == 1
    gpus = plan.layer_split.gpus
    assert (gpus[0].layers, gpus[1].layers, gpus[1].output) == (13, 35, True)  # il / 49 < 0.25: il <= 12
    command = engine_command(plan)["text"]
    assert isinstance(command, str) and "--split-mode layer --tensor-split 1,3" in command
    # each GPU's KV is its layers' share: 35 and 13 of the 48 layers' 96 KiB per token (4 kv heads x 128 x 2 x 2 B)
    one = {line.label: line.bytes for line in plan.ledger}
    per_token = plan.sessions * 16384 * 4 * 128 * 2 * 2
    assert (one["CUDA0 KV of the plan's sessions"], one["CUDA1 KV of the plan's sessions"]) == (
        13 * per_token,
        35 * per_token,
    )
    with pytest.raises(InputError, match=r"--gpus 1 is fewer than the 2 GPUs of --tensor-split"):
        plan_deployment(PlanRequest.from_options({**request.options(), "gpus": "1"}))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "ollama"])
def test_another_engine_refuses_the_layer_placement(engine: str) -> None:
    with pytest.raises(InputError, match=r"llama\.cpp's layer placement"):
        plan_deployment(_plan(engine=engine, n_gpu_layers="20"))


def test_the_split_takes_equal_proportions_and_refuses_none_above_zero() -> None:
    assert PlanRequest.from_options({**_plan().options(), "tensor_split": "1,1"}).tensor_split == (1.0, 1.0)
    with pytest.raises(InputError, match=r"--tensor-split.*at least one above 0"):
        _plan(tensor_split="0,0")
    assert _plan(n_gpu_layers="all").n_gpu_layers == -2
