"""heed.plumbing.runtime: device names, bf16 decided by what the CPU can do, thread settings restored."""
import pytest
import torch

from heed.errors import ConfigError, HeedError
from heed.plumbing import runtime
from heed.plumbing.runtime import check_bf16, resolve_device, torch_threads


@pytest.mark.parametrize("name", ["tpu", "gpu", "CPU", "cuda:x", "", "mps"])
def test_an_unknown_device_is_a_config_error_naming_the_field(name):
    with pytest.raises(ConfigError, match=r"field 'device': unknown device .*use one of auto, cpu, cuda"):
        resolve_device(name, field="device")


def test_auto_and_cpu_resolve():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_bf16_on_a_cpu_without_it_is_one_line_naming_the_option(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_bf16_supported", lambda: False)
    with pytest.raises(HeedError) as info:
        check_bf16(torch.device("cpu"), what="train.bf16")
    message = str(info.value)
    assert message.startswith("train.bf16: this CPU cannot compute in bfloat16") and "\n" not in message


def test_bf16_on_a_cpu_with_it_is_allowed(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_bf16_supported", lambda: True)
    check_bf16(torch.device("cpu"), what="--bf16")  # no error


def test_train_bf16_on_a_cpu_without_it_stops_before_touching_the_output_dir(tmp_path, make_config, monkeypatch):
    from heed.train import train

    monkeypatch.setattr(runtime, "cpu_bf16_supported", lambda: False)
    with pytest.raises(HeedError, match="train.bf16: this CPU cannot compute in bfloat16"):
        train(make_config(tmp_path / "run", bf16=True, device="cpu"))
    assert not (tmp_path / "run").exists()


def test_translator_bf16_on_a_cpu_without_it_is_refused(trained_run, monkeypatch):
    from heed.api import Translator

    monkeypatch.setattr(runtime, "cpu_bf16_supported", lambda: False)
    with pytest.raises(HeedError, match="--bf16: this CPU cannot compute in bfloat16"):
        Translator.load(trained_run, device="cpu", bf16=True)


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    wanted = 2 if before == 1 else 1
    with torch_threads(wanted):
        assert torch.get_num_threads() == wanted
    assert torch.get_num_threads() == before
