"""Generated lineage histories: deterministic, every lineage form, distinct increasing times, landable lines."""

from __future__ import annotations

import json

import pytest

from conf.errors import InputError
from datagen.lineage import lineage_history, write_lineage_history


def test_the_same_seed_gives_the_same_records_and_times_increase():
    records = lineage_history(seed=3, changes=120)
    assert records == lineage_history(seed=3, changes=120) != lineage_history(seed=4, changes=120)
    times = [r["created"]["time"] for r in records]
    assert times == sorted(set(times))
    values = [json.loads(r["aspect"]["value"]) for r in records if "aspect" in r]
    assert any("fineGrainedLineages" in v and v["fineGrainedLineages"] for v in values)
    assert any(v.get("inputDatasetEdges") for v in values) and any(v.get("inputDatasets") for v in values)
    assert any(isinstance(i, dict) for v in values for i in v.get("inputs", []))
    assert {r["changeType"] for r in records} == {"UPSERT", "DELETE"}
    assert any(v == {"removed": True} for v in values) and any(v == {"removed": False} for v in values)


def test_written_as_mcl_lines(tmp_path):
    count = write_lineage_history(tmp_path / "lineage.mcl.jsonl", seed=1, changes=10)
    lines = (tmp_path / "lineage.mcl.jsonl").read_text().splitlines()
    assert len(lines) == count and all(json.loads(line)["systemMetadata"]["version"] for line in lines)


def test_a_count_below_its_minimum_is_named():
    with pytest.raises(InputError, match="datasets: 1 is below 2"):
        lineage_history(seed=1, datasets=1)
