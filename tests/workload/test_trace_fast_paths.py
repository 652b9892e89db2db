"""The fast paths of the trace readers and statistics give what the plain paths give: the bulk
block-id check, the C-scanner line parse, WEKA's packed block ids (checked as they are packed, bools
told apart, prefixes compared as bytes), its prefix-reusing salt and shared-block hint, the
relabelling of several files' sessions, and the histogram's folding of sorted runs."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import math
import random
import zlib
from collections import Counter
from pathlib import Path

import pytest

from kvbudget.workload.record import BadRow, StepRecord, common_prefix
from kvbudget.workload.stats import Quantiles, _bucket, trace_stats
from kvbudget.workload.traces import detect_format, mooncake, read_records, relabel, weka
from kvbudget.workload.traces._common import (
    RowError,
    bool_free,
    hash_list,
    int_list,
    json_lines,
    open_text,
    read_head,
)
from tests.workload.raw_traces import WEKA, weka_sessions
from tests.workload.raw_traces import common_prefix as raw_common_prefix


@pytest.mark.parametrize("bools", [True, False])
def test_the_bulk_check_rejects_what_the_item_check_rejects(bools: bool) -> None:
    for bad in ([1, 2.0], [1, "2"], [None], [[1]], [{"a": 1}], [1.0, 2.0], [float("inf")]):
        assert not int_list(bad, bools=bools), bad
    for good in ([], [0], [0, 1, 2**70], [-5, 3]):
        assert int_list(good, bools=bools), good
    assert not int_list([1, True], bools=True)  # only the item check sees a bool: the caller rules them out


@pytest.mark.parametrize(
    ("text", "free"),
    [
        ('{"hash_ids": [1, 2]}', True),
        ('{"hash_ids": [1, true]}', False),
        ('{"hash_ids": [false]}', False),
        ('{"requests": [], "format": "x"}', True),  # the letters alone are not a literal
        ('{"stream":true}', False),
    ],
)
def test_bool_free_finds_every_literal(text: str, free: bool) -> None:
    assert bool_free(text) is free
    assert bool_free(text) is not any(type(v) is bool for v in _leaves(json.loads(text)))


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_a_bool_id_is_still_refused_by_name() -> None:
    with pytest.raises(RowError, match="must hold integers, got True"):
        hash_list({"hash_ids": [4, True]}, bools=True)
    with pytest.raises(RowError, match=r"must hold integers, got 2\.0"):
        hash_list({"hash_ids": [4, 2.0]}, bools=False)


def test_json_lines_parse_as_json_loads(tmp_path: Path) -> None:
    lines = [
        '{"a": 1}',
        '  {"a": 2}  ',
        '{"a": 3}\r',
        "",
        '{"a": 4} {"a": 5}',
        "[1, 2]",
        '{"a": [1, 2.5, true]}',
        '{"a": ',
        '{"a": 6}',  # the last line has no newline
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8", newline="")
    bad: list[BadRow] = []
    got = [(number, row) for number, row, _ in json_lines(path, bad.append)]
    assert got == [(1, {"a": 1}), (2, {"a": 2}), (3, {"a": 3}), (7, {"a": [1, 2.5, True]}), (9, {"a": 6})]
    assert [(b.line, b.reason) for b in bad] == [
        (5, f"not valid JSON: {_loads_error(lines[4])}"),
        (6, "a line must be a JSON object, not list"),
        (8, f"not valid JSON: {_loads_error(lines[7] + chr(10))}"),
    ]
    assert _loads_error(lines[4]) == "Extra data (column 10)"


def _loads_error(line: str) -> str:
    try:
        json.loads(line)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} (column {exc.colno})"
    raise AssertionError(f"{line!r} parses")


def test_weka_salts_every_id_as_a_whole_salt_would() -> None:
    for path in WEKA:
        raw = weka_sessions(path)
        salt = zlib.crc32(path.stem.encode()) << 32
        previous: dict[str, list[int]] = {}
        for r in read_records([path]):
            ids = raw[r.session][r.step]["hash_ids"]
            assert r.block_hashes == tuple(salt ^ i for i in ids)
            if r.step == 0:
                assert r.shared_blocks is None
            else:
                before = previous[r.session]
                want = next((k for k, (a, b) in enumerate(zip(ids, before, strict=False)) if a != b), None)
                assert r.shared_blocks == (min(len(ids), len(before)) if want is None else want)
            previous[r.session] = ids


def test_the_shared_block_hint_changes_no_statistic() -> None:
    records = list(read_records(WEKA, bad_rows=[]))
    assert sum(r.shared_blocks is not None for r in records) > 400
    plain = [dataclasses.replace(r, shared_blocks=None) for r in records]
    hinted, computed = trace_stats(records, 0), trace_stats(plain, 0)
    assert hinted == computed and hinted.prefix_reuse.count > 400


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ((1, 2, 3), (1, 2), 2),
        ((1, 2), (1, 2, 3), 2),
        ((1, 9, 3), (1, 2, 3), 1),
        ((), (1,), 0),
        ([5, 6, 7], [5, 6, 0], 2),
        (tuple(range(1000)), (*range(700), -1), 700),
    ],
)
def test_common_prefix(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int], want: int) -> None:
    assert common_prefix(a, b) == common_prefix(b, a) == want


def test_relabel_keeps_every_other_field() -> None:
    record = StepRecord("s", 3, 1.5, 100, 20, "p", 7, 5, 0.25, (1, 2), 64, "weka:x", final=True, shared_blocks=1)
    moved = relabel(record, "f.json")
    assert (moved.session, moved.parent) == ("f.json/s", "f.json/p")
    for f in dataclasses.fields(StepRecord):
        if f.name not in ("session", "parent"):
            assert getattr(moved, f.name) == getattr(record, f.name), f.name
    assert relabel(dataclasses.replace(record, parent=None), "f").parent is None


def test_a_document_longer_than_the_head_is_detected(tmp_path: Path) -> None:
    requests = [{"t": i, "in": 64 * (i + 1), "out": 1, "hash_ids": list(range(i + 1))} for i in range(400)]
    path = tmp_path / "one_line.json"
    path.write_text(json.dumps({"id": "x", "block_size": 64, "requests": requests}), encoding="utf-8")
    assert path.stat().st_size > 65536 and detect_format(path) == "weka"


def test_folding_sorted_runs_puts_each_value_in_its_bucket() -> None:
    rng = random.Random(5)
    gamma = (1 + 0.005) / (1 - 0.005)
    edges = [gamma**k for k in range(-50, 3000, 37)]  # values on and beside bucket edges
    values = [rng.choice((-1, 1)) * v for e in edges for v in (e, math.nextafter(e, 0), math.nextafter(e, math.inf))]
    values += [0.0] * 7 + [1e-12, -1e-12] + [rng.lognormvariate(3, 4) for _ in range(5000)]
    q = Quantiles("d", limit=10)
    q.values.extend(values)
    q.settle()
    want = Counter((0, 0) if v == 0 else ((1 if v > 0 else -1), _bucket(abs(v))) for v in values)
    assert q.buckets == dict(want) and q.count == len(values)


def test_weka_requests_fast_and_checked_paths_agree(tmp_path: Path) -> None:
    requests = [
        {"t": 0, "in": 640, "out": 10, "hash_ids": [1, 2], "api_time": 2},  # whole-number times: fast path
        {"t": 5.5, "in": 700.0, "out": 3, "hash_ids": [1, 2, 3]},  # a whole float count: checked path
        {"t": -1.0, "in": 10, "out": 1},
        {"t": 9.0, "in": 10, "out": 1, "api_time": "x"},
        {"t": 9.0, "in": 10, "out": True},
        {"t": 12.0, "in": 800, "out": 2, "hash_ids": [1, 2, 3, 4], "api_time": None},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"id": "t", "block_size": 64, "requests": requests}, indent=1), encoding="utf-8")
    bad: list[BadRow] = []
    got = list(read_records([path], bad_rows=bad))
    assert [(r.step, r.start_s, r.prompt_tokens, r.output_tokens, r.pause_s, r.shared_blocks) for r in got] == [
        (0, 0.0, 640, 10, 3.5, None),
        (1, 5.5, 700, 3, 6.5, 2),
        (2, 12.0, 800, 2, None, 3),
    ]
    assert all(type(r.start_s) is float for r in got)
    assert [b.reason for b in bad] == [
        "requests[2]: 't' must be at least 0, got -1",
        "requests[3]: 'api_time' must be a number, got 'x'",
        "requests[4]: 'out' must be a whole number, got True",
    ]


def _id_lists(rng: random.Random) -> list[list[int]]:
    """Id lists as WEKA steps have them and not: extended, equal, cut, diverging anywhere, empty, and
    ids at the edges of int64 (0, 1, 256 and 257 pack with a low byte of 0 or 1, like a bool)."""
    edges = [0, 1, 256, 257, -1, -256, 2**63 - 1, -(2**63), 2**32, 2**40 + 1]
    lists: list[list[int]] = [[]]
    for _ in range(400):
        base = rng.choice(lists)
        cut = base[: rng.randint(0, len(base))]
        kind = rng.randrange(5)
        if kind == 0:
            lists.append(base + [rng.randint(0, 2**20) for _ in range(rng.randint(0, 40))])
        elif kind == 1:
            lists.append(list(base))
        elif kind == 2:
            lists.append(cut)
        elif kind == 3:
            lists.append(cut + [rng.choice(edges) for _ in range(rng.randint(1, 6))])
        else:
            lists.append([rng.choice(edges) for _ in range(rng.randint(0, 70))])
    return lists


def test_packed_ids_share_the_prefix_the_ids_share() -> None:
    lists = _id_lists(random.Random(11))
    rng = random.Random(12)
    for _ in range(3000):
        a, b = rng.choice(lists), rng.choice(lists)
        packed_a, packed_b = weka._packed(list(a)), weka._packed(list(b))
        assert packed_a is not None and packed_b is not None
        assert weka._shared_packed(packed_a, packed_b) == raw_common_prefix(a, b), (a, b)
    assert weka._packed([2**63]) is None and weka._packed([-(2**63) - 1]) is None


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, 3],
        [],
        [0, 1, 256, 257, 512, 513],
        [True],
        [5, False],
        [256, 1, True],  # a bool after ids whose low bytes look like one
        [0] * 200 + [True],  # past the budget of looks: every id's type is checked
        [1] * 50,
        [1, 2.0],
        [1.0],
        [float("nan")],
        [1, "2"],
        [None],
        [[1]],
        [{"a": 1}],
        [2**63, True],
        [2**63, 1],  # past int64: a valid list, checked and compared as ints
        [-(2**63), 2**63 - 1],
        None,
        "x",
        {"a": 1},
        7,
    ],
)
def test_block_ids_check_what_hash_list_checks(value: object) -> None:
    entry: dict[str, object] = {"hash_ids": value}
    try:
        want = hash_list(entry)  # the checked path, every item's type looked at
    except RowError as exc:
        with pytest.raises(RowError) as got:
            weka._block_ids(entry, None)
        assert str(got.value) == str(exc)
        return
    ids, shared, packed, small = weka._block_ids(entry, None)
    assert ids == want and all(type(i) is int for i in ids) and shared == 0
    fits = all(-(2**63) <= i < 2**63 for i in want)
    assert (packed is not None) is (fits and type(value) is list)
    if packed is not None:
        assert sorted(small or ()) == [k for k, i in enumerate(want) if i in (0, 1)]


@pytest.mark.parametrize("small_ids", [(0, 1, 256, 257, 512), (0,), (1, 2**40)])  # (0,): past the budget of finds
def test_a_bool_is_found_in_a_chain_of_steps_wherever_it_is(small_ids: tuple[int, ...]) -> None:
    """A bool packs as 0 or 1: it is found where the ids a step shares with the previous one were 0 or 1
    as well as among the ids it adds, also after a step whose ids (one past int64) were not packed;
    every step's shared prefix and places of 0 and 1 stay exact."""
    rng = random.Random(sum(small_ids))
    for _ in range(60):
        previous: weka._Request | None = None
        ids: list[object] = []
        for step in range(8):
            keep = ids[: rng.randint(0, len(ids))] if rng.random() < 0.2 else ids
            if keep and keep[-1] == 2**63:
                keep = keep[:-1]
            ids = [*keep, *(rng.choice((*small_ids, rng.randint(2, 2**40))) for _ in range(rng.randint(0, 90)))]
            if rng.random() < 0.15:
                ids.append(2**63)  # past int64: this step is compared as a list
            entry: dict[str, object] = {"hash_ids": ids}
            if ids and rng.random() < 0.25:
                at = rng.randrange(len(ids))
                flag = bool(ids[at]) if ids[at] in (0, 1) else rng.choice((True, False))
                entry["hash_ids"] = [*ids[:at], flag, *ids[at + 1 :]]
                with pytest.raises(RowError, match=f"must hold integers, got {flag}"):
                    weka._block_ids(entry, previous)
                continue
            got, shared, packed, small = weka._block_ids(entry, previous)
            want = 0 if previous is None else raw_common_prefix(ids, previous.hashes)  # type: ignore[arg-type]
            assert got == ids and shared == want, step
            if ids and ids[-1] == 2**63:
                assert packed is None and small is None
            else:
                assert packed is not None and sorted(small or ()) == [k for k, i in enumerate(ids) if i in (0, 1)]
            previous = weka._Request(0.0, 1, 1, None, got, shared, packed, small)


def test_weka_steps_equal_a_plain_reading_of_varied_documents(tmp_path: Path) -> None:
    """Random sessions with bad requests among good ones: each step's ids, salt and shared prefix, and
    each bad row's reason, as the checked calls and a plain prefix loop give them."""
    rng = random.Random(14)
    bad_ids: list[object] = [1.0, 2.5, True, False, "7", None, [1], {"a": 1}]
    for doc in range(25):
        lists = _id_lists(rng)[-rng.randint(2, 30) :]
        requests: list[dict[str, object]] = []
        for k, ids in enumerate(lists):
            entry: dict[str, object] = {"t": float(k), "in": 64 * len(ids) + 1, "out": 2, "hash_ids": list(ids)}
            roll = rng.random()
            if roll < 0.1 and ids:
                broken: list[object] = list(ids)
                broken[rng.randrange(len(broken))] = rng.choice(bad_ids)
                entry["hash_ids"] = broken
            elif roll < 0.13:
                entry["hash_ids"] = rng.choice([None, "x", 5])
            elif roll < 0.16:
                entry["out"] = -1
            elif roll < 0.2:
                entry["hash_ids"] = [2**63 + k, *ids]  # past int64
            requests.append(entry)
        global_scope = doc % 4 == 0
        body = {"id": f"doc{doc}", "block_size": 64, "requests": requests}
        if global_scope:
            body["hash_id_scope"] = "global"
        path = tmp_path / f"doc{doc}.json"
        path.write_text(json.dumps(body), encoding="utf-8")
        salt = 0 if global_scope else zlib.crc32(f"doc{doc}".encode()) << 32
        want_steps: list[tuple[tuple[int, ...], int | None]] = []
        want_bad: list[str] = []
        previous: list[int] | None = None
        for i, entry in enumerate(requests):
            try:
                ids = hash_list(entry)
                if entry["out"] == -1:
                    raise RowError("'out' must be at least 0, got -1")
            except RowError as exc:
                want_bad.append(f"requests[{i}]: {exc}")
                continue
            shared = None if previous is None else raw_common_prefix(ids, previous)
            want_steps.append((tuple(salt ^ v for v in ids), shared))
            previous = ids
        bad: list[BadRow] = []
        got = list(read_records([path], bad_rows=bad))
        assert [(r.block_hashes, r.shared_blocks) for r in got] == want_steps
        assert [r.final for r in got] == [k == len(got) - 1 for k in range(len(got))]
        assert {(r.source, r.cached_tokens, r.parent, r.block_size) for r in got} <= {
            (f"weka:{path.name}", None, None, 64),
            (f"weka:{path.name}", None, None, None),  # a step without ids has no block size
        }
        assert [b.reason for b in bad] == want_bad


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b'{"a": 1}\n' * 3,
        b"x" * 70000,
        b"x" * 65535 + "é".encode() + b"y" * 10,  # a two-byte character across the head's end
        "é".encode() * 40000,
        b"\xff\xfe" + b"z" * 70000,  # undecodable bytes are replaced
        b"z" * 65535 + b"\xe2\x82",  # a character cut off by the file's end
        "\ufeff{}".encode(),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_read_head_reads_what_the_decoder_reads(tmp_path: Path, body: bytes, gz: bool) -> None:
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(body) if gz else body)
    with open_text(path) as f:
        assert isinstance(f, io.TextIOWrapper)
        f.reconfigure(errors="replace")
        want = f.read(65536)  # the head as a text stream gives it
    assert read_head(path) == want


@pytest.mark.parametrize("before", [0, 1, 4, 5, 6])
def test_a_head_cut_inside_one_of_its_first_lines_is_not_parsed(tmp_path: Path, before: int) -> None:
    """The first 5 lines decide, but not one the 64 KiB head cut off: parsed, this one would say weka;
    the keys of the head say kvbudget. Past 5 lines, the 5th (a Mooncake row) decides."""
    cut = '{"requests": 1, "session": "s", "prompt_tokens": 1}' + " " * 70000 + "x"
    lines = ["[]"] * before + [cut]
    if before >= 5:
        lines[4] = '{"input_length": 5, "output_length": 1, "timestamp": 0}'
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(path) == ("mooncake" if before >= 5 else "kvbudget")


def test_plain_mooncake_rows_are_the_records_the_checked_path_builds(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"timestamp": 0, "input_length": 900, "output_length": 12, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 10, "output_length": 0},
        {"timestamp": 7, "input_length": 0, "output_length": 3, "hash_ids": []},
        {"timestamp": 9, "input_length": 5, "output_length": 3, "hash_ids": None},
    ]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    got = list(read_records([path]))
    source = f"mooncake:{path.name}"
    want = [mooncake._request(row, f"{path.name}:{k}", source, bools=True) for k, row in enumerate(rows, start=1)]
    assert [dataclasses.astuple(r) for r in got] == [dataclasses.astuple(r) for r in want]
    assert [r.shared_blocks for r in got] == [None] * len(rows)
