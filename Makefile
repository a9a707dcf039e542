# Two commands matter to a newcomer: `make run` and `make test` (README).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

export OPENBLAS_NUM_THREADS := 1
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

.PHONY: install run serve migrate test lint bench bench-quick lock clean

$(BIN)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(BIN)/.installed

migrate: install
	$(BIN)/flask --app wsgi db upgrade

run: migrate
	$(BIN)/flask --app wsgi keys bootstrap --url http://127.0.0.1:$(PORT)
	BIND=127.0.0.1:$(PORT) $(BIN)/gunicorn wsgi:app

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python bench/run.py

bench-quick: install
	$(BIN)/python bench/run.py --quick

# Re-pin after changing pyproject.toml ranges.
lock:
	rm -rf /tmp/forecast-lock-venv && $(PYTHON) -m venv /tmp/forecast-lock-venv
	/tmp/forecast-lock-venv/bin/pip install --quiet --upgrade pip
	/tmp/forecast-lock-venv/bin/pip install --quiet -e '.[dev]'
	/tmp/forecast-lock-venv/bin/pip freeze --exclude-editable > requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
