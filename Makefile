# Two commands matter to a newcomer: `make run` and `make test` (README).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

export OPENBLAS_NUM_THREADS := 1
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

.PHONY: install install-dev native run serve migrate test lint screenshots bench bench-quick lock proto clean

# The runtime set only: what a production server needs (requirements.lock).
$(BIN)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# The detector compiled by mypyc (app/compute/detect/native.py): about twice as fast, the same verdicts. Built
# again whenever a source it was built from changes (the build's own stamp says, so no list of them here); if it
# cannot be built (no C compiler), the detector runs from its sources and this says so.
native: $(BIN)/.installed
	-$(BIN)/python -m app.compute.detect.native_build

# The development set on top (requirements-dev.lock): test runners, linters, the client package, the
# Azure SDK the compatibility tests drive, statsforecast for the accuracy anchors.
$(BIN)/.dev-installed: $(BIN)/.installed requirements-dev.lock clients/python/pyproject.toml
	$(BIN)/python -m pip install --quiet -r requirements-dev.lock
	$(BIN)/python -m pip install --quiet --no-deps -e ./clients/python  # its httpx, pandas, matplotlib are in the dev lock
	touch $@

install: $(BIN)/.installed native

install-dev: $(BIN)/.dev-installed native

migrate: install
	$(BIN)/flask --app wsgi db upgrade

run: migrate
	@echo "Embedded default: rate counters live in memory and start afresh on restart (per-day windows included); set REDIS_URL to keep them."
	$(BIN)/flask --app wsgi keys bootstrap --url http://127.0.0.1:$(PORT)
	@# The job worker runs beside the web server and stops with it (Ctrl-C reaches both).
	$(BIN)/flask --app wsgi jobs worker & worker=$$!; trap 'kill $$worker 2>/dev/null; wait $$worker' EXIT INT TERM; \
		BIND=127.0.0.1:$(PORT) $(BIN)/gunicorn wsgi:app

# Several pytest-xdist workers: most tests wait (on gunicorn, subprocesses, rate-limit windows) more than they
# compute, so three workers keep two cores busy. A module's tests that share a server stay on one worker, and
# the end-to-end ones are handed out first (tests/conftest.py); `TEST_WORKERS=0 make test` runs one process.
TEST_WORKERS ?= 3

test: install-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The dashboard screenshots docs/dashboard.md shows, taken again by the browser tests (which, in `make test`,
# write theirs to a temporary folder and leave the checkout as it was). Needs chromium and chromedriver.
screenshots: install-dev
	SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots REQUIRE_SERVICES=1 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/e2e/test_dashboard_browser.py

# ruff, and the package boundaries as import contracts (no circle, no private name across packages, the
# worker side apart from the web side).
lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_architecture.py

bench: install-dev
	$(BIN)/python bench/run.py

bench-quick: install-dev
	$(BIN)/python bench/run.py --quick

# Re-pin after changing pyproject.toml ranges: the runtime set alone, then what the dev set adds.
lock:
	rm -rf /tmp/forecast-lock-venv && $(PYTHON) -m venv /tmp/forecast-lock-venv
	/tmp/forecast-lock-venv/bin/pip install --quiet --upgrade pip
	/tmp/forecast-lock-venv/bin/pip install --quiet .
	/tmp/forecast-lock-venv/bin/pip freeze --exclude-editable | grep -v '^forecast-service' > requirements.lock
	/tmp/forecast-lock-venv/bin/pip install --quiet '.[dev]' './clients/python[pandas,plot]'
	/tmp/forecast-lock-venv/bin/pip freeze --exclude-editable | grep -v '^forecast-service\|^forecast-client' \
		| grep -vxF -f requirements.lock > requirements-dev.lock

# Regenerate app/monitors/intake/prompb from Prometheus' remote-write .proto files (proto/prometheus, NOTICE.md there).
# protoc comes from grpcio-tools in a throw-away venv: the server needs only the protobuf runtime, which must be
# at least the protoc version the code was generated with (pyproject pins it). The generated modules import each
# other by top-level names ("import types_pb2"); the sed makes them imports inside the package.
GRPCIO_TOOLS_VERSION := 1.85.1
PROMPB := app/monitors/intake/prompb
proto:
	rm -rf /tmp/forecast-proto-venv && $(PYTHON) -m venv /tmp/forecast-proto-venv
	/tmp/forecast-proto-venv/bin/pip install --quiet grpcio-tools==$(GRPCIO_TOOLS_VERSION)
	rm -f $(PROMPB)/*_pb2.py $(PROMPB)/gogoproto/*_pb2.py
	cd proto/prometheus && /tmp/forecast-proto-venv/bin/python -m grpc_tools.protoc -I . \
		--python_out=$(CURDIR)/$(PROMPB) remote.proto types.proto gogoproto/gogo.proto
	sed -i -e 's/^import types_pb2 as/from app.monitors.intake.prompb import types_pb2 as/' \
		-e 's/^from gogoproto import gogo_pb2 as/from app.monitors.intake.prompb.gogoproto import gogo_pb2 as/' \
		$(PROMPB)/*_pb2.py

clean:
	rm -rf $(VENV) .native .pytest_cache .ruff_cache
