"""Run-config paths: the demo data by its stable built-in names (what "New Training Run…" writes), resolved to the
files that ship next to the trainer; an unknown name is an error naming the known ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_agent_trainer.config import ConfigError, config_from_dict

ROOT = Path(__file__).resolve().parents[2]


def test_builtin_demo_data_resolves_to_the_shipped_files(tmp_path):
    cfg = config_from_dict({"data": {"train": "builtin:demo/train", "eval": "builtin:demo/eval"}, "model": {"kind": "tiny", "tiny": {"vocab": ["builtin:demo/corpus"]}}}, base=tmp_path)
    assert cfg.data.train == str(ROOT / "examples" / "demo" / "train.jsonl")
    assert cfg.data.eval == str(ROOT / "examples" / "demo" / "eval.jsonl")
    assert cfg.model.tiny.vocab == [str(ROOT / "examples" / "demo" / "corpus.jsonl")]
    assert all(Path(p).is_file() for p in (cfg.data.train, cfg.data.eval, *cfg.model.tiny.vocab))


def test_an_unknown_builtin_name_is_an_error():
    with pytest.raises(ConfigError, match=r"unknown built-in data 'builtin:demo/nope'; the built-ins are builtin:demo/train"):
        config_from_dict({"data": {"train": "builtin:demo/nope"}, "model": {"kind": "tiny"}})
