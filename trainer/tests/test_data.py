"""The dataset reader: `meta.hops` is kept (for the `val/*_by_hops/*` metrics and `data.hops_mix`), absent is fine,
malformed is a reported, skipped line; `meta.bridge` and what `bridge_searched` asks of the queries; the hops-mix
sampler."""

from __future__ import annotations

import json

import pytest

from search_agent_trainer.data import DatasetError, Example, MixSampler, bridge_searched, load_dataset, normalize


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
    assert warnings == [
        f"{path}:3: meta.hops: expected a positive integer; line skipped",
        f"{path}:4: meta.hops: expected a positive integer; line skipped",
    ]


def test_meta_bridge_is_read_as_names_and_a_bad_value_is_a_skipped_line_naming_the_field(tmp_path):
    rows = [
        {
            "id": "a",
            "question": "where was the author of X born?",
            "golden": ["Ulm"],
            "meta": {"hops": 2, "bridge": "Bo Dane"},
        },
        {
            "id": "b",
            "question": "where was the author of Y born?",
            "golden": ["Ulm"],
            "meta": {"hops": 2, "bridge": ["Cy Fell", "C. Fell"]},
        },
        {"id": "c", "question": "who wrote Z?", "golden": ["Di"], "meta": {"hops": 1}},
        {"id": "d", "question": "where was the author of W born?", "golden": ["Ulm"], "meta": {"bridge": []}},
        {"id": "e", "question": "where was the author of V born?", "golden": ["Ulm"], "meta": {"bridge": ["..."]}},
        {"id": "f", "question": "where was the author of U born?", "golden": ["Ulm"], "meta": {"bridge": 7}},
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    warnings: list[str] = []
    out = load_dataset(str(path), warnings.append)
    assert [(e.id, e.bridge) for e in out] == [("a", ("Bo Dane",)), ("b", ("Cy Fell", "C. Fell")), ("c", None)]
    assert warnings == [
        f"{path}:{n}: meta.bridge: expected a name or a non-empty array of names (strings with a letter or digit); line skipped"
        for n in (4, 5, 6)
    ]


def test_bridge_searched_asks_a_later_query_to_name_the_bridge_as_whole_normalised_words():
    ex = Example(
        "a",
        "in which town was the author of The Quiet Ford born?",
        ("Ulm",),
        "demo",
        hops=2,
        bridge=("Bo Dane", "B. Dane"),
    )
    assert bridge_searched(ex, ["The Quiet Ford", "Bo Dane"]) == 1.0
    # normalised: case, punctuation, spaces
    assert bridge_searched(ex, ["The Quiet Ford", "born: bo  DANE, the writer"]) == 1.0
    assert bridge_searched(ex, ["The Quiet Ford", "b dane"]) == 1.0  # another of its names ("B. Dane" normalises so)
    # named first, not after what the first search found
    assert bridge_searched(ex, ["Bo Dane", "The Quiet Ford"]) == 0.0
    assert bridge_searched(ex, ["The Quiet Ford"]) == 0.0  # searched once
    assert bridge_searched(ex, []) == 0.0
    assert bridge_searched(ex, ["The Quiet Ford", "Dane"]) == 0.0  # part of the name is not the name
    assert bridge_searched(ex, ["The Quiet Ford", "Bo Danes"]) == 0.0  # whole words
    # no bridge: not counted
    assert bridge_searched(Example("b", "who wrote X?", ("Bo",), "demo", hops=1), ["X", "Bo"]) is None
    assert normalize("The  Rhône, an old river!") == "rhône old river"


def test_the_demo_worlds_name_the_bridge_of_every_two_hop_question_and_only_theirs():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples"
    for world in ("demo", "demo-multihop"):
        for split in ("train", "eval"):
            for e in load_dataset(str(root / world / f"{split}.jsonl")):
                assert (e.bridge is not None) == (e.hops == 2), e
                if e.bridge:
                    assert normalize(e.bridge[0]) not in normalize(e.question), e  # a question never names its bridge


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
