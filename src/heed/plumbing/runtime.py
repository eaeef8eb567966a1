"""Where a model runs: the device, torch's CPU threads, oneDNN's cache, what the CPU can do, and
whether torch.compile can build kernels here.

Training, translation (and later serving and export) import this module; nothing run-time lives
in the trainer. No CPU feature is assumed: bf16 on the CPU is decided by asking oneDNN, because on
CPUs without native or emulated bf16 support (an AVX2-only AMD EPYC, say) a bf16 LSTM fails inside
oneDNN ("could not create a primitive descriptor") and bf16 products run ~50x slower.
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from heed.errors import ConfigError, HeedError
from heed.plumbing.limits import MAX_THREADS

DEVICES = ("auto", "cpu", "cuda")
_Fn = TypeVar("_Fn", bound=Callable)


def resolve_device(name: str, *, field: str = "train.device") -> torch.device:
    """"auto" -> CUDA when available, else CPU; "cpu"; "cuda" or "cuda:N" where CUDA is there.
    Anything else is a ConfigError naming `field` (a config field or a command-line option)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    kind, _, index = name.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ConfigError(f"unknown device {name!r}; use one of {', '.join(DEVICES)} (or cuda:N)", field=field)
    if not torch.cuda.is_available():
        raise ConfigError("CUDA is not available on this machine; use device: auto or cpu", field=field)
    if index and int(index) >= torch.cuda.device_count():
        raise ConfigError(f"{name}: this machine has {torch.cuda.device_count()} CUDA device(s)", field=field)
    return torch.device(name)


def cpu_bf16_supported() -> bool:
    """True where oneDNN runs bf16 on this CPU (AVX-512 or AMX; on AVX2-only CPUs it cannot). Set
    `ONEDNN_MAX_CPU_ISA=AVX2` before the first oneDNN call to see a machine without it."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


_INT8_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@functools.lru_cache(maxsize=1)
def cpu_int8_products_exact() -> bool:
    """Whether this CPU multiplies 8-bit integers without saturating: an x86 CPU with VNNI or AMX
    (one instruction, 32-bit sums), or any CPU that is not x86 (ARM's int8 dot products do not
    saturate). x86 CPUs without them (AVX2, AVX-512 before Cascade Lake) multiply unsigned by
    signed bytes with VPMADDUBSW, whose 16-bit pair sums saturate, which changes int8 outputs.
    Read from /proc/cpuinfo's flags; where there is none (macOS, Windows) True is assumed."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return True
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return True
    return flags is None or any(flag in flags for flag in _INT8_DOT_FLAGS)


def cpu_int8_problem() -> str | None:
    """None where PyTorch's dynamic int8 linear (fbgemm, through the 'x86' or 'fbgemm' quantized
    engine: heed.nn.int8) runs on this CPU; otherwise why not, in one line. fbgemm needs an x86 CPU
    with AVX2 at least: asked of torch's engines and of ATen's CPU capability (which
    ATEN_CPU_CAPABILITY=default lowers, as on a CPU without AVX2)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"heed's int8 decoding runs on x86 CPUs (fbgemm), not {platform.machine()}"
    engines = torch.backends.quantized.supported_engines
    if not any(engine in engines for engine in ("x86", "fbgemm")):
        return f"this PyTorch build has no fbgemm quantized engine (it has {', '.join(engines) or 'none'})"
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        return f"this CPU cannot run fbgemm's int8 kernels (CPU capability {capability}: they need AVX2 or AVX-512)"
    return None


def check_int8(device: torch.device, *, what: str) -> None:
    """Raise a HeedError in one line when int8 decoding was asked for (`what`: the option) where it
    cannot run: on a GPU (PyTorch's int8 kernels are the CPU's) or on a CPU without fbgemm's kernels."""
    if device.type != "cpu":
        raise HeedError(f"{what}: int8 decoding runs on the CPU (PyTorch's quantized kernels); "
                        f"use --device cpu, or bf16 on the GPU")
    problem = cpu_int8_problem()
    if problem is not None:
        raise HeedError(f"{what}: {problem}; decode in float32 (leave {what} off)")


def bf16_supported(device: torch.device) -> bool:
    """Whether bfloat16 compute works on `device` (a CUDA GPU that supports it, or a CPU whose oneDNN does)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16_supported()


def check_bf16(device: torch.device, *, what: str) -> None:
    """Raise a HeedError in one line when bf16 was asked for (`what`: the field or option) on a
    device that cannot compute in it."""
    if bf16_supported(device):
        return
    if device.type == "cpu":
        reason = (f"this CPU cannot compute in bfloat16 (oneDNN reports no bf16 support; CPU capability "
                  f"{torch.backends.cpu.get_cpu_capability()}: bf16 needs AVX-512 or AMX)")
    else:
        reason = "this GPU cannot compute in bfloat16"
    raise HeedError(f"{what}: {reason}; run in float32 (leave {what} off)")


def default_bf16(device: torch.device) -> bool:
    """`train.bf16: null`: bf16 autocast on CUDA GPUs that support it. Not on the CPU, even with
    AMX: there it trained faster but the demo ended a little less accurate than in float32
    (bench/RESULTS.md, "bf16 on the CPU"), so it is a choice, `train.bf16: true`."""
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def limit_onednn_cache(bf16: bool) -> None:
    """Keep oneDNN's per-shape primitive cache small for float32 work (a user's
    ONEDNN_PRIMITIVE_CACHE_CAPACITY wins). On the CPU the encoder makes one oneDNN RNN call per
    source length in a batch (heed.nn.rnn.encoder), so a run meets a new shape most batches, and the
    default 1,024 cached primitives grew a 1000-step dates run from 471 MB to 997 MB; with 16 it
    stayed at 465 MB, as fast. bf16 matrix products are oneDNN primitives too and re-creating them
    costs (400 dates steps: 28.2 s with 16, 22.2 s with 1,024), so bf16 keeps the default.
    oneDNN reads the variable at its first primitive: this works before any model has run in
    the process and does nothing after."""
    if not bf16:
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch.set_num_threads for the duration, then back to what it was; more than MAX_THREADS is a
    ConfigError naming --threads (100000 made libgomp fail to allocate its thread pool)."""
    if threads is None:
        yield
        return
    if not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"must be between 1 and {MAX_THREADS} (this machine has {os.cpu_count()} CPUs), got "
                          f"{threads}", field="--threads")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def compiler_problem() -> str | None:
    """None where torch.compile's inductor backend finds the C++ compiler it builds CPU kernels
    with (`$CXX`, else g++: torch._inductor.config.cpp.cxx); otherwise why not, in one line.
    Asks inductor's own search, so the answer is the compiler inductor would use."""
    from torch._inductor import config as inductor_config
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        tried = ", ".join(str(name) for name in inductor_config.cpp.cxx if name is not None)
        return f"no C++ compiler for torch.compile (looked for {tried}; set CXX or install g++)"
    return None


def compile_function(fn: _Fn) -> _Fn:
    """torch.compile(fn) with inductor and dynamic shapes: batch and source lengths vary from batch
    to batch and share one compiled graph (a Python loop's length, such as the target steps, is
    still specialised: each new one compiles afresh). Dynamo may read the parameters of
    nn.LSTM/nn.GRU modules inside `fn` (allow_rnn), since heed's step loops run the cell kernels
    over them; the setting applies to `fn`'s calls only. A call with a new specialisation
    compiles (10-30 s on an idle CPU core, minutes on a busy one); check `compiler_problem()` first."""
    import torch._dynamo

    compiled = torch.compile(fn, dynamic=True)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with torch._dynamo.config.patch(allow_rnn=True):
            return compiled(*args, **kwargs)

    return call  # type: ignore[return-value]
