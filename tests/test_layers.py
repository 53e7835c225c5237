"""Dependencies point one way (docs/design.md section 1): every package and module of specrl sits in
a layer, and imports only from its own layer or the layers below; nor do they import each other in
a cycle. Imports needed for annotations only (under ``if TYPE_CHECKING:``) do not count; an import
inside a function does.

    models <- engine <- controllers <- envs <- training / evaluation <- serving / distributed
    <- train (one run, start to report) <- cli (the specrl command)
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SPECRL = Path(__file__).resolve().parent.parent / "specrl"


def unit(module: str) -> str | None:
    """The layer a module belongs to: ``specrl.<package>`` or ``specrl.<module>``; None for the
    package root and ``python -m specrl``, which import everything on purpose."""
    parts = module.split(".")
    if parts[0] != "specrl" or len(parts) == 1 or parts[1] == "__main__":
        return None
    return ".".join(parts[:2])


def runtime_imports(path: Path) -> list[str]:
    """Modules ``path`` imports when it runs (anywhere but under ``if TYPE_CHECKING:``)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append(child.module)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def layer_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SPECRL.rglob("*.py"):
        module = ".".join(path.relative_to(SPECRL.parent).with_suffix("").parts).removesuffix(".__init__")
        source = unit(module)
        if source is None:
            continue
        targets = {unit(m) for m in runtime_imports(path)} - {None, source}
        graph.setdefault(source, set()).update(targets)
    return graph


LAYERS: tuple[tuple[str, ...], ...] = (  # bottom up; a new package or module must be placed here
    # no model, no engine
    ("names", "io", "tables", "plots", "provenance", "features", "acceptance", "home", "registration"),
    ("validation",),  # pydantic's errors in words (scenario files, the hyperparameter YAML)
    ("action_layout",),  # the action's dimensions: the envs, the policy folders, the learned controller
    ("embedded", "models", "pretrained"),  # pretrained: the fetched pairs (models reads their folders)
    ("engine", "export"),
    ("controllers", "traces", "latency", "hf_assisted", "selfcheck", "hf"),
    ("envs",),
    ("oracle", "trace_evaluation", "training", "rule_tuning", "batch_control", "evaluation", "serving"),
    ("distributed", "vllm", "train"),
    ("cli",),  # the specrl command: every subcommand calls the layers below
)
RANK = {f"specrl.{name}": rank for rank, names in enumerate(LAYERS) for name in names}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a layer into a layer above it, as 'importer -> imported'."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if RANK[target] > RANK[source]
    )


def test_every_layer_imports_only_its_own_layer_and_those_below():
    graph = layer_graph()
    unplaced = sorted((set(graph) | {t for targets in graph.values() for t in targets}) - set(RANK))
    assert not unplaced, f"place these in LAYERS (tests/test_layers.py): {unplaced}"
    assert upward_imports(graph) == []


def test_an_upward_import_is_found():
    """The check itself: the engine importing the envs points the wrong way."""
    graph = {"specrl.engine": {"specrl.models", "specrl.envs"}, "specrl.envs": {"specrl.engine"}}
    assert upward_imports(graph) == ["specrl.engine -> specrl.envs"]


def test_the_layers_of_specrl_import_each_other_without_a_cycle():
    graph = layer_graph()
    assert {"specrl.engine", "specrl.envs", "specrl.traces", "specrl.latency", "specrl.export"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"an import cycle between layers: {' -> '.join(error.args[1])}") from None
    # the ends of docs/design.md's chain, in its order
    assert order.index("specrl.models") < order.index("specrl.engine") < order.index("specrl.controllers")
    assert order.index("specrl.controllers") < order.index("specrl.envs") < order.index("specrl.training")


def test_a_cycle_is_found(tmp_path):
    """The check itself: two modules importing each other are a cycle."""
    (tmp_path / "a.py").write_text("from specrl.b import x\n")
    (tmp_path / "b.py").write_text("if TYPE_CHECKING:\n    from specrl.c import y\nimport specrl.a\n")
    assert runtime_imports(tmp_path / "a.py") == ["specrl.b"]
    assert runtime_imports(tmp_path / "b.py") == ["specrl.a"]
    graph = {"specrl.a": {"specrl.b"}, "specrl.b": {"specrl.a"}}
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError:
        return
    raise AssertionError("no cycle found")
