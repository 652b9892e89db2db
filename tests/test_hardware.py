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
