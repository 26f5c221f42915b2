import math

import pytest

from search_agent_trainer.train import lr_multiplier


def test_linear_warmup_then_constant():
    assert [lr_multiplier(s, 100, 4, "constant", 0.0) for s in (1, 2, 4, 5, 100)] == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_cosine_after_warmup_ends_at_min_ratio():
    assert lr_multiplier(10, 110, 10, "cosine", 0.1) == 1.0
    assert lr_multiplier(110, 110, 10, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_multiplier(60, 110, 10, "cosine", 0.1) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)))
    values = [lr_multiplier(s, 110, 10, "cosine", 0.0) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:])), "monotone after the warm-up"
