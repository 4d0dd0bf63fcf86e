"""conformance.durability.jsonlines: lines appended after what the file holds, one JSON object per
line with sorted keys (Python's json: Infinity and NaN as json.dumps writes them)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conformance.durability.jsonlines import append_json_lines


@pytest.mark.parametrize("durable", [False, True])
def test_lines_are_appended_after_the_file(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"old": 1}\n', encoding="utf-8")
    append_json_lines(path, [{"b": 2, "a": math.inf}, {"c": "é"}], durable=durable)
    append_json_lines(path, [], durable=durable)  # nothing: no empty line
    append_json_lines(str(path), [{"d": None}], durable=durable)
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[1] == '{"a": Infinity, "b": 2}'
    assert [json.loads(line) for line in text.splitlines()] == [{"old": 1}, {"a": math.inf, "b": 2}, {"c": "é"}, {"d": None}]


def test_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        append_json_lines(tmp_path / "no" / "log.jsonl", [{"a": 1}])
