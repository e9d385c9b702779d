"""The package's shape: no import cycles (any import statement, module level or inside a
function), inference never imports training, and registries are complete after
``import vsekit`` in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vsekit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of vsekit it imports`` from every import statement in the
    source (``ast``), resolved to the most specific vsekit module that exists."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        pkg = mod if is_pkg else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {
            id(n)
            for b in ast.walk(tree)
            if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)
            for s in b.body
            for n in ast.walk(s)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                if t.split(".")[0] != "vsekit":
                    continue
                r = resolve(t)
                if r and r != mod:
                    graph[mod].add(r)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules, or None. A package importing its own submodules
    (``__init__`` re-exports) is not a cycle unless a submodule imports back a module
    that depends on it."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            # a submodule "importing" its parent package for a re-exported name
            if m.startswith(n + ".") and n in graph:
                continue
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (c := visit(n)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


INFERENCE = ("data", "images", "fsio", "registry", "runtime", "eval", "index", "serve")


def test_inference_modules_never_import_training():
    """Static: nothing reachable from the inference core is under ``vsekit.train``."""
    graph = import_graph()
    roots = [m for m in graph if m.split(".")[1:2] and m.split(".")[1] in INFERENCE]
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(graph[m])
    bad = sorted(m for m in seen if m.startswith("vsekit.train"))
    assert not bad, f"inference reaches training modules: {bad}"


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_load_model_and_encode_without_training_modules(tmp_path):
    """A fresh interpreter embeds text and an image with the default model and never
    loads ``vsekit.train*`` (nor anything used only for training)."""
    from PIL import Image

    img = tmp_path / "x.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(img)
    code = f"""
import sys, json, vsekit
m = vsekit.load_model()
t = m.encode_text(["a dog", "a red square"])
i = m.encode_image({str(img)!r})
loaded = sorted(k for k in sys.modules if k.startswith("vsekit.train") or k in
    ("vsekit.tags.mining", "vsekit.losses", "matplotlib"))
print(json.dumps({{"t": list(t.shape), "i": list(i.shape), "loaded": loaded}}))
"""
    res = json.loads(_fresh(code).strip().splitlines()[-1])
    assert res["t"][0] == 2 and len(res["i"]) == 1 and res["i"][0] == res["t"][1]
    assert res["loaded"] == []


def test_registries_complete_after_import_vsekit():
    """Every registry lists all its members in a fresh interpreter, whatever is imported
    first; compared with the lists after importing every vsekit module."""
    listing = """
import json, vsekit
print(json.dumps({name: fn() for name, fn in vsekit.registries().items()}))
"""
    fresh = json.loads(_fresh(listing).strip().splitlines()[-1])
    everything = (
        "import pkgutil, importlib, json, vsekit\n"
        "for m in pkgutil.walk_packages(vsekit.__path__, 'vsekit.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n" + listing.split("\n", 2)[2]
    )
    full = json.loads(_fresh(everything).strip().splitlines()[-1])
    assert fresh == full
    assert {"sje", "listsje", "sum_hinge", "max_hinge", "mse"} <= set(fresh["losses"])
    assert {"bow", "trigram", "mean_glove", "gru", "lstm"} <= set(fresh["text_encoders"])
    assert {"joint", "w2vv", "bilinear"} <= set(fresh["models"])
    assert {"resnet50", "vgg16", "efficientnet-lite0"} <= set(fresh["backbones"])


@pytest.mark.slow
def test_onnx_backend_runs_without_torch(flickr8k_root):
    """What a `pip install vsekit` user runs: with PyTorch unimportable, the default
    model (its word-piece tower included) embeds text and a photo on ONNX Runtime."""
    photo = next((flickr8k_root / "images").glob("*.jpg"))
    code = (
        "import importlib.abc, sys\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"  # every `import torch` now fails
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
        "            raise ImportError(f'{name} is not installed (test)')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import vsekit\n"
        "m = vsekit.load_model(backend='onnx')\n"
        "t = m.encode_text(['a canine catches a frisbee'])\n"
        f"i = m.encode_image({str(photo)!r})\n"
        "print(t.shape[1] == i.shape[0] == m.embed_dim)\n"
    )
    assert _fresh(code).strip() == "True"
