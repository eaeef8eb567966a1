# The two commands a newcomer needs: `make demo` and `make test`.
# Both build .venv on first use (tools/make_venv.py): it sees none of the system's packages, so
# every dependency is the newest the registry allows, as on a fresh machine; only a torch already
# installed (a CUDA build, say) is reused. Without one, `pip install torch==2.13.0` runs, and which
# build that is depends on where pip looks: from PyPI on Linux x86_64 it is the CUDA build (several GB
# of nvidia-* packages); from the CPU index (README) or a local CPU wheel that pip is set up to find
# (this project's machines have one), the CPU build.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.heed-installed

.PHONY: demo test lint bench docs clean

# eflomal (the align extra, heed data align) ships as source and needs a C compiler: where it cannot
# be built, its tests are skipped and the rest installs as usual.
$(STAMP): pyproject.toml tools/make_venv.py
	$(PYTHON) tools/make_venv.py $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -e '.[dev,docs,serve,onnx,ct2,argos,explain,hub,markup,subtitles]'
	$(BIN)/python -m pip install -e '.[align]' || echo "eflomal could not be built (no C compiler?): heed data align and its tests are skipped" >&2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/heed demo

# A pytest-xdist worker a core (at most 4: each trains its own session fixtures), a test file to a
# worker, so a file's module fixtures are made once; `pytest tests/...` alone runs in one process.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile

# ruff (pyproject's [tool.ruff]) over the code, its tests, benchmarks and tools; mypy (pyproject's
# [tool.mypy], with pydantic's plugin) over the package.
lint: $(STAMP)
	$(BIN)/python -m ruff check src tests bench tools
	$(BIN)/python -m mypy src/heed

# The suite: the benchmarks in bench/ that need nothing outside the repository (about 10 minutes on
# 2 cores); the peer comparison needs ../shared: bash bench/compare/run.sh --peers-dir DIR --install.
# bench/studies/ holds the one-off studies, each run as its section of bench/RESULTS.md says.
bench: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python bench/attention_fused.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/decode_speed.py --precisions float32 bfloat16
	OMP_NUM_THREADS=1 $(BIN)/python bench/floor.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/gemm_floor.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/feeding_pass.py
	$(BIN)/python bench/scratch_dates.py --epochs 10 --blas-threads 1 --stop-at 0.999

# The documentation site (mkdocs.yml over docs/) into build/site; --strict fails on a broken link,
# or a page outside the nav; bench/RESULTS.md and CONTRIBUTING.md join it (tools/mkdocs_hooks.py).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d build/site

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
