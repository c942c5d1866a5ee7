# Cairn build, run and test entry points. `make up` and `make test` are the two
# commands a newcomer needs on a fresh Debian machine with Go; each installs what
# it needs first.

GO            ?= go
BIN           := bin/cairn
TOOLS         := $(CURDIR)/bin/tools
STATICCHECK   := $(TOOLS)/staticcheck
STATICCHECK_VERSION := v0.8.2
# helm checks deploy/helm/cairn (TestHelmChart); built from its Go module
# (about 2.5 minutes on 2 cores, once).
HELM          := $(TOOLS)/helm
HELM_VERSION  := v3.22.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# Debian packages the tests use: strace records traces for `cairn bench record`;
# fuse3 provides fusermount3 for mounting as a non-root user; fio checks data
# through the mount (TestPosixFio).
# prometheus brings promtool, which checks deploy/monitoring's rules and
# dashboard; chromium loads the master's web console in TestConsole;
# python3-boto3 checks the S3 gateway as a user's script would (TestS3Gateway).
# iproute2 (ip, tc) and nftables (nft) make `cairn lab`'s hosts and faults
# (TestLabIsolate, make lab).
APT_PACKAGES  := strace fuse3 fio prometheus chromium python3-boto3 iproute2 nftables
# The POSIX suite run by `make posix` and TestMountPjdfstest (Rust, crates.io).
PJDFSTEST_VERSION := 0.2.2
SUDO          := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
# Unit tests run with the race detector, one package at a time (2 cores).
TEST_FLAGS    ?= -race -p 1 -timeout 15m
# Integration tests drive real cairn processes (built without the race
# detector), so racing the test harness itself would only slow them down.
INTEGRATION_FLAGS ?= -p 1 -timeout 30m

.PHONY: build up lab lab-down bench-lab jepsen jepsen-short test deps apt-deps cargo-deps vet lint bench bench-mount bench-merging bench-cdc bench-dl bench-meta bench-data bench-recovery posix thrash fuzz bench-tls bench-grants proto clean python python-test bench-python sim

build:
	$(GO) build -o $(BIN) ./cmd/cairn

## up: build and run a whole local cluster in the foreground (Ctrl-C stops it).
up: build
	./$(BIN) up

## lab: a lab of LAB_HOSTS server hosts (default 6) in LAB_ZONES zones (3) and
## LAB_CLIENTS client hosts (2), each a network namespace on a bridge, with the
## cluster running and the volume mounted on every client host, in LAB_DIR
## (./cairn-lab); prints how to use it. Needs root. See docs/lab.md.
LAB_DIR     ?= ./cairn-lab
LAB_HOSTS   ?= 6
LAB_ZONES   ?= 3
LAB_CLIENTS ?= 2
JEPSEN_DIR      ?= ./cairn-jepsen
JEPSEN_DURATION ?= 10m
lab: build
	@dpkg -s iproute2 nftables >/dev/null 2>&1 || { echo "installing iproute2 nftables"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq iproute2 nftables >/dev/null; }
	$(SUDO) ./$(BIN) lab up --dir $(LAB_DIR) --hosts $(LAB_HOSTS) --zones $(LAB_ZONES) --clients $(LAB_CLIENTS)
	@echo "(make lab-down does that too)"

## lab-down: take the lab of make lab down (also after a crash).
lab-down:
	$(SUDO) ./$(BIN) lab down --dir $(LAB_DIR)

## bench-lab: cairn bench with its workers on the client hosts of the lab
## of make lab (LAB_DIR), each going through its own host's mount, the
## master on the first (root; not in CI). LAB_BENCH: cairn bench run's flags.
LAB_BENCH ?= --workload metadata --set files=1000 --threads 4
bench-lab: build
	$(SUDO) ./$(BIN) lab bench --dir $(LAB_DIR) -- $(LAB_BENCH)

## jepsen: a nemesis run of JEPSEN_DURATION (10m) on a fresh lab of 6 server
## hosts in 3 zones and 3 client hosts: random faults of every kind while the
## clients work, then the checker (root; not in CI). Report and history in
## $(JEPSEN_DIR)/jepsen/; JEPSEN_FLAGS=--seed N replays a run. See docs/lab.md.
jepsen: build
	@dpkg -s iproute2 nftables >/dev/null 2>&1 || { echo "installing iproute2 nftables"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq iproute2 nftables >/dev/null; }
	-@$(SUDO) ./$(BIN) lab down --dir $(JEPSEN_DIR) >/dev/null 2>&1
	$(SUDO) ./$(BIN) lab up --dir $(JEPSEN_DIR) --hosts 6 --zones 3 --clients 3 --small-disk s6 --mount-option op_timeout=10
	$(SUDO) ./$(BIN) lab jepsen --dir $(JEPSEN_DIR) --duration $(JEPSEN_DURATION) $(JEPSEN_FLAGS); rc=$$?; \
		$(SUDO) ./$(BIN) lab down --dir $(JEPSEN_DIR) >/dev/null; exit $$rc

## jepsen-short: the 90-second nemesis run TestLabJepsen alone (root; seed 41,
## JEPSEN_FLAGS="-lab.seed N" for another); make test runs it too.
jepsen-short: build
	CAIRN_BIN=$(CURDIR)/$(BIN) $(GO) test ./test/integration -run 'TestLabJepsen$$' -count=1 -v $(JEPSEN_FLAGS)

## deps: what the tests need beyond Go itself.
deps: apt-deps cargo-deps $(STATICCHECK) $(HELM)

apt-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

# pjdfstest when Rust's cargo is there (a fresh `cargo install` took 31 s on 2 cores);
# without cargo, TestMountPjdfstest skips and `make posix` says what to install.
cargo-deps:
	@if command -v cargo >/dev/null; then \
		command -v pjdfstest >/dev/null || [ -x "$${CARGO_HOME:-$$HOME/.cargo}/bin/pjdfstest" ] || \
		{ echo "installing pjdfstest $(PJDFSTEST_VERSION) with cargo"; \
		  cargo install pjdfstest --version $(PJDFSTEST_VERSION) --locked; }; \
	else echo "cargo not found: skipping pjdfstest (install Rust with rustup to run it)"; fi

$(STATICCHECK):
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(HELM):
	GOBIN=$(TOOLS) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

vet:
	@test -z "$$(gofmt -l cmd pkg)" || { echo "gofmt needed:"; gofmt -l cmd pkg; exit 1; }
	$(GO) vet ./...

lint: deps
	$(STATICCHECK) ./...

## test: everything CI runs: formatting, vet, staticcheck, unit and integration
## tests with the race detector.
test: deps build vet lint
	CAIRN_BIN=$(CURDIR)/$(BIN) $(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v -e /test/integration -e /test/sim)
	$(GO) test -timeout 15m ./test/sim -seeds $(SIM_CI_SEEDS) -faults $(SIM_CI_FAULTS)
	@$(MAKE) --no-print-directory fuzz FUZZ_FOR=$(FUZZ_SHORT) FUZZ_KEEP=0
	CAIRN_BIN=$(CURDIR)/$(BIN) HELM=$(HELM) $(GO) test $(INTEGRATION_FLAGS) ./test/integration/
	@$(MAKE) --no-print-directory python-test

## sim: SEEDS seeded runs of the whole cluster in one process (test/sim:
## simulated network, disks and clock), two at a time, from seed SEED, with
## the fault kinds SIM_FAULTS (empty: all); prints every seed's line and the
## summary: seeds run, simulated time, faults injected by kind, seeds with
## anomalies (each with the command that replays it). make test runs the
## simulation's own tests and SIM_CI_SEEDS seeds with SIM_CI_FAULTS (none
## while the findings in docs/sim.md are open), without the race detector,
## which makes a run about ten times slower. See docs/sim.md.
SEEDS ?= 1000
SEED ?= 1
SIM_FAULTS ?=
SIM_CI_SEEDS ?= 200
SIM_CI_FAULTS ?= none
sim:
	$(GO) test -timeout 0 ./test/sim -run 'TestSeeds$$' -seeds $(SEEDS) -seed $(SEED) -faults '$(SIM_FAULTS)' -v

## posix: the POSIX suite pjdfstest on a fresh `cairn up` mount (installs it with
## cargo when missing); fails below 95% passed. See docs/posix.md.
posix: build
	CAIRN_BIN=$(CURDIR)/$(BIN) PJDFSTEST_VERSION=$(PJDFSTEST_VERSION) test/posix/run.sh

## bench-mount: cairn bench on a `cairn up` mount against a FUSE passthrough of
## the local disk (not part of CI). See docs/measurements.md.
bench-mount: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/mount-vs-passthrough.sh

## bench-merging: creates/s of two `cairn up` clusters, meta nodes with and
## without request merging, in one cairn bench run (not part of CI).
bench-merging: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/meta-merging.sh

## bench-cdc: extent vs chunked (cdc) volumes: with the client in a network
## namespace, sequential writes, then 4 KiB inserts over a 10 MB/s link
## (needs root); then sequential writes through two mounts (not part of CI).
## See docs/measurements.md.
bench-cdc: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/cdc-slow-link.sh
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/cdc-mount.sh

## bench-dl: dl-traversal (FalconFS §6.4) on a fresh `cairn up` through the
## stateless SDK client, the SDK client with a warm directory cache and a FUSE
## mount with the kernel's caches off, with the meta nodes' requests per open
## (not part of CI; long with the default 1M files: set BENCH_DL_FLAGS, e.g.
## "--dirs 64 --files 2000 --depth 3", for a quick run). See docs/bench.md.
bench-dl: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/dl-traversal.sh $(BENCH_DL_FLAGS)

## bench-meta: metadata and dl-traversal side by side on the FUSE passthrough
## peer, JuiceFS on Redis as shipped and on fsynced Redis (--etcd: on etcd too),
## a fresh `cairn up` mount (3 replicas), a 1-replica volume's mount and the
## Cairn SDK, in one cairn bench run each; prints ops/s per phase, the ratios
## Cairn / JuiceFS and their geometric mean, and the meta nodes' requests, Raft
## proposals and synced writes per operation (not part of CI; flags through
## BENCH_META_FLAGS, e.g. "--files 100 --repetitions 1 --dl-files 512"). See
## docs/bench.md.
bench-meta: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/meta.sh $(BENCH_META_FLAGS)

## bench-data: the data path side by side (small files, sequential and random
## reads and writes, random ones with and without O_DIRECT) on the FUSE
## passthrough peer, the JuiceFS peer, a fresh `cairn up` mount (3 replicas) and
## a 1-replica volume of the same cluster, in one cairn bench run; prints ops/s
## and MiB/s per phase, the ratios Cairn / JuiceFS and Cairn / passthrough (and
## 1 replica / JuiceFS), and the peak RSS of the mounts and the data nodes
## (not part of CI; flags through BENCH_DATA_FLAGS, e.g. "--repetitions 1
## --seq-size 64MiB --duration 20s"). See the header of bench/data.sh.
bench-data: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/data.sh $(BENCH_DATA_FLAGS)

## bench-recovery: the write pause after kill -9 of a data node and the
## re-replication rate on `cairn up --datas 4 --out-after 10s` (not part of CI;
## flags through BENCH_RECOVERY_FLAGS, e.g. "--mib 4096"). See docs/measurements.md.
bench-recovery: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/recovery.sh $(BENCH_RECOVERY_FLAGS)

## thrash: for THRASH_FOR (default 10m), kill -9 or pause a random meta or data
## node of a default `cairn up` every few seconds under a write load through the
## mount, then check every acknowledged file (not part of CI; `make test` runs
## the same test for 40 s). See docs/design.md, "Writes with a replica down".
THRASH_FOR ?= 10m
thrash: build
	CAIRN_BIN=$(CURDIR)/$(BIN) CAIRN_THRASH=$(THRASH_FOR) $(GO) test -p 1 -timeout 0 -count=1 -v -run '^TestThrash$$' ./test/integration/

## bench-tls: what TLS costs: a default `cairn up` and one with --insecure side
## by side, metadata and sequential data through their mounts, TLS ÷ plain in
## one cairn bench run per workload (not part of CI; flags through
## BENCH_TLS_FLAGS, e.g. "--repetitions 1"). See docs/measurements.md.
bench-tls: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/tls.sh $(BENCH_TLS_FLAGS)

## bench-grants: what extent grants cost: one `cairn up` read and written
## through its admin identity (no grants) and a client identity (grants),
## mounts and SDK, client ÷ admin in one cairn bench run per workload (not
## part of CI; flags through BENCH_GRANTS_FLAGS). See docs/measurements.md.
bench-grants: build
	CAIRN_BIN=$(CURDIR)/$(BIN) bench/grants.sh $(BENCH_GRANTS_FLAGS)

## fuzz: every fuzz target for FUZZ_FOR each (default 10m), one after the
## other: the wire decoders, the stores' recovery, the cluster map's state
## machine, and the servers' request handlers against real nodes (a master,
## a data node, a 3-replica meta partition).
## `make test` runs each for FUZZ_SHORT (default 2000 executions) after their
## seed corpora: a count, not a duration, because go1.26's fuzzing coordinator
## can report its own deadline as a failure (golang/go#75804).
## The inputs a run finds (the fuzz cache's corpus) are copied into each
## target's testdata/fuzz, where every later `go test` runs them as seeds;
## commit them. `make test` keeps none (FUZZ_KEEP=0).
FUZZ_FOR ?= 10m
FUZZ_SHORT ?= 2000x
FUZZ_KEEP ?= 1
FUZZ_TARGETS = \
	pkg/dataproto:FuzzReadFrame pkg/dataproto:FuzzDecodeListings pkg/lightrpc:FuzzDecode pkg/grant:FuzzDecode \
	pkg/datanode:FuzzRequest pkg/metanode:FuzzService pkg/metanode:FuzzRestricted \
	pkg/master:FuzzMaster pkg/clustermap:FuzzApply \
	pkg/metapartition:FuzzApply pkg/metapartition:FuzzRestore \
	pkg/extentstore:FuzzDecodeRecord pkg/extentstore:FuzzOpen pkg/multiraft:FuzzDecodeBatch \
	pkg/hybridindex:FuzzUnmarshal pkg/chunker:FuzzCut pkg/optrace:FuzzRead pkg/bench/trace:FuzzImportStrace
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; echo "== $$fn ($$pkg) for $(FUZZ_FOR)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZ_FOR) ./$$pkg/; \
		cache="$$($(GO) env GOCACHE)/fuzz/github.com/cairnfs/cairn/$$pkg/$$fn"; \
		if [ "$(FUZZ_KEEP)" = 1 ] && [ -d "$$cache" ]; then \
			mkdir -p "$$pkg/testdata/fuzz/$$fn" && cp -n "$$cache"/* "$$pkg/testdata/fuzz/$$fn/" 2>/dev/null || true; \
			echo "   corpus: $$(ls "$$pkg/testdata/fuzz/$$fn" | wc -l) inputs in $$pkg/testdata/fuzz/$$fn"; \
		fi; \
	done

## bench: the benchmarks (not part of CI).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/multiraft/ ./pkg/placement/

proto:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	cd pkg/clusterpb && PATH=$(TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative cluster.proto
	cd pkg/metapb && PATH=$(TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative meta.proto
	PATH=$(TOOLS):$$PATH protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative pkg/multiraft/transportpb/transport.proto

## python: the Python package cairnfs (python/, an fsspec file system over the
## SDK; docs/python.md) installed into the venv $(PYVENV), with the packages its
## tests and benchmark use from PyPI. Its build compiles cmd/libcairn with
## -buildmode=c-shared into the wheel.
PYTHON        ?= python3
PYVENV        := $(CURDIR)/bin/python/venv
PY_PACKAGES   := fsspec pytest pyarrow pandas
python:
	@test -x $(PYVENV)/bin/python || { $(PYTHON) -m venv $(PYVENV) && \
		$(PYVENV)/bin/pip install -q --upgrade pip setuptools wheel; }
	$(PYVENV)/bin/pip install -q $(PY_PACKAGES)
	$(PYVENV)/bin/pip install -q --no-deps --force-reinstall ./python

## python-test: cairnfs's tests (fsspec's abstract suite, every method, errors,
## identities, pyarrow and pandas) against a `cairn up` cluster they start.
python-test: build python
	CAIRN_BIN=$(CURDIR)/$(BIN) $(PYVENV)/bin/pytest -q -p no:cacheprovider python/tests

## bench-python: dl-traversal read from Python with 8 threads, cold, through
## cairnfs and through the `cairn up` mount (BENCH_PYTHON_FLAGS=--juicefs adds
## the JuiceFS peer; "--files 500 --top 10" for a quick run). See docs/python.md.
bench-python: build python
	CAIRN_BIN=$(CURDIR)/$(BIN) $(PYVENV)/bin/python python/bench/dl_traversal.py $(BENCH_PYTHON_FLAGS)

clean:
	rm -rf bin
