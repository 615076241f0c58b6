"""The one-way data flow of STYLE.md section 1 and the no-magic-constants rule of section 7."""

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "madmax"

# Which madmax packages each layer may import (besides itself and madmax.errors). Every module and
# package of src/madmax is listed (test_every_package_has_a_layer): data flows one way,
# config -> workload -> parallel -> program (with hardware costs and the sim scheduler) -> results ->
# analysis (search, sweep, validate, report) -> api and cli.
ANALYSIS = {"config", "collective", "workload", "hardware", "parallel", "sim", "program", "results", "request",
            "catalog", "serve", "terminal"}
ALLOWED = {
    "errors": set(),
    "catalog": set(),
    "collective": set(),
    "config": set(),
    "sim": set(),
    "terminal": set(),  # consoles and progress bars: rich only
    "workload": {"config"},
    "hardware": {"config", "collective", "workload"},
    "parallel": {"config", "workload", "collective"},
    "program": {"config", "workload", "parallel", "hardware", "collective", "sim"},
    "results": {"config", "workload", "parallel", "hardware", "collective", "sim", "program"},
    "request": {"config", "workload"},
    # serving: the modes over a deployment's steps, assembled into a result
    "serve": {"config", "collective", "workload", "parallel", "hardware", "sim", "program", "results", "request"},
    "bench": {"config", "hardware"},
    "validate": ANALYSIS | {"api", "rl"},
    "search": ANALYSIS | {"api"},
    # RL post-training: one step composed of the serving, forward and training simulations
    "rl": ANALYSIS | {"api", "search"},
    "sweep": ANALYSIS | {"api", "search"},
    "report": ANALYSIS | {"sweep", "search"},
    "api": ANALYSIS | {"validate"},
    "cli": ANALYSIS | {"api", "bench", "report", "search", "sweep", "validate", "web", "rl"},
    # the HTTP API and page over api, search and sweep (madmax web)
    "web": ANALYSIS | {"api", "search", "sweep", "report", "rl"},
    "__init__": {"api", "search", "rl"},
    "__main__": {"cli"},
}


def _imports(path: Path) -> set[str]:
    """The madmax layers `path` imports: `madmax.X...` and `from madmax import X` name layer X; the package's
    own names (`from madmax import simulate`, `import madmax`) are its top level, "__init__"."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("madmax."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "madmax" and node.level == 0:
            found |= {a.name if a.name in ALLOWED else "__init__" for a in node.names if a.name != "__version__"}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("madmax."):
                    found.add(alias.name.split(".")[1])
                elif alias.name == "madmax":
                    found.add("__init__")
    return found


def test_the_guard_sees_every_form_of_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from madmax import api\nfrom madmax import simulate\nimport madmax\nimport madmax.sim.engine\n"
                      "from madmax.config import base\nfrom madmax import __version__\n")
    assert _imports(source) == {"api", "__init__", "sim", "config"}


def test_every_package_has_a_layer():
    found = {p.stem for p in SRC.iterdir() if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    assert found == set(ALLOWED), f"give each module a layer in ALLOWED: {sorted(found ^ set(ALLOWED))}"


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_point_down(layer):
    paths = [SRC / f"{layer}.py"] if (SRC / f"{layer}.py").exists() else sorted((SRC / layer).rglob("*.py"))
    for path in paths:
        upward = _imports(path) - ALLOWED[layer] - {layer, "errors"}
        assert not upward, f"{path.relative_to(SRC)} imports {sorted(upward)}"


def test_help_does_not_import_heavy_libraries():
    import subprocess
    import sys

    heavy = "('pandas', 'matplotlib', 'plotly', 'dask', 'fastapi', 'uvicorn')"
    code = f"import sys, madmax.cli; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


FLOAT = re.compile(r"(?<![\w.])\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])|(?<![\w.])\d+[eE][-+]?\d+")
EXACT = {"0.0", "1.0", "2.0", "0.5", "1e3", "1e6"}


@pytest.mark.parametrize("package", ["workload", "parallel", "hardware", "sim"])
def test_no_magic_float_constants(package):
    # Efficiencies and hardware numbers live in catalog data files; code holds exact mathematics only.
    for path in sorted((SRC / package).rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and id(node) not in docstrings:
                literal = ast.get_source_segment(path.read_text(), node) or ""
                assert literal in EXACT or FLOAT.fullmatch(literal) is None, (
                    f"{path.relative_to(SRC)}:{node.lineno} has the constant {literal}")
