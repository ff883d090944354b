# Two commands do all set-up: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install clean browser postgres mariadb

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing the Python packages into $(VENV): about a minute on a fresh clone, each package named as it comes"
	$(BIN)/python -m pip install --progress-bar on -c requirements.lock -e '.[local,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/lakehouse demo

# The browser tests drive Debian's Chromium through its chromedriver; installed once, when missing.
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update && apt-get install -y chromium chromium-driver)

# The BI replica tests run Debian's PostgreSQL server, its JDBC driver and javac; installed once, when missing.
postgres:
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && test -f /usr/share/java/postgresql.jar && command -v javac >/dev/null || \
		(apt-get update && apt-get install -y postgresql libpostgresql-jdbc-java openjdk-17-jdk-headless)

# The backfill tests run Debian's MariaDB server (as its own user, in a folder of the test's); installed once, when missing.
mariadb:
	command -v mariadbd >/dev/null || test -x /usr/sbin/mariadbd || (apt-get update && apt-get install -y mariadb-server)

# Three workers on 2 cores, one test file each at a time (a file's module fixtures share one home), the longest
# files first (tests/longest_first.txt): a third worker runs while another waits on its subprocesses and
# servers (19 min 32 s and 20 min 20 s in two runs, against 23 min 46 s with two at 6abf866 and 22 min 2 s
# with four at e4bb2ac, 2026-11-29).
test: $(STAMP) browser postgres mariadb
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder

clean:
	rm -rf $(VENV) .lakehouse .pytest_cache
