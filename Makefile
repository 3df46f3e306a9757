# bkspark: every target does its own set-up on a fresh machine.
#   make test    - unit, integration and compatibility tests (real ZooKeeper, real bookies)
#   make demo    - local ZooKeeper + bookies, a DataFrame written to ledgers and read back
#   make compat  - only the tests against Apache BookKeeper's Java bookies, client and shell
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE := $(CURDIR)/.cache
BK_VERSIONS ?= 4.16.6 4.17.3 4.18.2
BK_JARS := $(foreach v,$(BK_VERSIONS),$(CACHE)/bookkeeper/$(v)/.ok)
JAVA_TOOLS := $(wildcard tools/java/src/main/java/bkspark/tools/*.java)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

export BKSPARK_CACHE := $(CACHE)

.PHONY: all setup venv zookeeper java jars proto test unit compat fault demo bench clean

all: test

setup: venv zookeeper jars

venv: $(VENV)/.ok
$(VENV)/.ok: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $@

# Java 17+ runs ZooKeeper and Apache BookKeeper; Maven resolves the BookKeeper jars.
java:
	@command -v java >/dev/null || { echo "bkspark: Java 17+ is needed (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "bkspark: Java 17+ is needed, found $$v"; exit 1; }
	@command -v mvn >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq maven >/dev/null; }

# A ZooKeeper server: $ZOOKEEPER_HOME when set, else Debian's zookeeper package.
zookeeper: java
	@if [ -n "$$ZOOKEEPER_HOME" ]; then echo "bkspark: ZooKeeper from $$ZOOKEEPER_HOME"; \
	elif [ -f /usr/share/java/zookeeper.jar ]; then :; \
	else echo "bkspark: installing Debian's zookeeper package"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends zookeeper >/dev/null; fi

jars: java $(BK_JARS)
$(CACHE)/bookkeeper/%/.ok: tools/java/pom.xml $(JAVA_TOOLS)
	mvn -q -B -f tools/java/pom.xml -Dbk.version=$* dependency:copy-dependencies -DoutputDirectory=$(CACHE)/bookkeeper/$*/lib
	rm -rf $(CACHE)/bookkeeper/$*/classes && mkdir -p $(CACHE)/bookkeeper/$*/classes
	javac -nowarn -d $(CACHE)/bookkeeper/$*/classes -cp "$(CACHE)/bookkeeper/$*/lib/*" $(JAVA_TOOLS)
	touch $@

# Regenerate the committed protobuf modules from bkspark/protocol/proto/*.proto.
proto: venv
	$(PY) -m grpc_tools.protoc -Ibkspark/protocol/proto --python_out=bkspark/protocol/proto --pyi_out=bkspark/protocol/proto bkspark/protocol/proto/*.proto

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

compat: setup
	$(PY) -m pytest -m compat $(PYTEST_ARGS)

fault: setup
	$(PY) -m pytest -m fault $(PYTEST_ARGS)

demo: venv zookeeper
	$(PY) examples/demo.py

bench: setup
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) $(CACHE) .pytest_cache .hypothesis
