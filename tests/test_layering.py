"""The package's shape: no import cycles (any import statement, module level or inside a
function); the core never reaches the lab or PyTorch, checked statically over every import
statement and dynamically over every core entry point, each check with a positive control
(a planted import must fail it); registries are complete after ``import vsekit.lab``."""

from __future__ import annotations

import ast
import json
import os
import shutil
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


# What the core must never import, at any level (module or function): the lab, and the
# packages only the lab needs. The core is every vsekit module outside vsekit.lab.
LAB = "vsekit.lab"
LAB_ONLY = ("torch", "torchvision", "matplotlib", "spacy", "transformers", "skimage",
            "pyarrow", "librosa", "onnx", "efficientnet_lite_pytorch")  # fmt: skip
# The graph writer (the wheel build's, no PyTorch) may also import ``onnx``; the rest of
# the core never imports it, so that running a model never needs ``onnx``.
BUILD, BUILD_ALSO = "vsekit.graphs", ("onnx",)


def core_violations(src: Path = SRC) -> list[str]:
    """``"module imports name"`` for every import statement of a core module (module
    level, inside a function, or under ``TYPE_CHECKING``) that names the lab or a
    lab-only package; relative imports are resolved first."""
    bad = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src.parent).with_suffix("").parts
        mod = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
        if mod == LAB or mod.startswith(LAB + "."):
            continue
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{base}" if base else up
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            in_build = mod == BUILD or mod.startswith(BUILD + ".")
            for n in names:
                top = n.split(".")[0]
                if in_build and top in BUILD_ALSO:
                    continue
                if n == LAB or n.startswith(LAB + ".") or top in LAB_ONLY:
                    bad.append(f"{mod} imports {n}")
                elif not in_build and (n == BUILD or n.startswith(BUILD + ".")):
                    bad.append(f"{mod} imports {n} (the build's graph writer)")
    return bad


def test_core_never_imports_the_lab_or_torch():
    """Static: no import statement of the core names the lab or PyTorch."""
    assert core_violations() == []


def _copy_of_package(dst: Path) -> Path:
    """A copy of ``src/vsekit`` under ``dst`` (the assets linked, not copied)."""
    shutil.copytree(SRC, dst / "vsekit", ignore=shutil.ignore_patterns("assets", "__pycache__"))
    (dst / "vsekit" / "assets").symlink_to(SRC / "assets")
    return dst / "vsekit"


def _plant(pkg: Path, module: str, line: str) -> None:
    """Add ``line`` to ``module`` of the copy ``pkg``, inside a function (the hardest
    place for a check to see)."""
    f = pkg.joinpath(*module.split(".")[1:]).with_suffix(".py")
    f.write_text(f.read_text() + f"\n\ndef _planted():\n    {line}\n")


@pytest.mark.parametrize("line", ["import torch", "from vsekit.lab.losses import LOSSES",
                                  "from ..lab import registries"])  # fmt: skip
def test_static_check_catches_a_planted_import(tmp_path, line):
    pkg = _copy_of_package(tmp_path)
    assert core_violations(pkg) == []
    _plant(pkg, "vsekit.runtime.base", line)
    found = core_violations(pkg)
    assert len(found) >= 1 and found[0].startswith("vsekit.runtime.base imports ")


def _fresh(code: str, env: dict | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=SRC.parents[1],
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


# Every entry point of the core, in a fresh interpreter where PyTorch is installed: after
# it, neither torch nor any module of the lab may have been imported.
CORE_RUN = """
import json, sys
from pathlib import Path
import vsekit
from vsekit.serve.app import create_app
from fastapi.testclient import TestClient
m = vsekit.load_model()
t = m.encode_text(["a dog", "a red square"])
i = m.encode_image(PHOTO)
v = m.encode_video(VIDEO) if VIDEO else None
s = m.similarity(i, t)
r = m.retrieval_scores(i, t)
a = m.annotate(PHOTO, k=2)
g = m.tags(PHOTO, k=3)
index = vsekit.open_index(INDEX, create=True)
index.add(FOLDER)
hits = index.search("a red square", k=2)
assert len(index.search(Path(PHOTO), k=1, method="faiss")) == 1  # by image, FAISS
from vsekit.cli import main
assert main(["search", "a dog", "--index", INDEX, "--k", "1"]) == 0  # the CLI's own path
assert main(["annotate", PHOTO, "--k", "1"]) == 0
client = TestClient(create_app(index.collection, index.model), base_url="http://127.0.0.1")
status = client.get("/search", params={"q": "a dog", "k": 2}).status_code
loaded = sorted(k for k in sys.modules
                if k.split(".")[0] in ("torch", "torchvision") or k.startswith("vsekit.lab"))
print(json.dumps({"dims": [t.shape[1], i.shape[0]], "sims": list(s.shape),
                  "annotate": len(a), "hits": len(hits), "status": status, "loaded": loaded}))
"""


def _core_run(tmp_path: Path, photo: Path, pythonpath: Path | None = None) -> dict:
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(photo, folder / photo.name)
    video = _tiny_video(tmp_path)
    code = (
        f"PHOTO, VIDEO = {str(photo)!r}, {video and str(video)!r}\n"
        f"INDEX, FOLDER = {str(tmp_path / 'index')!r}, {str(folder)!r}\n" + CORE_RUN
    )
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return json.loads(_fresh(code, env).strip().splitlines()[-1])


def _tiny_video(tmp_path: Path) -> Path | None:
    """A 1-second clip (PyAV, the [video] extra), or None where it is not installed."""
    try:
        from tests.media import write_video
    except ImportError:
        return None
    out = tmp_path / "clip.mp4"
    write_video(out, [(200, 30, 30), (30, 200, 30)], seconds_each=0.5)
    return out


@pytest.mark.slow
def test_core_entry_points_never_load_torch_or_the_lab(tmp_path, flickr8k_root):
    """Dynamic: load_model, every encode_*, similarity, retrieval_scores, annotate, tags,
    open_index (add and search) and a request to create_app's service."""
    pytest.importorskip("torch")  # the check means something only where torch exists
    photo = next((flickr8k_root / "images").glob("*.jpg"))
    res = _core_run(tmp_path, photo)
    assert res["dims"][0] == res["dims"][1] and res["sims"] == [1, 2]
    assert res["annotate"] == 2 and res["hits"] == 1 and res["status"] == 200
    assert res["loaded"] == []


@pytest.mark.slow
def test_dynamic_check_catches_a_planted_import(tmp_path, flickr8k_root):
    """The same run over a copy of the package with ``import torch`` planted in a core
    module that load_model reaches: the check must see torch."""
    pytest.importorskip("torch")
    pkg = _copy_of_package(tmp_path / "src")
    f = pkg / "runtime" / "base.py"
    f.write_text(
        f.read_text().replace("import numpy as np\n", "import numpy as np\nimport torch\n", 1)
    )
    photo = next((flickr8k_root / "images").glob("*.jpg"))
    work = tmp_path / "run"
    work.mkdir()
    res = _core_run(work, photo, pythonpath=pkg.parent)
    assert "torch" in res["loaded"]


def test_registries_complete_after_import_vsekit():
    """Every registry lists all its members in a fresh interpreter, whatever is imported
    first; compared with the lists after importing every vsekit module."""
    listing = """
import json, vsekit.lab
print(json.dumps({name: fn() for name, fn in vsekit.lab.registries().items()}))
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
