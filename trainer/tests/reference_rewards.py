"""A Python reference for Search-R1's answer rewards, written from the algorithms of
verl/utils/reward_score/qa_em.py and qa_em_format.py (normalize_answer, em/subem checks, extract_solution,
is_valid_sequence, the qa_em_format case table) and SQuAD's token F1. It exists so the TypeScript built-ins are
checked against *Python's* semantics — str.lower, string.punctuation, re's Unicode \\b, str.split — by running
Python: `python reference_rewards.py cases.jsonl` prints one JSON result per case.
"""

from __future__ import annotations

import collections
import json
import re
import string
import sys


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def em(prediction: str, golden: list[str]) -> int:
    p = normalize_answer(prediction)
    return int(any(normalize_answer(g) == p for g in golden))


def subem(prediction: str, golden: list[str]) -> int:
    p = normalize_answer(prediction)
    return int(any(normalize_answer(g) in p for g in golden))


def f1(prediction: str, golden: list[str]) -> float:
    best = 0.0
    pred = normalize_answer(prediction).split()
    for g in golden:
        gold = normalize_answer(g).split()
        common = collections.Counter(pred) & collections.Counter(gold)
        same = sum(common.values())
        if same == 0:
            continue
        precision, recall = same / len(pred), same / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def extract_solution(text: str):
    matches = list(re.finditer(r"<answer>(.*?)</answer>", text, re.DOTALL))
    return None if len(matches) <= 1 else matches[-1].group(1).strip()


def is_valid_sequence(text: str) -> bool:
    m = re.search(r"<\|im_start\|>assistant\s*", text)
    if not m:
        return False
    content = text[m.end() :]
    for tag in ("think", "search", "information", "answer"):
        if len(re.findall(f"<{tag}>", content)) != len(re.findall(f"</{tag}>", content)):
            return False
    state = "start"
    moves = {
        ("<think>", "start"): "in_think",
        ("<think>", "information"): "in_think",
        ("</think>", "in_think"): "after_think",
        ("<search>", "after_think"): "in_search",
        ("</search>", "in_search"): "after_search",
        ("<information>", "after_search"): "in_information",
        ("</information>", "in_information"): "information",
        ("<answer>", "after_think"): "in_answer",
        ("</answer>", "in_answer"): "end",
    }
    for part in re.split(r"(</?(?:think|search|information|answer)>)", content):
        if not part.strip():
            continue
        if re.match(r"</?(?:think|search|information|answer)>", part):
            if (part, state) not in moves:
                return False
            state = moves[(part, state)]
        elif state not in ("in_think", "in_search", "in_information", "in_answer"):
            return False
    return state == "end"


def retrieval_correct(text: str, golden: list[str]) -> bool:
    blocks = [b.strip() for b in re.findall(r"<information>(.*?)</information>", text, re.DOTALL)]
    return any(normalize_answer(g) in normalize_answer(b) for b in blocks for g in golden)


def qa_em_format(text: str, golden: list[str], structure=0.2, final=0.1, retrieval=0.0, score=1.0) -> float:
    valid = is_valid_sequence(text)
    correct_retrieval = valid and retrieval_correct(text, golden)
    answer = extract_solution(text)
    if answer is None:
        return (structure + retrieval if correct_retrieval else structure) if valid else 0
    if em(answer, golden):
        return score if valid else score - structure
    if valid:
        return structure + retrieval if correct_retrieval else structure
    return final


def final_answer(response: str):
    """The last complete <answer> outside <information> blocks (what our parser's final answer is)."""
    visible = re.sub(r"<information>.*?</information>", " ", response, flags=re.DOTALL)
    answers = re.findall(r"<answer>(.*?)</answer>", visible, re.DOTALL)
    return answers[-1].strip() if answers else None


def em_over_rollouts(path: str) -> None:
    """The benchmark peer: exact match over a rollout JSONL file, as a Python reward loop does it."""
    total = n = 0
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        r = json.loads(line)
        answer = final_answer(r["response"])
        total += 0 if answer is None else em(answer, r.get("golden") or [])
        n += 1
    print(json.dumps({"count": n, "mean": total / max(n, 1)}))


def main(path: str) -> None:
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        case = json.loads(line)
        out = {"id": case["id"]}
        if "prediction" in case:
            p, g = case["prediction"], case["golden"]
            out.update(normalized=normalize_answer(p), em=em(p, g), subem=subem(p, g), f1=f1(p, g))
        if "solution" in case:
            s, g = case["solution"], case["golden"]
            out.update(
                valid=is_valid_sequence(s),
                answer=extract_solution(s),
                em_format=qa_em_format(s, g),
                em_format_custom=qa_em_format(s, g, 0.3, 0.05, 0.1),
            )
        print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    if sys.argv[1] == "--em-rollouts":
        em_over_rollouts(sys.argv[2])
    else:
        main(sys.argv[1])
