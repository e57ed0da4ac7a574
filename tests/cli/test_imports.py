"""Imports run one way: the contracts in pyproject.toml hold, every backend module has its layer, and
backend's modules (and gui's) form no cycle.

The cycle check walks every import statement of every module: those inside functions (a lazy
import is still a dependency) and those under `if TYPE_CHECKING:` (an annotation is one too)
included, as lint-imports does (pyproject.toml leaves exclude_type_checking_imports unset).
"""
import ast
import subprocess
import sys
import tomllib
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The backend modules `path` imports (a name imported from a package counts as its module if it is one)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules and m != name}


def package_graph(package: str) -> dict[str, set[str]]:
    """Each module of `package` (backend, gui) with the modules of the same package it imports."""
    paths = sorted((ROOT / package).rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def backend_graph() -> dict[str, set[str]]:
    return package_graph("backend")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_backend_has_no_import_cycle():
    graph = backend_graph()
    assert len(graph) > 40 and "backend.session" in graph and graph["backend.session"]
    assert cycles(graph) == []


def test_gui_has_no_import_cycle():
    graph = package_graph("gui")
    assert "gui.main_window" in graph and "gui.controllers.runs" in graph["gui.main_window"]
    assert cycles(graph) == []


def test_the_cli_contract_names_every_part_of_gui_but_its_start():
    """gui.app picks the command line or the window; every other module or package of gui/ is a
    source of the contract that keeps backend.cli out of the window."""
    import tomllib
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("forbidden_modules") == ["backend.cli"]]
    parts = {f"gui.{p.stem if p.suffix == '.py' else p.name}" for p in (ROOT / "gui").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert parts - {"gui.app"} == set(contract["source_modules"])


def backend_layers() -> list[str]:
    """The modules the layers contract over all of backend names (each layer's siblings split out)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers" and not c.get("containers")]
    return [name.strip() for layer in layers for group in layer.split("|") for name in group.split(":")]


def unplaced(modules, layers: list[str]) -> list[str]:
    """The modules in no layer: neither a layer nor inside one, nor a package that only holds layers."""
    def placed(m):
        return any(m == layer or m.startswith(layer + ".") or layer.startswith(m + ".") for layer in layers)
    return sorted(m for m in modules if not placed(m))


def test_every_backend_module_has_its_layer():
    """A module no layer names escapes the contract: a new one is placed in the flow when it is written."""
    layers = backend_layers()
    assert "backend.engine.process" in layers and "backend.sim" in layers
    assert unplaced(backend_graph(), layers) == []


def test_the_layer_check_finds_a_module_out_of_every_layer():
    layers = ["backend.cli", "backend.engine.loop"]
    assert unplaced(["backend", "backend.engine", "backend.engine.loop", "backend.cli.run", "backend.engine.new",
                     "backend.newer"], layers) == ["backend.engine.new", "backend.newer"]


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_cycle_check_counts_imports_under_type_checking(tmp_path):
    (tmp_path / "backend").mkdir()
    module = tmp_path / "backend" / "a.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from backend.b import B\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert imports_of(module, {"backend.a", "backend.b"}) == {"backend.b"}
    finally:
        ROOT = saved


def test_no_contract_leaves_type_checking_imports_out():
    text = (ROOT / "pyproject.toml").read_text()
    assert "exclude_type_checking_imports" not in text and "ignore_imports" not in text


def test_the_import_contracts_hold():
    """import-linter's contracts (pyproject.toml [tool.importlinter]): no Qt in backend, no torch in
    the scheduler and workloads, lower layers never importing upper ones."""
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and "Contracts: " in proc.stdout
