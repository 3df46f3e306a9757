# bkspark: every target does its own set-up on a fresh machine.
#   make test    - unit, integration and compatibility tests (real ZooKeeper, real bookies)
#   make demo    - local ZooKeeper + bookies, a DataFrame written to ledgers and read back
#   make compat  - only the tests against Apache BookKeeper's Java bookies, client and shell
#   make bench   - side-by-side benchmarks (bench/), incl. Apache Kafka via `make kafka-jars` (bench only)
#   make dist    - an sdist and a wheel in dist/
#   make containers - a container engine and the project's images for bkspark.testing (docs/testing.md)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE := $(CURDIR)/.cache
BK_VERSIONS ?= 4.16.6 4.17.3 4.18.2
BK_JARS := $(foreach v,$(BK_VERSIONS),$(CACHE)/bookkeeper/$(v)/.ok)
# bench/kafka_compare.py only (not the tests): an Apache Kafka broker and Spark's own Kafka connector.
KAFKA_VERSION ?= 4.1.1
SPARK_KAFKA_VERSION ?= 4.2.0
JAVA_TOOLS := $(shell find tools/java/src -name '*.java' 2>/dev/null | LC_ALL=C sort)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
# `make test` runs its test files on this many pytest-xdist workers (a file's tests stay on one worker, for its
# module fixtures); most of a test's time is spent waiting for servers, so two workers use a 2-core machine that
# one leaves half idle. TEST_WORKERS=0 runs them in the pytest process itself.
TEST_WORKERS ?= 2

export BKSPARK_CACHE := $(CACHE)

# Apache Pulsar's standalone broker for the Pulsar tests (tests/harness/pulsar.py, docs/pulsar.md).
PULSAR_VERSION ?= 4.0.7

.PHONY: pulsar-jars pulsar-proto
.PHONY: spark-venvs spark-matrix
.PHONY: all setup venv kerberos zookeeper java jars jars-unlocked kafka-jars proto containers container-engine test unit compat fault campaign demo bench clean

all: test

setup: venv zookeeper jars kerberos pulsar-jars

venv: $(VENV)/.ok
# setup.py and the C sources: pip install -e builds bkspark/protocol/_speedups, bkspark/pulsar/_batch and bookie_server/_speedups
# (the compiled fast paths) in place.
$(VENV)/.ok: pyproject.toml setup.py bkspark/protocol/_speedups.c bkspark/protocol/_bytes.h bookie_server/_speedups.c bkspark/pulsar/_batch.c
	@command -v cc >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq gcc >/dev/null; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev,testcontainers]' --config-settings editable_mode=compat
	touch $@

# The older PySpark releases the connector supports (docs/connector.md, "Spark versions"): the first of each minor
# release before the newest, whose latest .venv has. The first is pyproject.toml's floor (pyspark>=X; checked by
# tests/integration/test_dependency_floors.py). Each gets its own venv, .venv-spark<version>, with bkspark installed
# from this checkout; built once and kept (pip's cache keeps the wheel it builds from PySpark's ~430 MB sdist).
SPARK_MATRIX ?= 4.0.0 4.1.0 4.2.0
SPARK_VENVS := $(foreach v,$(SPARK_MATRIX),.venv-spark$(v)/.ok)
spark-venvs: $(SPARK_VENVS)
.venv-spark%/.ok: pyproject.toml setup.py bkspark/protocol/_speedups.c bkspark/protocol/_bytes.h bookie_server/_speedups.c bkspark/pulsar/_batch.c
	@start=$$(date +%s); \
	  $(PYTHON) -m venv .venv-spark$* && .venv-spark$*/bin/python -m pip install -q --upgrade pip setuptools wheel && \
	  .venv-spark$*/bin/python -m pip install -q -e '.[test]' 'pyspark==$*' --config-settings editable_mode=compat \
	  && echo "bkspark: .venv-spark$* (PySpark $*) installed in $$(( $$(date +%s) - start )) s"
	touch $@

# Kerberos (SASL GSSAPI, docs/security.md): MIT's KDC and tools for the tests' realm (tests/harness/kdc.py), and
# the `kerberos` extra (python-gssapi, built from source against libkrb5-dev: PyPI has no Linux wheel). Not root
# and no packages: one line, and the Kerberos tests say why they skip.
kerberos: venv
	@if ! command -v krb5kdc >/dev/null && [ ! -x /usr/sbin/krb5kdc ] || ! command -v krb5-config >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null; then \
	    $(SUDO) apt-get -o DPkg::Lock::Timeout=900 update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get \
	      -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends krb5-kdc krb5-admin-server krb5-user \
	      libkrb5-dev >/dev/null || echo "bkspark: could not install MIT Kerberos; the Kerberos tests will skip"; \
	  else echo "bkspark: not root: MIT Kerberos not installed; the Kerberos tests will skip"; fi; fi
	@$(PY) -c 'import gssapi' 2>/dev/null || { command -v krb5-config >/dev/null \
	  && $(PY) -m pip install -q 'gssapi>=1.8' >/dev/null \
	  || echo "bkspark: the gssapi package could not be built; the Kerberos tests will skip"; }

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
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends zookeeper >/dev/null \
	  && [ -f /usr/share/java/zookeeper.jar ] || { echo "bkspark: could not install ZooKeeper; install Debian's zookeeper package or set ZOOKEEPER_HOME"; exit 1; }; fi

# Per version: lib/ (Maven, only when the pom changes) and classes/ (our tools/java programs,
# recompiled when any of them changes, or when one is added or removed: see java-tools.list).
# Serialised with flock: pytest sessions and people share .cache and run `make jars` at the same time.
jars: java
	@mkdir -p $(CACHE)
	@$$(command -v flock >/dev/null && echo flock $(CACHE)/jars.lock) $(MAKE) --no-print-directory jars-unlocked
jars-unlocked: $(BK_JARS)
$(CACHE)/bookkeeper/%/.ok: $(CACHE)/bookkeeper/%/lib/.ok $(CACHE)/java-tools.list $(JAVA_TOOLS)
	rm -rf $(CACHE)/bookkeeper/$*/classes.new && mkdir -p $(CACHE)/bookkeeper/$*/classes.new
	@if [ -n "$(strip $(JAVA_TOOLS))" ]; then \
	  echo "javac tools/java -> $(CACHE)/bookkeeper/$*/classes"; \
	  javac -nowarn -encoding UTF-8 -d $(CACHE)/bookkeeper/$*/classes.new -cp "$(CACHE)/bookkeeper/$*/lib/*" $(JAVA_TOOLS) \
	  || { echo "bkspark: tools/java does not compile against BookKeeper $*"; exit 1; }; fi
	rm -rf $(CACHE)/bookkeeper/$*/classes && mv $(CACHE)/bookkeeper/$*/classes.new $(CACHE)/bookkeeper/$*/classes
	touch $@
# Apache BookKeeper 4.18.2's parent pom (org.apache.bookkeeper:bookkeeper:4.18.2:pom) is missing from Maven
# Central, so nothing that depends on 4.18.2 resolves. When a parent is missing, install the x.y.0 parent under
# version x.y.z in ~/.m2 (the BookKeeper modules stay x.y.z; only the managed third-party versions are x.y.0's).
$(CACHE)/bookkeeper/%/lib/.ok: tools/java/pom.xml
	@mvn -q -B dependency:get -Dartifact=org.apache.bookkeeper:bookkeeper:$*:pom >/dev/null 2>&1 || { \
	  base=$$(echo $* | sed 's/\.[0-9]*$$/.0/'); echo "bkspark: no parent pom for BookKeeper $* on Maven Central, using $$base's"; \
	  mkdir -p $(CACHE)/tmp && \
	  mvn -q -B dependency:copy -Dartifact=org.apache.bookkeeper:bookkeeper:$$base:pom -DoutputDirectory=$(CACHE)/tmp >/dev/null && \
	  sed "0,/<version>$$base<\/version>/s//<version>$*<\/version>/" \
	    $(CACHE)/tmp/bookkeeper-$$base.pom > $(CACHE)/tmp/bookkeeper-$*.pom && \
	  mvn -q -B install:install-file -Dfile=$(CACHE)/tmp/bookkeeper-$*.pom -DpomFile=$(CACHE)/tmp/bookkeeper-$*.pom -Dpackaging=pom \
	  || { echo "bkspark: could not provide the parent pom of BookKeeper $*"; exit 1; }; }
	rm -rf $(CACHE)/bookkeeper/$*/lib.new
	mvn -q -B -f tools/java/pom.xml -Dbk.version=$* dependency:copy-dependencies -DoutputDirectory=$(CACHE)/bookkeeper/$*/lib.new \
	  || { echo "bkspark: Maven could not resolve Apache BookKeeper $* (network? ~/.m2/settings.xml?)"; exit 1; }
	rm -rf $(CACHE)/bookkeeper/$*/lib && mv $(CACHE)/bookkeeper/$*/lib.new $(CACHE)/bookkeeper/$*/lib
	touch $@
# Rewritten only when the set of tools/java sources changes, so that a removed file triggers a rebuild.
$(CACHE)/java-tools.list: FORCE
	@mkdir -p $(CACHE)
	@echo "$(JAVA_TOOLS)" | cmp -s - $@ || echo "$(JAVA_TOOLS)" > $@
FORCE:
.PRECIOUS: $(CACHE)/bookkeeper/%/lib/.ok

# The Kafka side of bench/kafka_compare.py, resolved by Maven (never by Spark's Ivy): the broker with its perf tools
# (tools/kafka/broker-pom.xml) and Spark's Kafka connector without the jars PySpark already ships (spark-pom.xml).
kafka-jars: java $(CACHE)/kafka/$(KAFKA_VERSION)/lib/.ok $(CACHE)/spark-kafka/$(SPARK_KAFKA_VERSION)/lib/.ok
$(CACHE)/kafka/%/lib/.ok: tools/kafka/broker-pom.xml
	rm -rf $(CACHE)/kafka/$*/lib.new
	mvn -q -B -f tools/kafka/broker-pom.xml -Dkafka.version=$* dependency:copy-dependencies -DoutputDirectory=$(CACHE)/kafka/$*/lib.new \
	  || { echo "bkspark: Maven could not resolve Apache Kafka $*"; exit 1; }
	rm -rf $(CACHE)/kafka/$*/lib && mv $(CACHE)/kafka/$*/lib.new $(CACHE)/kafka/$*/lib
	touch $@
$(CACHE)/spark-kafka/%/lib/.ok: tools/kafka/spark-pom.xml
	rm -rf $(CACHE)/spark-kafka/$*/lib.new
	mvn -q -B -f tools/kafka/spark-pom.xml -Dspark.kafka.version=$* dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CACHE)/spark-kafka/$*/lib.new || { echo "bkspark: Maven could not resolve Spark's Kafka connector $*"; exit 1; }
	rm -rf $(CACHE)/spark-kafka/$*/lib && mv $(CACHE)/spark-kafka/$*/lib.new $(CACHE)/spark-kafka/$*/lib
	touch $@
.PRECIOUS: $(CACHE)/kafka/%/lib/.ok $(CACHE)/spark-kafka/%/lib/.ok

# The Pulsar tests (tests/harness/pulsar.py, docs/pulsar.md): an Apache Pulsar broker (PulsarStandaloneStarter) with
# its dependencies, resolved by Maven from tools/pulsar/pom.xml; serialised with flock like the BookKeeper jars.
pulsar-jars: java
	@mkdir -p $(CACHE)
	@$$(command -v flock >/dev/null && echo flock $(CACHE)/pulsar.lock) $(MAKE) --no-print-directory $(CACHE)/pulsar/$(PULSAR_VERSION)/lib/.ok
$(CACHE)/pulsar/%/lib/.ok: tools/pulsar/pom.xml
	rm -rf $(CACHE)/pulsar/$*/lib.new
	mvn -q -B -f tools/pulsar/pom.xml -Dpulsar.version=$* dependency:copy-dependencies -DoutputDirectory=$(CACHE)/pulsar/$*/lib.new \
	  || { echo "bkspark: Maven could not resolve Apache Pulsar $*"; exit 1; }
	rm -rf $(CACHE)/pulsar/$*/lib && mv $(CACHE)/pulsar/$*/lib.new $(CACHE)/pulsar/$*/lib
	touch $@
.PRECIOUS: $(CACHE)/pulsar/%/lib/.ok

# Regenerate the committed protobuf modules of Apache Pulsar's schemas (bkspark/pulsar/proto/*.proto).
pulsar-proto: venv
	$(PY) -m grpc_tools.protoc -Ibkspark/pulsar/proto --python_out=bkspark/pulsar/proto --pyi_out=bkspark/pulsar/proto bkspark/pulsar/proto/*.proto

# The network-namespace test bed (tests/harness/netns.py) drives `ip` (iproute2) and `iptables`; the real-disk
# tests (tests/integration/test_bookie_real_disks.py, tests/harness/loop_disk.py) make a btrfs (btrfs-progs) and
# ext4s (e2fsprogs) on loop devices (losetup: mount). Only as root.
.PHONY: netns-tools
netns-tools:
	@if [ "$$(id -u)" = 0 ]; then command -v ip >/dev/null && command -v iptables >/dev/null && command -v mkfs.btrfs >/dev/null \
	  && command -v mkfs.ext4 >/dev/null && command -v losetup >/dev/null || { \
	  apt-get -o DPkg::Lock::Timeout=900 update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends iproute2 iptables btrfs-progs e2fsprogs mount >/dev/null; }; fi
setup: netns-tools

# Regenerate the committed protobuf modules from bkspark/protocol/proto/*.proto.
proto: venv
	$(PY) -m grpc_tools.protoc -Ibkspark/protocol/proto --python_out=bkspark/protocol/proto --pyi_out=bkspark/protocol/proto bkspark/protocol/proto/*.proto

# bkspark.testing's images (docs/testing.md): Debian's docker.io and debootstrap, dockerd started when no engine
# answers, then the images built from docker/ on a local Debian base (nothing pulled from a registry), each kept
# while the hash of what it is made of is unchanged. Apache BookKeeper images for CONTAINER_BK_VERSIONS.
CONTAINER_BK_VERSIONS ?= 4.17.3
DOCKERD_LOG ?= /var/log/bkspark-dockerd.log
# Builds and containers use the host's network (loopback ports): no docker0 bridge, no private-range address, no
# packet filter rules of Docker's.
DOCKERD_FLAGS ?= --bridge=none --iptables=false --ip6tables=false
containers: venv java container-engine
	@$(MAKE) --no-print-directory jars BK_VERSIONS="$(CONTAINER_BK_VERSIONS)"
	$(PY) -m bkspark.testing build --repo $(CURDIR) --bookkeeper $(CONTAINER_BK_VERSIONS)
container-engine:
	@command -v dockerd >/dev/null && command -v debootstrap >/dev/null || { echo "bkspark: installing docker.io and debootstrap"; \
	  $(SUDO) apt-get -o DPkg::Lock::Timeout=900 update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get \
	  -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends docker.io debootstrap >/dev/null; }
	@docker info >/dev/null 2>&1 || { echo "bkspark: starting dockerd (log: $(DOCKERD_LOG))"; \
	  if [ -d /run/systemd/system ]; then $(SUDO) systemctl start docker; \
	  else $(SUDO) sh -c 'nohup dockerd $(DOCKERD_FLAGS) >>$(DOCKERD_LOG) 2>&1 &'; fi; \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; \
	  docker info >/dev/null 2>&1 || { echo "bkspark: dockerd did not start (see $(DOCKERD_LOG))"; exit 1; }; }

# As root, the tests on the container backend (tests/containers) run on images `make containers` builds, and a
# missing engine is an error; elsewhere they skip with the reason.
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo 1)
# The older PySpark venvs (mostly downloading and unpacking PySpark, little CPU) are built in the background while
# the main suite runs, and their log is shown only if a build fails; the matrix runs after the suite.
SPARK_VENVS_LOG := .cache/spark-venvs.log
test: setup $(if $(IS_ROOT),containers)
	@mkdir -p .cache; $(MAKE) --no-print-directory spark-venvs > $(SPARK_VENVS_LOG) 2>&1 & venvs=$$!; \
	  $(if $(IS_ROOT),BKSPARK_TESTCONTAINERS_REQUIRED=1) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile \
	    --durations=25 $(PYTEST_ARGS); rc=$$?; \
	  if ! wait $$venvs; then cat $(SPARK_VENVS_LOG); echo "bkspark: building the PySpark matrix venvs failed"; exit 1; fi; \
	  grep '^bkspark:' $(SPARK_VENVS_LOG) || true; \
	  [ $$rc -eq 0 ] || exit $$rc
	@$(MAKE) --no-print-directory spark-matrix

# The connector's fast subset (marker spark_matrix: a batch write and read, filter pushdown, a stream with
# AvailableNow, autoregistration from an installed wheel) on each older PySpark release; the newest runs the whole
# suite in `make test`. One release after the other: each starts its own Spark.
# Only the files that hold such tests are collected: the others may import what an older PySpark lacks.
# The Pulsar case (a broker to start: 40 s more on 4.0.0 here, 130 s in all) runs on the floor release only (the first of SPARK_MATRIX).
SPARK_MATRIX_TESTS := tests/integration/test_connector_spark_versions.py tests/integration/test_connector_autoregister.py
SPARK_MATRIX_FLOOR_TESTS := tests/integration/test_pulsar_read.py
spark-matrix: setup spark-venvs
	@floor=$(firstword $(SPARK_MATRIX)); for v in $(SPARK_MATRIX); do start=$$(date +%s); \
	  extra=$$([ "$$v" = "$$floor" ] && echo "$(SPARK_MATRIX_FLOOR_TESTS)"); \
	  .venv-spark$$v/bin/python -m pytest -m spark_matrix -q -p no:cacheprovider $(SPARK_MATRIX_TESTS) $$extra $(PYTEST_ARGS) || exit 1; \
	  echo "bkspark: the spark_matrix tests on PySpark $$v ran in $$(( $$(date +%s) - start )) s"; done

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

compat: setup
	$(PY) -m pytest -m compat $(PYTEST_ARGS)

# NETNS_SPARK_RACK_LOSS=1: the rack-loss Spark writes on the namespace test bed (minutes each; not in `make test`).
fault: setup
	NETNS_SPARK_RACK_LOSS=1 $(PY) -m pytest -m fault $(PYTEST_ARGS)

# The randomized fault-schedule campaign (tests/campaign, docs/reliability.md): SCHEDULES seeds from FIRST_SEED;
# its totals go to campaign-stats.json. `make test` runs 50 of them.
SCHEDULES ?= 50
FIRST_SEED ?= 1
# Then NETNS_SCHEDULES schedules on hosts in network namespaces (kernel-level faults; root only, else skipped),
# totals in campaign-netns-stats.json; `make test` runs 5 of them.
NETNS_SCHEDULES ?= 100
campaign: setup
	CAMPAIGN_SCHEDULES=$(SCHEDULES) CAMPAIGN_FIRST_SEED=$(FIRST_SEED) CAMPAIGN_STATS=$(CURDIR)/campaign-stats.json \
	  $(PY) -m pytest tests/campaign/test_campaign.py -m campaign -q $(PYTEST_ARGS)
	CAMPAIGN_NETNS_SCHEDULES=$(NETNS_SCHEDULES) CAMPAIGN_NETNS_FIRST_SEED=$(FIRST_SEED) \
	  CAMPAIGN_NETNS_STATS=$(CURDIR)/campaign-netns-stats.json \
	  $(PY) -m pytest tests/campaign/test_netns_campaign.py -m campaign -q -rs $(PYTEST_ARGS)

demo: venv zookeeper
	$(PY) examples/demo.py

# Side-by-side benchmarks (bench/); rewrites the generated section of BENCHMARKS.md from this run.
# BENCH_ARGS are handed to run_all, e.g. BENCH_ARGS=--quick (small sizes: checks the programs only).
BENCH_ARGS ?=
bench: setup kafka-jars
	$(PY) -m bench.run_all --update-md BENCHMARKS.md $(BENCH_ARGS)

# The soak (bench/soak.py, docs/reliability.md "The soak"): a writer, a stream into the exactly-once sink and a
# batch job every few minutes for MINUTES minutes under a seeded schedule of faults (bookie kills, pauses and journal
# power cuts; delays and black holes between the clients and a bookie; ZooKeeper session expiry and dropped
# connections); fails when a resource grows without bound or an acknowledged row is missing or duplicated. Spark's
# JVM's threads are counted by pool with the JDK's jcmd. Figures in bench/results/soak.json, picture soak.png;
# `$(PY) -m bench.soak --judge bench/results/soak.json` judges a finished run again.
MINUTES ?= 30
.PHONY: soak
soak: setup
	$(PY) -m bench.soak --minutes $(MINUTES) $(SOAK_ARGS)

# The soak on the namespace test bed under kernel-level network and disk faults (root; bench/soak_netns.py,
# docs/reliability.md "The soak on namespaces"); figures in bench/results/soak-netns.json and .png.
.PHONY: soak-netns
soak-netns: setup
	$(PY) -m bench.soak --netns --minutes $(MINUTES) $(SOAK_ARGS)

# An sdist and a wheel in dist/ (PEP 517, `python -m build`: the wheel is built from the sdist, so the sdist is
# known to be complete); the wheel carries the compiled fast paths of the machine that builds it (setup.py).
.PHONY: dist
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) .venv-spark* $(CACHE) .pytest_cache .hypothesis build bkspark/protocol/_speedups*.so bookie_server/_speedups*.so bkspark/pulsar/_batch*.so
