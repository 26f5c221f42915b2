"""The trainer package's layers, read from its source (`ast`, every import: at the top of a module and inside its
functions, which run later but bind the modules just the same):

- no import cycle among the package's modules;
- an engine (the builtin `train.py`, `engines/*`) imports no other engine: what they share is engine-neutral;
- an engine-neutral module (everything but the engines and the entry points on top of them) imports no engine and
  no entry point: the metrics, versions, records, rollout protocol, recorder… know nothing of who trains.
The entry points may import engines: the CLI (`__main__`), the benchmarks, the environment report (asks the TRL
engine what it lacks) and `record/verl.py` (veRL's main_ppo with our recorder, for a user's own veRL job).
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "search_agent_trainer"
ENGINES = ("search_agent_trainer.train", "search_agent_trainer.engines.trl", "search_agent_trainer.engines.verl")
ENTRY_POINTS = (
    "search_agent_trainer.__main__",
    "search_agent_trainer.benchmark",
    "search_agent_trainer.tiny_benchmark",
    "search_agent_trainer.environment",
    "search_agent_trainer.record.verl",
)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root` by dotted name (a package by its own name: its __init__)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = [root.name, *p.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports, anywhere in its source. `from X import a` is module X.a when
    that is a module, else X (its __init__)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                out.add(f"{source}.{a.name}" if f"{source}.{a.name}" in known else source)
    return {m for m in out if m in known and m != name}


def graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles (Tarjan's strongly connected components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def engine_of(name: str) -> str | None:
    return next((e for e in ENGINES if name == e or name.startswith(e + ".")), None)


def is_entry_point(name: str) -> bool:
    return name in ENTRY_POINTS


def layer_violations(g: dict[str, set[str]]) -> list[str]:
    out = []
    for name, deps in sorted(g.items()):
        mine = engine_of(name)
        for d in sorted(deps):
            theirs = engine_of(d)
            if mine is not None and theirs is not None and theirs != mine:
                out.append(f"{name} (engine) imports {d}, another engine's")
            elif mine is None and not is_entry_point(name) and (theirs is not None or is_entry_point(d)):
                out.append(f"{name} (engine-neutral) imports {d}")
    return out


def test_the_trainer_package_has_no_import_cycle():
    assert cycles(graph(PACKAGE)) == []


def test_no_engine_imports_another_and_engine_neutral_modules_import_no_engine():
    assert layer_violations(graph(PACKAGE)) == []


def test_the_engines_and_the_shared_modules_are_the_ones_the_rules_name():
    g = graph(PACKAGE)
    for name in (
        *ENGINES,
        *ENTRY_POINTS,
        "search_agent_trainer.run",
        "search_agent_trainer.metrics",
        "search_agent_trainer.record.tokens",
    ):
        assert name in g, name  # a renamed module would make a rule vacuous
    # the TRL engine and the veRL recorder read the shared modules, not the builtin engine
    assert "search_agent_trainer.run" in g["search_agent_trainer.engines.trl.engine"]
    assert "search_agent_trainer.metrics" in g["search_agent_trainer.engines.verl.recorder"]


def test_the_checks_find_a_cycle_through_an_import_inside_a_function_and_a_layer_crossed(tmp_path):
    pkg = tmp_path / "search_agent_trainer"
    (pkg / "engines" / "trl").mkdir(parents=True)
    for f in ("__init__.py", "engines/__init__.py", "engines/trl/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "rollout.py").write_text("from .data import Example\n\ndef make():\n    from .toolcall import ToolCall\n")
    (pkg / "toolcall.py").write_text("from .rollout import Action\n")
    (pkg / "data.py").write_text("from . import train\n")
    (pkg / "train.py").write_text("import search_agent_trainer.data\n")
    (pkg / "engines" / "trl" / "engine.py").write_text("from ...train import Trainer\nfrom . import options\n")
    (pkg / "engines" / "trl" / "options.py").write_text("")
    g = graph(pkg)
    assert cycles(g) == [
        ["search_agent_trainer.data", "search_agent_trainer.train"],
        ["search_agent_trainer.rollout", "search_agent_trainer.toolcall"],
    ]
    assert layer_violations(g) == [
        "search_agent_trainer.data (engine-neutral) imports search_agent_trainer.train",
        "search_agent_trainer.engines.trl.engine (engine) imports search_agent_trainer.train, another engine's",
    ]
