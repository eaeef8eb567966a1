"""What a user sees of heed's surface, held still across refactors: every command's help (its text,
and every option's flags, help, default and type, as click describes them) and the server's OpenAPI
schema, byte for byte against tests/snapshots/. A change to either must be meant: rerun with
HEED_UPDATE_SNAPSHOTS=1 to rewrite the files, and the diff shows what users will see."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer

SNAPSHOTS = Path(os.environ.get("HEED_SNAPSHOT_DIR") or Path(__file__).resolve().parent / "snapshots")
UPDATE = os.environ.get("HEED_UPDATE_SNAPSHOTS") == "1"


def _canonical(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=repr) + "\n"


def _check(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run with HEED_UPDATE_SNAPSHOTS=1 to make it"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; if that is meant, HEED_UPDATE_SNAPSHOTS=1"


def _params(command: Any) -> list[dict[str, Any]]:
    """Each option's and argument's flags, help, default, bounds and whether it is required."""
    fields = ("name", "opts", "secondary_opts", "help", "default", "required", "hidden", "min", "max")
    return [{f: getattr(p, f, None) for f in fields} for p in command.params]


def _commands(command: Any, path: tuple[str, ...] = ("heed",)) -> dict[str, Any]:
    """Every command and group under `command`, by its full name: its help and its parameters."""
    out = {" ".join(path): {"help": command.help, "epilog": command.epilog, "params": _params(command)}}
    for name, sub in (getattr(command, "commands", None) or {}).items():
        out.update(_commands(sub, (*path, name)))
    return out


def test_every_commands_help_is_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("NO_COLOR", "1")
    from typer.testing import CliRunner

    from heed.cli import app

    commands = _commands(typer.main.get_command(app))
    assert {"heed", "heed train", "heed translate", "heed serve", "heed data get"} <= set(commands)
    runner = CliRunner()
    for name, info in commands.items():
        shown = runner.invoke(app, [*name.split()[1:], "--help"])
        assert shown.exit_code == 0, (name, shown.output)
        # The frame of the rendered text depends on rich's version; the words do not.
        info["help_text"] = " ".join(shown.output.replace("│", " ").replace("─", " ").replace("╭", " ")
                                     .replace("╮", " ").replace("╰", " ").replace("╯", " ").split())
    _check("cli_help.json", _canonical(commands))


def test_the_openapi_schema_is_as_recorded(trained_run: Path) -> None:
    pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
    from heed.api import Translator
    from heed.serve.app import create_app

    schema = create_app({"tiny": Translator.load(trained_run, device="cpu")}).openapi()
    _check("openapi.json", _canonical(schema))


# ----------------------------------------------------------------------------------- the readings
# What every reading gives, byte for byte: the Python results' JSON, the commands' output and JSON,
# and the server's answers (those the explorer draws: /v1/translate, /v1/align, /v1/heads,
# /v1/attribute; and /v1/lens, /v1/explain/*). The models have fixed weights: the RNN of
# tests/fixtures/model-before-seam and a Transformer of seeded random weights on its vocabularies,
# so a snapshot changes with a reading's numbers, never with a retraining. Numbers are kept to
# DIGITS significant digits (a CPU with other vector units sums in another order);
# HEED_SNAPSHOT_DIGITS=0 keeps every bit (with HEED_SNAPSHOT_DIR, to hold a refactor's before and
# after on one machine byte for byte).

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "model-before-seam"
DIGITS = int(os.environ.get("HEED_SNAPSHOT_DIGITS", "6"))
SOURCES = ["le 3 mars 1998", "March 14, 2015"]
TARGETS = ["1998-03-03", "2015-03-14"]
TRANSFORMER = {"family": "transformer", "layers": 2, "d_model": 16, "heads": 2, "ff_size": 32, "dropout": 0.0,
               "attention_dropout": 0.0}


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """Every reading computed on one thread, as under pytest-xdist: another thread count sums in
    another order (tests/conftest.py)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _rounded(value: Any) -> Any:
    """`value` (JSON-ready, or numpy) with every float kept to DIGITS significant digits, and those
    under 1e-6 in size (rounding noise, a completeness gap) to 0."""
    import numpy as np

    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (float, np.floating)):
        if not DIGITS:
            return float(value)
        return 0.0 if abs(value) < 1e-6 else float(f"{float(value):.{DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _check_values(name: str, value: Any) -> None:
    _check(name, _canonical(_rounded(value)))


@pytest.fixture(scope="module")
def fixed_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"rnn": the fixture's RNN, "transformer": a Transformer of seeded random weights (torch's CPU
    generator, seed 0) on the same vocabularies}, as model directories."""
    import torch

    from heed.checkpoint import load_model_dir, save_model_dir
    from heed.config import config_from_dict
    from heed.nn.build import build_model

    loaded = load_model_dir(FIXTURE, device="cpu")
    raw = loaded.config.model_dump(mode="json")
    raw["model"] = dict(TRANSFORMER)
    target = tmp_path_factory.mktemp("fixed") / "transformer"
    raw["output_dir"] = str(target.parent / "run")
    config = config_from_dict(raw)
    codec = loaded.codec
    torch.manual_seed(0)
    model = build_model(config.model, src_vocab_size=len(codec.src_vocab), tgt_vocab_size=len(codec.tgt_vocab),
                        pad_id=codec.tgt_vocab.pad_id, bos_id=codec.tgt_vocab.bos_id, eos_id=codec.tgt_vocab.eos_id,
                        unk_id=codec.tgt_vocab.unk_id)
    save_model_dir(target, model=model, config=config, codec=codec)
    return {"rnn": FIXTURE, "transformer": target}


def _readings_of(family: str) -> list[tuple[str, dict[str, Any]]]:
    """(reading, options) of every reading a `family` model gives, as the snapshots hold them."""
    pytest.importorskip("captum", reason="heed-nmt[explain] is not installed")
    attribution = [("attribution", {"method": "grad_x_input"}),
                   ("attribution", {"method": "integrated_gradients", "steps": 4})]
    if family == "rnn":
        return [("heads", {}), *attribution]
    return [("heads", {}), ("value_norms", {}), ("rollout", {}), ("alti", {}), ("source_share", {}),
            ("source_share", {"method": "rollout"}), ("logit_lens", {"top": 3}), *attribution]


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_every_readings_results_are_as_recorded_in_python(family: str, fixed_models: dict[str, Path]) -> None:
    from heed.api import Translator

    t = Translator.load(fixed_models[family], device="cpu")
    given = {f"{name} {json.dumps(options, sort_keys=True)}": [r.to_dict() for r in t.explain(name, SOURCES, TARGETS,
                                                                                              **options)]
             for name, options in _readings_of(family)}
    own = {name: [r.to_dict() for r in t.explain(name, SOURCES, **options)]
           for name, options in _readings_of(family)[:1]}  # the model's own translations
    older: dict[str, Any] = {
        "attention_layers": [{"src_tokens": m.src_tokens, "tgt_tokens": m.tgt_tokens, "cross": m.cross,
                              "encoder": m.encoder, "decoder": m.decoder}
                             for m in t.attention_layers(SOURCES, TARGETS, parts=("cross", "encoder", "decoder"))],
        "attribute": [a.to_dict() for a in t.attribute(SOURCES, TARGETS, method="integrated_gradients", steps=4)],
        "contrast": [c.to_dict() for c in t.contrast(SOURCES, ["1998-03-04", "2015-04-14"], TARGETS,
                                                     method="integrated_gradients", steps=4)],
        "align": [{"links": a.links, "attention": a.attention} for a in t.align(SOURCES, TARGETS)],
    }
    if family == "transformer":
        older["source_share"] = [{"per_token": s.per_token, "source": s.source, "prefix": s.prefix,
                                  "sentence": s.sentence} for s in t.source_share(SOURCES, TARGETS)]
        older["logit_lens"] = [r.to_dict() for r in t.logit_lens(SOURCES, TARGETS, top=3)]
    _check_values(f"readings_python_{family}.json", {"given": given, "own": own, "older": older})


def _cli_run(heed_cli: Any, *args: Any) -> dict[str, Any]:
    ran = heed_cli(*args)
    assert ran.exit_code == 0, ran.output
    return {"stdout": ran.stdout}


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_every_readings_commands_print_and_write_as_recorded(family: str, fixed_models: dict[str, Path], heed_cli: Any,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("NO_COLOR", "1")
    model = fixed_models[family]
    src, tgt, other = tmp_path / "src.txt", tmp_path / "tgt.txt", tmp_path / "other.txt"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    tgt.write_text("".join(s + "\n" for s in TARGETS), encoding="utf-8")
    other.write_text("1998-03-04\n2015-04-14\n", encoding="utf-8")
    out = tmp_path / "out.json"
    common = ("--src", src, "--device", "cpu", "--no-progress")
    shown: dict[str, Any] = {}

    def run(name: str, *args: Any, output: bool = True) -> None:
        if out.exists():
            out.unlink()
        result = _cli_run(heed_cli, *args, *(("-o", out) if output else ()))
        if output:
            result["stdout"] = result["stdout"].replace(str(out), "OUT")
            result["json"] = json.loads(out.read_text(encoding="utf-8"))
        shown[name] = result

    for name, options in _readings_of(family):
        flags = [x for key, value in options.items() for x in ("--" + key.replace("_", "-"), str(value))]
        run(f"explain {name} {' '.join(flags)}", "explain", name, model, *common, "--tgt", tgt, *flags)
    run("explain heads (own)", "explain", "heads", model, *common)
    run("attribute", "attribute", model, *common, "--tgt", tgt, "--steps", "4")
    run("attribute grad_x_input (own)", "attribute", model, *common, "--method", "grad_x_input")
    run("attribute --contrast-file", "attribute", model, *common, "--tgt", tgt, "--steps", "4",
        "--contrast-file", other)
    run("align", "align", model, "--src", src, "--tgt", tgt, "--device", "cpu", "--no-progress", output=False)
    if family == "transformer":
        run("lens", "lens", model, *common, "--tgt", tgt, "--top", "3")
        run("lens (own)", "lens", model, *common, output=False)
    _check_values(f"readings_cli_{family}.json", shown)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_every_readings_server_answers_are_as_recorded(family: str, fixed_models: dict[str, Path]) -> None:
    pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import create_app

    t = Translator.load(fixed_models[family], device="cpu")
    asked: list[tuple[str, dict[str, Any]]] = [
        ("/v1/translate", {"sentences": SOURCES, "trace": True, "beam_size": 2}),
        ("/v1/align", {"sources": SOURCES, "targets": TARGETS}),
        ("/v1/heads", {"sources": SOURCES, "targets": TARGETS,
                       "parts": ["cross", "encoder", "decoder"] if family == "transformer" else ["cross"]}),
        ("/v1/attribute", {"sentences": SOURCES, "targets": TARGETS, "steps": 4}),
        ("/v1/attribute", {"sentences": SOURCES[:1], "method": "grad_x_input"}),
    ]
    if family == "transformer":
        asked += [("/v1/translate", {"sentences": SOURCES, "explain": ["source_share"]}),
                  ("/v1/align", {"sources": SOURCES, "targets": TARGETS, "weights": "alti", "layer": "mean"}),
                  ("/v1/lens", {"sources": SOURCES, "targets": TARGETS, "top": 3})]
    asked += [(f"/v1/explain/{name}", {"sources": SOURCES, "targets": TARGETS, **options})
              for name, options in _readings_of(family)]
    answers = {}
    with TestClient(create_app({"m": t})) as client:
        for path, body in asked:
            answer = client.post(path, json=body)
            assert answer.status_code == 200, (path, answer.text)
            # /v1/translate's echo of its decode config follows DecodeConfig, not the readings
            answers[f"{path} {json.dumps(body, sort_keys=True)}"] = {k: v for k, v in answer.json().items()
                                                                     if k != "decode"}
    _check_values(f"readings_server_{family}.json", answers)
