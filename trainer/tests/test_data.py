"""The dataset reader: `meta.hops` is kept (for the `val/*_by_hops/*` metrics and `data.hops_mix`), absent is fine,
malformed is a reported, skipped line; the hops-mix sampler."""

from __future__ import annotations

import json

import pytest

from search_agent_trainer.data import DatasetError, MixSampler, load_dataset


def test_meta_hops_is_read_absent_is_none_and_a_bad_value_is_a_skipped_line_naming_the_field(tmp_path):
    rows = [
        {"id": "a", "question": "who wrote X?", "golden": ["Bo"], "meta": {"hops": 2, "kind": "author"}},
        {"id": "b", "question": "who wrote Y?", "golden": ["Cy"]},
        {"id": "c", "question": "who wrote Z?", "golden": ["Di"], "meta": {"hops": "two"}},
        {"id": "d", "question": "who wrote W?", "golden": ["Ed"], "meta": {"hops": 0}},
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    warnings: list[str] = []
    out = load_dataset(str(path), warnings.append)
    assert [(e.id, e.hops) for e in out] == [("a", 2), ("b", None)]
    assert warnings == [f"{path}:3: meta.hops: expected a positive integer; line skipped", f"{path}:4: meta.hops: expected a positive integer; line skipped"]


def test_hops_mix_gives_each_batch_its_share_of_each_kind_and_resumes_where_it_stopped():
    hops = [1, 2, 1, 1, 2, 1, 1, 2, 1, 1, 3]  # 7 one-hop, 3 two-hop, 1 three-hop (weight 0: never drawn)
    s = MixSampler(hops, {1: 1, 2: 3, 3: 0}, seed=5)
    assert s.counts(8) == {1: 2, 2: 6} and s.counts(3) == {1: 1, 2: 2}  # 0.75 and 2.25: the larger remainder gets it
    batches = [s.next_batch(8) for _ in range(3)]
    for b in batches:
        assert sorted(hops[i] for i in b) == [1, 1, 2, 2, 2, 2, 2, 2]
    twos = [i for b in batches for i in b if hops[i] == 2]
    assert sorted(twos[:3]) == [1, 4, 7] and sorted(twos[3:6]) == [1, 4, 7]  # each kind cycles through its epochs
    state = s.state_dict()
    again = MixSampler(hops, {1: 1, 2: 3, 3: 0}, seed=5)
    again.load_state_dict(json.loads(json.dumps(state)))
    assert again.next_batch(8) == s.next_batch(8)
    with pytest.raises(DatasetError, match="another data.hops_mix"):
        MixSampler(hops, {1: 1}, seed=5).load_state_dict(state)
    with pytest.raises(DatasetError, match="meta.hops on every training example; example 2 has none"):
        MixSampler([1, None], {1: 1}, seed=5)
    with pytest.raises(DatasetError, match="no training example has meta.hops 2"):
        MixSampler([1, 1], {1: 1, 2: 1}, seed=5)
