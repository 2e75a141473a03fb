"""The house keeps its shape (docs/ARCHITECTURE.md): components never import one another,
offline tools are imported by no runtime component, no import cycle, Kafka clients are built
only in infra/, every worker module is a short declaration, and cli/ only wires and prints."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "streams", "sinks", "trainer", "schemas", "infra", "cli", "tools", "bench")
COMPONENTS = ("agents", "streams", "sinks", "trainer")
CLIENTS = ("AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient")


@functools.cache
def modules() -> dict[str, Path]:
    out = {}
    for folder in PACKAGES:
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _named(module: str, names: list[ast.alias]) -> set[str]:
    """What ``from module import names`` depends on: each name that is a module, else the
    module itself."""
    known = modules()
    return {f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in names}


def imports(name: str, path: Path, *, top_level_only: bool) -> set[str]:
    """The package modules ``name`` imports (relative imports resolved)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if top_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                found.update(_named(module, node.names))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("safactory."):
                module = node.module.removeprefix("safactory.")
                found.update(_named(module, node.names))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])

    visit(tree.body)
    return found


def test_components_never_import_one_another_and_no_runtime_imports_tools() -> None:
    wrong = []
    for name, path in modules().items():
        mine = name.split(".")[0]
        for other in imports(name, path, top_level_only=False):
            theirs = other.split(".")[0]
            if mine in COMPONENTS and theirs != mine and theirs in (*COMPONENTS, "tools", "cli"):
                wrong.append(f"{name} -> {other}")
            if mine in ("schemas", "infra") and theirs in (*COMPONENTS, "tools", "cli"):
                wrong.append(f"{name} -> {other}")
    assert wrong == []


def test_no_import_cycle() -> None:
    known = modules()
    graph = {
        name: {d for d in imports(name, path, top_level_only=True) if d in known and d != name}
        for name, path in known.items()
    }
    done: set[str] = set()

    def cycle_from(start: str, trail: list[str]) -> list[str] | None:
        for nxt in graph[start]:
            if nxt in trail:
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in done and (found := cycle_from(nxt, [*trail, nxt])):
                return found
        done.add(start)
        return None

    cycles = [c for name in graph if name not in done and (c := cycle_from(name, [name]))]
    assert cycles == []


def test_kafka_clients_are_built_only_in_infra() -> None:
    """bench/ is exempt: it measures raw aiokafka side by side with ours on purpose."""
    built = [
        f"{name}: {client}"
        for name, path in modules().items()
        if name.split(".")[0] not in ("infra", "bench")
        for client in CLIENTS
        if f"{client}(" in path.read_text()
    ]
    assert built == []


def test_every_worker_is_a_short_declaration_and_cli_only_wires() -> None:
    workers = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for folder in COMPONENTS
        for p in (ROOT / folder).rglob("worker.py")
    }
    assert len(workers) >= 6
    assert {p: n for p, n in workers.items() if n > 90} == {}
    cli = sum(len(p.read_text().splitlines()) for p in (ROOT / "cli").rglob("*.py"))
    assert cli <= 2500
