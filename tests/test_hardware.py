"""The GPU catalog: bytes the driver reports, lookups, links, and ``kvbudget gpus``."""

from __future__ import annotations

import json

import pytest

from kvbudget.errors import InputError
from kvbudget.hardware import gpu, gpus, link, links
from tests.helpers import run_cli


def test_h100_sxm_reports_81559_mib() -> None:
    h100 = gpu("h100-sxm")
    assert h100.nvidia_smi_mib == 81_559
    assert h100.memory_bytes == 81_559 * 2**20 == 85_520_809_984
    assert h100.memory_source == "nvidia-smi"
    assert h100.bandwidth_bytes_per_s == 3_350 * 10**9
    assert round(h100.memory_bytes / 2**30, 2) == 79.65


def test_a100_40gb_is_exactly_40_gib() -> None:
    assert gpu("a100-40gb").memory_bytes == 42_949_672_960 == 40 * 2**30


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("h100-80gb", "h100-sxm"),  # the SXM5 part; the PCIe card is h100-pcie
        ("H100", "h100-sxm"),
        ("NVIDIA H100 SXM5 80GB (HBM3)", "h100-sxm"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("rtx 4090", "rtx-4090"),
        ("RTX_4090", "rtx-4090"),
        ("a100-80gb", "a100-80gb"),
        ("A100-PCIE", "a100-80gb-pcie"),
        ("h200", "h200"),
        ("B200", "b200"),
        ("l4", "l4"),
        ("L40S", "l40s"),
        ("mi300x", "mi300x"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_lookup_is_case_insensitive_with_aliases(name: str, expected: str) -> None:
    assert gpu(name).id == expected


def test_driver_figures_and_nominal_figures() -> None:
    for g in gpus():
        if g.memory_source == "nvidia-smi":
            assert g.nvidia_smi_mib is not None and g.memory_bytes == g.nvidia_smi_mib * 2**20, g.id
        elif g.memory_source == "nominal":
            assert g.memory_bytes == g.memory_gb_nominal * 10**9, g.id
            assert "nominal" in g.memory_basis
        assert g.source, g.id
    # Driver totals sit below the marketing figure read as GiB (H200 "141 GB" reports 140.4 GiB).
    assert gpu("h200").memory_bytes == 143_771 * 2**20 < 141 * 2**30
    assert gpu("mi300x").memory_source == "nominal"
    # the H100 PCIe reports the SXM5 total (81559 MiB in every public nvidia-smi printout read), not 80 GB nominal
    assert gpu("h100-pcie").memory_bytes == gpu("h100-sxm").memory_bytes == 81_559 * 2**20
    assert gpu("dgx-spark").memory_bytes == 122_570 * 2**20


def test_ids_and_aliases_are_unique() -> None:
    labels = [label for g in gpus() for label in (g.id, *g.aliases)]
    assert len(labels) == len(set(labels))


def test_unknown_gpu_lists_close_names() -> None:
    with pytest.raises(InputError) as info:
        gpu("h100-90gb")
    message = str(info.value)
    assert "h100-sxm" in message and "\n" not in message
    with pytest.raises(InputError, match="rtx-4080, rtx-4080-super, rtx-4090"):
        gpu("rtx4085")  # rtx4080 is a card now (rtx-4080)


def test_links_per_direction() -> None:
    assert link("pcie-gen4-x16").bytes_per_s == 32 * 10**9
    assert link("PCIe Gen5").bytes_per_s == 64 * 10**9
    assert link("pcie6").bytes_per_s == 128 * 10**9
    assert link("nvlink3").bytes_per_s == 300 * 10**9
    nvlink4 = link("NVLink 4")
    assert nvlink4.bytes_per_s == 450 * 10**9
    assert link("nvlink5").bytes_per_s == 900 * 10**9
    assert link("ib-ndr").bytes_per_s == 50 * 10**9
    assert len(links()) == 7
    with pytest.raises(InputError):
        gpu("pcie-gen5-x16")  # links are not GPUs


def test_gpus_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "gpus")
    assert code == 0
    assert "85,520,809,984" in out and "79.65" in out and "nominal" in out and "nvlink4" in out
    code, out, _ = run_cli(capsys, "gpus", "--json")
    data = json.loads(out)
    assert data["schema_version"] == 1
    entry = next(g for g in data["gpus"] if g["id"] == "h100-sxm")
    assert entry["memory_bytes"] == 85_520_809_984 and entry["memory_source"] == "nvidia-smi"
    assert "h100-80gb" in entry["aliases"]
    assert next(x for x in data["links"] if x["id"] == "pcie-gen5-x16")["bytes_per_s_per_direction"] == 64 * 10**9


@pytest.mark.parametrize(
    ("name", "card", "others"),
    [
        ("h100-80gb", "h100-sxm", ["h100-pcie"]),
        ("H100 80GB", "h100-sxm", ["h100-pcie"]),
        ("h100", "h100-sxm", ["h100-pcie", "h100-nvl"]),
        ("a100", "a100-80gb", ["a100-80gb-pcie", "a100-40gb"]),
        ("a100-80gb", "a100-80gb", ["a100-80gb-pcie"]),
    ],
)
def test_an_ambiguous_gpu_name_says_which_card_it_planned(name: str, card: str, others: list[str]) -> None:
    """`h100-80gb` fits the SXM5 card (79.6 GiB driver total, 3.35 TB/s) and the PCIe card (the same total,
    2 TB/s): it is read as SXM, and the label every output prints says so and names the other cards."""
    chosen = gpu(name)
    plain = next(g for g in gpus() if g.id == card)
    assert chosen.id == card and chosen.memory_bytes == plain.memory_bytes
    assert chosen.name.startswith(plain.name + " [") and f"read as {card}" in chosen.name
    assert all(f"{other}: " in chosen.name for other in others)


def test_unambiguous_names_keep_the_plain_label(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu("h100-sxm").name == "NVIDIA H100 SXM5 80GB (HBM3)" and gpu("h100-pcie").name == "NVIDIA H100 PCIe 80GB"
    assert (
        "[h100-80gb read as h100-sxm, 79.6 GiB, 3.35 TB/s; also h100-pcie: 79.6 GiB, 2 TB/s]" in gpu("h100-80gb").name
    )
    argv = ("plan", "llama-3.1-8b", "--engine", "vllm", "--context", "32k", "--json")
    code, out, _ = run_cli(capsys, *argv, "--gpu", "h100-80gb")
    assert code == 0 and "h100-80gb read as h100-sxm" in json.loads(out)["ledger"][0]["basis"]
    code, out, _ = run_cli(capsys, *argv, "--gpu", "h100-sxm")
    assert code == 0 and "read as" not in out


# The names nvidia-smi and torch print, each with the memory.total public nvidia-smi printouts of that card show
# (data/gpus.json source): every one resolves to its card, and the card's bytes are that total x 2^20.
PRINTED = [
    ("NVIDIA GeForce RTX 3060", "rtx-3060", 12_288),
    ("NVIDIA GeForce RTX 3080 Ti", "rtx-3080-ti", 12_288),
    ("NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti", 24_564),
    ("NVIDIA GeForce RTX 4070", "rtx-4070", 12_282),
    ("NVIDIA GeForce RTX 4070 SUPER", "rtx-4070-super", 12_282),
    ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti", 12_282),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super", 16_376),
    ("NVIDIA GeForce RTX 4080", "rtx-4080", 16_376),
    ("NVIDIA GeForce RTX 4080 SUPER", "rtx-4080-super", 16_376),
    ("NVIDIA RTX A4000", "rtx-a4000", 16_376),
    ("NVIDIA RTX A5000", "rtx-a5000", 24_564),
    ("NVIDIA RTX A6000", "rtx-a6000", 49_140),
    ("NVIDIA RTX 4000 Ada Generation", "rtx-4000-ada", 20_475),
    ("NVIDIA RTX 5000 Ada Generation", "rtx-5000-ada", 32_760),
    ("NVIDIA L40", "l40", 46_068),
    ("NVIDIA A40", "a40", 46_068),
    ("NVIDIA A30", "a30", 24_576),
    ("NVIDIA A800-SXM4-80GB", "a800-80gb", 81_920),
    ("NVIDIA H800", "h800", 81_559),
    ("NVIDIA H20", "h20", 97_871),
    ("NVIDIA L20", "l20", 46_068),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb", 16_160),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb", 32_510),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb", 16_160),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb", 32_510),
    ("Tesla P100-PCIE-16GB", "p100-pcie-16gb", 16_280),
    ("NVIDIA GH200 480GB", "gh200-96gb", 97_871),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000", 97_887),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-workstation", 97_887),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000-workstation", 97_887),
]


@pytest.mark.parametrize(("printed", "card", "mib"), PRINTED)
def test_a_printed_gpu_name_resolves_to_its_card_with_the_nvidia_smi_total(printed: str, card: str, mib: int) -> None:
    g = gpu(printed)
    assert g.id == card and "[" not in g.name  # a plain card, not an ambiguous reading
    assert g.memory_source == "nvidia-smi" and g.nvidia_smi_mib == mib and g.memory_bytes == mib * 2**20


@pytest.mark.parametrize(
    ("name", "card"),
    [
        ("rtx 4080", "rtx-4080"),
        ("RTX_4070_Ti_SUPER", "rtx-4070-ti-super"),
        ("a6000", "rtx-a6000"),
        ("Tesla P100", "p100-pcie-16gb"),
        ("v100-sxm2-32gb", "v100-sxm2-32gb"),
        ("rtx-3080-12gb", "rtx-3080-12gb"),
        ("rtx-4060-ti-16gb", "rtx-4060-ti-16gb"),
        ("AMD Instinct MI210", "mi210"),
        ("AMD Radeon RX 7900 XTX", "rx-7900-xtx"),
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
    ],
)
def test_short_ids_and_other_printed_names(name: str, card: str) -> None:
    assert gpu(name).id == card


def test_cards_without_a_read_nvidia_smi_total_say_where_their_bytes_come_from() -> None:
    # the 12 GB RTX 3080 prints the 10 GB card's name, and no printout of it was found: the nominal 12 GB
    assert gpu("rtx-3080-12gb").memory_bytes == 12 * 10**9 and gpu("rtx-3080-12gb").memory_source == "nominal"
    assert gpu("rtx-3080-10gb").memory_bytes == 10_240 * 2**20
    assert (gpu("rtx-4060-ti-8gb").nvidia_smi_mib, gpu("rtx-4060-ti-16gb").nvidia_smi_mib) == (8_188, 16_380)
    # GH200 144 GB: the CUDA-visible total a public device snapshot recorded (cuDeviceTotalMem), as the DGX Spark's
    gh200 = gpu("gh200-144gb")
    assert gh200.memory_source == "cuda-deviceQuery" and gh200.memory_bytes == 153_008_209_920 == 145_920 * 2**20
    assert gh200.cuda_provenance == "measured" and gh200.cuda_total_bytes == gh200.memory_bytes
    assert gpu("mi210").memory_bytes == 64 * 10**9 and gpu("rx-7900-xtx").memory_bytes == 24 * 10**9


@pytest.mark.parametrize(
    ("name", "cards"),
    [
        ("NVIDIA GeForce RTX 3080", ["rtx-3080-10gb", "rtx-3080-12gb"]),
        ("rtx 3080", ["rtx-3080-10gb", "rtx-3080-12gb"]),
        ("3080", ["rtx-3080-10gb", "rtx-3080-12gb"]),
        ("NVIDIA GeForce RTX 4060 Ti", ["rtx-4060-ti-8gb", "rtx-4060-ti-16gb"]),
        ("4060ti", ["rtx-4060-ti-8gb", "rtx-4060-ti-16gb"]),
        ("gh200", ["gh200-96gb", "gh200-144gb"]),
        ("Tesla V100", ["v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb", "v100-pcie-32gb"]),
    ],
)
def test_a_name_two_memory_sizes_share_is_refused_naming_each_card(name: str, cards: list[str]) -> None:
    """An RTX 3080 has 10 or 12 GB and nvidia-smi prints both as 'NVIDIA GeForce RTX 3080': no reading is right for
    most users of the name (unlike h100-80gb), so it is refused in one line that names each card's id."""
    with pytest.raises(InputError) as info:
        gpu(name)
    message = str(info.value)
    assert "\n" not in message and "fits more than one card" in message and "--gpu-memory" in message
    assert all(f"{card} (" in message for card in cards)


def test_an_ambiguous_gpu_name_is_refused_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("plan", "llama-3.1-8b", "--engine", "vllm", "--context", "8k", "--gpu", "NVIDIA GeForce RTX 3080")
    code, _, err = run_cli(capsys, *argv)
    assert code != 0 and "rtx-3080-10gb (10.0 GiB" in err and "rtx-3080-12gb (11.2 GiB nominal" in err
    assert len(err.strip().splitlines()) == 1


def test_v100_32gb_is_read_as_the_sxm2_card_and_says_so() -> None:
    chosen = gpu("v100-32gb")
    assert chosen.id == "v100-sxm2-32gb" and chosen.memory_bytes == 32_510 * 2**20
    assert "[v100-32gb read as v100-sxm2-32gb" in chosen.name and "v100-pcie-32gb: " in chosen.name


@pytest.mark.parametrize(
    ("card", "capability"),
    [
        ("p100-pcie-16gb", 60),
        ("v100-sxm2-32gb", 70),
        ("v100-pcie-16gb", 70),
        ("t4", 75),
        ("a30", 80),
        ("a800-80gb", 80),
        ("a40", 86),
        ("rtx-a4000", 86),
        ("rtx-a6000", 86),
        ("rtx-3060", 86),
        ("rtx-3080-ti", 86),
        ("rtx-3090-ti", 86),
        ("l40", 89),
        ("l20", 89),
        ("rtx-4060-ti-16gb", 89),
        ("rtx-4070-ti-super", 89),
        ("rtx-4080-super", 89),
        ("rtx-4000-ada", 89),
        ("rtx-5000-ada", 89),
        ("h800", 90),
        ("h20", 90),
        ("gh200-96gb", 90),
        ("gh200-144gb", 90),
        ("rtx-pro-6000-workstation", 120),
    ],
)
def test_compute_capability_of_the_new_cards(card: str, capability: int) -> None:
    """NVIDIA's published compute capabilities: Pascal 6.0, Volta 7.0, Turing 7.5, A100-class Ampere 8.0, other Ampere
    8.6, Ada 8.9, Hopper 9.0, workstation Blackwell 12.0. The engines pick attention backends, FP8 and bf16 from it."""
    from kvbudget.engines.capability import compute_capability

    assert compute_capability(gpu(card).name) == capability


def test_every_nvidia_card_has_a_compute_capability_and_others_none() -> None:
    from kvbudget.engines.capability import compute_capability

    for g in gpus():
        assert (compute_capability(g.name) is not None) == (g.vendor == "nvidia"), g.id
    # nvidia-smi and torch print Volta and Pascal parts without "NVIDIA"
    assert compute_capability("Tesla V100-SXM2-32GB") == 70 and compute_capability("Tesla P100-PCIE-16GB") == 60


def test_a_v100_serves_a_bf16_checkpoint_in_fp16_as_the_t4_does() -> None:
    """vLLM has no bf16 below compute capability 8.0 and falls back to fp16 (config/model.py _resolve_auto_dtype):
    Llama-3.2-3B (bf16) plans fp16 weights and cache on a V100 or a T4, bf16 on an A100 or an A40."""
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.plan import PlanRequest
    from kvbudget.requests.values import Tokens

    def served(card: str) -> str:
        plan = plan_deployment(PlanRequest(model="llama-3.2-3b", gpu=card, engine="vllm", context=Tokens("8k")))
        return plan.inputs.spec.dtype

    assert served("Tesla V100-SXM2-32GB") == served("v100-pcie-16gb") == served("t4") == "fp16"
    assert served("a100-80gb") == served("NVIDIA A40") == "bfloat16"  # the checkpoint's own, as config.json writes it
