"""The arrows between heed's rooms run one way (DESIGN.md): translating loads neither the trainer
nor, until an exported model is used, onnx / onnxruntime / ctranslate2. And tests/ mirrors the
rooms: a test file is in tests/<room>/, or at the root with the reason it tests no one room."""
import ast
import subprocess
import sys


def _loaded_after(statement: str, modules: tuple[str, ...]) -> list[str]:
    code = f"import sys; {statement}; print(sorted(m for m in {modules!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return ast.literal_eval(result.stdout.strip())  # a printed list of names


def test_importing_the_api_does_not_import_the_trainer():
    assert _loaded_after("import heed.api", ("heed.train",)) == []


def test_importing_the_exported_model_runtime_loads_neither_the_trainer_nor_onnx():
    assert _loaded_after("import heed.api, heed.export.ort, heed.export.onnx, heed.export.load, heed.export.ct2, "
                         "heed.export.ct2_run, heed.export.argos, heed.export.argos_sbd",
                         ("heed.train", "onnx", "onnxruntime", "ctranslate2", "argostranslate", "minisbd")) == []


def test_reading_a_config_loads_neither_torch_nor_the_model_code():
    assert _loaded_after("import heed.config", ("torch", "heed.nn.build", "heed.search")) == []


def test_reading_a_config_of_either_family_imports_its_config_class_alone():
    """The registry (heed.nn.families) names each family's halves by import path: validating `model:`
    imports the families' config modules, never a Family, a builder or torch."""
    statement = ("from heed.config import config_from_dict; "
                 "config_from_dict({'data': {'task': 'dates'}, 'model': {'family': 'transformer'}}); "
                 "config_from_dict({'data': {'task': 'dates'}, 'model': {'family': 'rnn'}})")
    assert _loaded_after(statement, ("torch", "heed.nn.build", "heed.nn.rnn.family", "heed.nn.transformer.family",
                                     "heed.nn.rnn.build", "heed.nn.transformer.model", "heed.search")) == []


def test_heed_prepare_loads_no_model_code():
    """`heed prepare` tokenizes a corpus: it needs the config and the data code, not the models."""
    assert _loaded_after("import heed.data.prepare", ("heed.nn.build", "heed.nn.rnn.encoder", "heed.nn.rnn.decoder",
                                                 "heed.search", "heed.train")) == []


# ------------------------------------------------------------------------------ the rooms' rules
# docs/design.md draws the rooms; these are the arrows it forbids, read off every module's imports
# (function-level ones too, which a lazy import would otherwise hide).

import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "heed"

# room -> the rooms it must not import
FORBIDDEN = {
    "nn": {"explain", "train", "cli", "serve", "api", "export"},
    "search": {"explain", "train", "cli", "serve", "api"},
    "explain": {"api", "train", "cli", "serve"},
    "data": {"explain", "train", "cli", "serve", "api", "nn", "search"},
    "plumbing": {"api", "checkpoint", "cli", "config", "data", "demo", "evaluate", "explain", "export", "nn",
                 "search", "serve", "train", "viz"},
    "train": {"cli", "serve"},
    "serve": {"cli", "train"},
    "export": {"cli", "serve", "train"},
    "markup": {"cli", "serve", "train", "nn", "search"},
}


def _rooms_imported(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found |= {name.split(".")[1] for name in names if name.startswith("heed.")}
    return found


def _room(path: pathlib.Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def test_every_room_imports_only_what_the_design_allows():
    broken = [f"{path.relative_to(SRC)} imports heed.{room}"
              for path in sorted(SRC.rglob("*.py"))
              for room in sorted(_rooms_imported(path) & FORBIDDEN.get(_room(path), set()))]
    assert broken == []


def test_nothing_but_the_entry_point_imports_the_cli():
    users = sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
                   if "cli" in _rooms_imported(path) and _room(path) != "cli")
    assert users == ["__main__.py"]


def test_the_rule_reader_sees_a_forbidden_import(tmp_path):
    """The check can fail: a module of nn/ that imports the trainer, even inside a function, is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from heed.train.loop import Trainer\n    import heed.cli.app\n")
    assert _rooms_imported(bad) == {"train", "cli"}


def test_no_room_outside_a_family_names_a_field_only_that_family_has():
    """A family's own words stay in its folder and the registry (nn/build.py, nn/model_config.py);
    scratch/ is the NumPy RNN and its bridge to the RNN family, so it speaks the RNN's words."""
    import re

    own = re.compile(r"\b(luong|bahdanau|input_feeding|hidden_size|d_model|ff_size)\b")
    allowed = ("nn/rnn/", "nn/transformer/", "scratch/", "nn/build.py", "nn/model_config.py")
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py"))
             if not str(path.relative_to(SRC)).startswith(allowed)
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if own.search(line)]
    assert found == []


# The modules the reading registry made or changed (issue 55): none takes another module's private
# name (`from heed.api import _Stoppable`), and heed.explain's reading modules do not import the
# facade (heed.api): they read (model, codec, device).
READING_MODULES = ("results.py", "api.py", "explain/readings.py", "explain/pairs.py", "explain/heads.py",
                   "explain/given_pairs.py", "explain/contributions.py", "explain/logit_lens.py",
                   "explain/attribution.py", "explain/contrast.py", "explain/source_share.py", "cli/readings.py", "cli/translate.py", "cli/__init__.py", "serve/app.py",
                   "serve/costs.py", "serve/schemas.py", "plumbing/limits.py")
FACADE_FREE = ("explain/readings.py", "explain/pairs.py", "explain/heads.py", "explain/given_pairs.py",
               "explain/contributions.py", "explain/logit_lens.py", "explain/attribution.py", "explain/contrast.py",
               "explain/source_share.py", "results.py")


def _private_imports(path: pathlib.Path) -> list[str]:
    """`module.name` for every private name (a leading underscore, not a dunder) `path` imports
    from heed, at any depth (function-level imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "heed":
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("heed.")
                      and any(p.startswith("_") and not p.startswith("__") for p in a.name.split("."))]
    return found


def test_no_private_name_crosses_a_module_in_the_reading_modules():
    found = [f"{name} imports {private}" for name in READING_MODULES for private in _private_imports(SRC / name)]
    assert found == []


def test_the_private_import_reader_sees_one(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from __future__ import annotations\nfrom heed.api import Translator, _check_texts\n"
                   "def f():\n    from heed.api import _Stoppable\n")
    assert _private_imports(bad) == ["heed.api._check_texts", "heed.api._Stoppable"]


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_private_name_crosses_a_module_anywhere_in_heed():
    """A name with a leading underscore is its module's own: one another module needs is public
    (docs/design.md, the arrows). A module may still import its own names."""
    found = [f"{path.relative_to(SRC)} imports {private}" for path in sorted(SRC.rglob("*.py"))
             for private in _private_imports(path)
             if private.rpartition(".")[0] != _module_name(path)]
    assert found == []


def test_the_reading_modules_of_explain_do_not_import_the_facade():
    assert [name for name in FACADE_FREE if "api" in _rooms_imported(SRC / name)] == []


# ------------------------------------------------------------------------------ no import cycle
# Every import statement of every module (module-level, in a function, under TYPE_CHECKING) is an
# arrow to the most specific heed module it names (`from heed.a import b` is heed.a.b where that is
# a module, else heed.a). No module may reach itself along the arrows: the facade (heed.api, and
# the root package's heed.load) stands above what it uses, never beside it.


def _module_name(path: pathlib.Path, src: pathlib.Path) -> str:
    parts = path.relative_to(src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(src: pathlib.Path) -> dict[str, set[str]]:
    """module -> the modules of the package at `src` its import statements name (see above)."""
    modules = {_module_name(path, src): path for path in sorted(src.rglob("*.py"))}
    root = src.name

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        named: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from its package, up level - 1
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                named += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        graph[name] = {target for n in named if n.split(".")[0] == root
                       and (target := known(n)) is not None and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycle_among_heeds_modules():
    cycle = find_cycle(import_graph(SRC))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle_through_a_function_and_type_checking(tmp_path):
    """The check can fail: a cycle closed only by a TYPE_CHECKING import, through a relative import
    and a function-level one, is found and printed."""
    pkg = tmp_path / "heed"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from heed.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .c import x\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import heed.a\nx = 1\n")
    graph = import_graph(pkg)
    assert graph["heed.a"] == {"heed.sub.b"} and graph["heed.sub.b"] == {"heed.sub.c"}
    assert find_cycle(graph) == ["heed.a", "heed.sub.b", "heed.sub.c", "heed.a"]
    (pkg / "sub" / "c.py").write_text("x = 1\n")
    assert find_cycle(import_graph(pkg)) is None


def test_the_facade_stays_small():
    """heed.api is the facade above the rest, not a room of its own: under 700 lines, and Translator
    at most 25 methods (properties, classmethods and staticmethods counted); what it does lives in
    the modules below it (translations, decoding, explain/)."""
    source = (SRC / "api.py").read_text(encoding="utf-8")
    translator = next(node for node in ast.parse(source).body
                      if isinstance(node, ast.ClassDef) and node.name == "Translator")
    methods = [node.name for node in translator.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(source.splitlines()) < 700
    assert len(methods) <= 25, methods


def test_no_module_imports_the_root_package():
    """The root package imports heed.api (heed.load), so a module under it that imported the root
    (`import heed` for heed.__version__) would sit beside the facade; the version is heed.version's."""
    assert [name for name, imported in import_graph(SRC).items() if "heed" in imported] == []


# ------------------------------------------------------------------------------ tests/ mirrors the rooms
# A test file lives in the folder of the room it tests: src/heed/serve/ -> tests/serve/, and a
# top-level module's tests in a folder of its name (checkpoint.py -> tests/checkpoint/). The shared
# helpers (conftest.py, search_fakes.py, cli_helpers.py, ...) stay at tests/'s root, where pytest's
# `pythonpath = ["tests"]` makes them importable from every folder.

TESTS = pathlib.Path(__file__).resolve().parent

# tests/'s folders that are not rooms: what the tests read or register, not tests of a room
TEST_HELPER_FOLDERS = {
    "fixtures": "a model directory from before the families' seam, and the script that made it",
    "snapshots": "every command's help, the OpenAPI schema and the readings' answers, byte for byte",
    "toy_family": "a whole model family made in the tests, registered by tests/nn/test_family_contract.py",
}

# the test files that stay at tests/'s root, because no one room is what they test
CROSS_CUTTING = {
    "test_imports.py": "the arrows between all the rooms, and this mirror",
    "test_snapshots.py": "what a user sees of every command and of the server",
    "test_bad_inputs.py": "every command's bad inputs, one line and exit 2 each",
    "test_bad_inputs_hub.py": "a hostile hub against both `heed import` and heed.load",
    "test_property_inputs.py": "random bytes to every reader (corpora, configs, YAML)",
    "test_fast_paths.py": "the speed tricks of translating, training and the attention kernel together",
    "test_docs.py": "the docs' examples, run as a user runs them",
    "test_docs_site.py": "the documentation site over docs/",
    "test_readme_commands.py": "the README's commands after the demo",
    "test_packaging.py": "the wheel and sdist, installed into a fresh venv",
    "test_make_venv.py": "tools/make_venv.py",
    "test_bench_compare_configs.py": "bench/compare's heed configs",
}


def heed_rooms(src: pathlib.Path) -> set[str]:
    """The rooms a folder of tests/ may be named after: heed's subpackages and top-level modules."""
    packages = {p.parent.name for p in src.glob("*/__init__.py")}
    modules = {p.stem for p in src.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return packages | modules


def mirror_faults(tests: pathlib.Path, src: pathlib.Path) -> list[str]:
    """What breaks the mirror: a folder of tests/ that is neither a room nor a helper folder, and a
    test file at tests/'s root that is not in CROSS_CUTTING."""
    rooms = heed_rooms(src)
    faults = [f"tests/{p.name}/ is not a room of src/heed (rooms: {', '.join(sorted(rooms))})"
              for p in sorted(tests.iterdir())
              if p.is_dir() and not p.name.startswith((".", "__")) and p.name not in rooms | TEST_HELPER_FOLDERS.keys()]
    faults += [f"tests/{p.name} belongs in the folder of the room it tests (tests/<room>/), or in "
               f"test_imports.CROSS_CUTTING with the reason it tests no one room"
               for p in sorted(tests.glob("test_*.py")) if p.name not in CROSS_CUTTING]
    return faults


def test_tests_mirror_the_package():
    assert mirror_faults(TESTS, SRC) == []


def test_every_cross_cutting_test_and_helper_folder_exists():
    """The lists above name what is there: a file moved into a room leaves CROSS_CUTTING."""
    assert [name for name in CROSS_CUTTING if not (TESTS / name).is_file()] == []
    assert [name for name in TEST_HELPER_FOLDERS if not (TESTS / name).is_dir()] == []


def test_the_mirror_reader_sees_a_stray_folder_and_a_flat_test_file(tmp_path):
    src, tests = tmp_path / "src" / "heed", tmp_path / "tests"
    (src / "serve").mkdir(parents=True)
    (src / "serve" / "__init__.py").write_text("")
    (src / "checkpoint.py").write_text("")
    for folder in ("serve", "checkpoint", "fixtures", "__pycache__", "serving"):
        (tests / folder).mkdir(parents=True)
    for name in ("conftest.py", "search_fakes.py", "test_imports.py", "test_serve_api.py"):
        (tests / name).write_text("")
    faults = mirror_faults(tests, src)
    assert len(faults) == 2
    assert faults[0].startswith("tests/serving/ is not a room")
    assert faults[1].startswith("tests/test_serve_api.py belongs in the folder")
