"""The arrows between heed's rooms run one way (DESIGN.md): translating loads neither the trainer
nor, until an exported model is used, onnx / onnxruntime / ctranslate2."""
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
                         "heed.export.ct2_run", ("heed.train", "onnx", "onnxruntime", "ctranslate2")) == []


def test_reading_a_config_loads_neither_torch_nor_the_model_code():
    assert _loaded_after("import heed.config", ("torch", "heed.nn.build", "heed.search")) == []


def test_heed_prepare_loads_no_model_code():
    """`heed prepare` tokenizes a corpus: it needs the config and the data code, not the models."""
    assert _loaded_after("import heed.data.prepare", ("heed.nn.build", "heed.nn.rnn.encoder", "heed.nn.rnn.decoder",
                                                 "heed.search", "heed.train")) == []
