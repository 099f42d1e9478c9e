# talos-nodeinit. `make help` lists the targets.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/talos-nodeinit/talos-nodeinit/pkg/version.Version=$(VERSION)
BIN     ?= bin
# Tests start real etcd/kube-apiserver binaries; the first build takes ~6-10 min.
TEST_TIMEOUT ?= 30m
# FUZZTIME, when set (e.g. 60s), is every fuzz target's budget. Unset, each
# runs a number of inputs, about 10 s on 2 cores: Go 1.26's fuzzing can fail
# a target with "context deadline exceeded" when a duration ends while a
# worker is busy (go.dev/issue/75804, fixed in Go 1.27); a count never does.
FUZZTIME ?=
# The Kubernetes minor the tests run against: 1.37 is what Talos 1.14 installs
# by default; 1.36 Talos 1.13's (KUBE_VERSION=1.36); 1.31 the oldest Talos
# 1.13 supports (make test-compat).
KUBE_VERSION ?= 1.37
export KUBE_VERSION
KT = KUBE_TOOLS_DIR=$$(hack/kube-tools/build.sh 2>/dev/null)

.PHONY: install-patch release help build test test-compat fuzz lint kube-tools demo clean bench-units bench bench-scale extension images e2e-talos

help: ## list targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

build: ## static nodeinit-agent and nodeinit-coordinator binaries in ./bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nodeinit-agent ./agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nodeinit-coordinator ./coordinator

extension: ## the Talos system extension without Docker: bin/extension/{oci,amd64,arm64,*.tar}
	$(GO) run ./hack/extension -out $(BIN)/extension -version $(VERSION)

images: ## coordinator and agent-pod images without Docker, tagged VERSION: bin/images/<image>/ (OCI, amd64+arm64), <image>-<arch>.tar
	$(GO) run ./hack/images -out $(BIN)/images -version $(VERSION)

kube-tools: ## build (or reuse from cache) etcd, kube-apiserver, kube-controller-manager for KUBE_VERSION (1.37; 1.36, 1.31)
	@hack/kube-tools/build.sh

test: kube-tools ## all Go tests against the real control plane (needs root for netns tests); -race except hack/bench's fault tests, whose storms are timed
	$(KT) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e /hack/bench -e /hack/realnode -e /hack/talosnode)
	$(KT) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./hack/bench
	$(GO) -C hack/machined test -count=1 ./...   # the stand-in's rules are still machined's own
	$(GO) -C hack/imager test -count=1 ./...     # Talos's own imager reads make extension's output

COMPAT_TESTS = TestControlPlaneVersion|TestNodeIdentityLimits|TestServiceAccountIdentity|TestAuditCountsMutations|TestRBAC|TestDeployManifests|TestDemoConverges
test-compat: ## on Kubernetes 1.31 (the oldest Talos 1.13 supports): the node-identity table, RBAC, admission policy and demo tests, then the demo
	hack/kube-tools/build.sh 1.31 >/dev/null
	KUBE_VERSION=1.31 KUBE_TOOLS_DIR=$$(hack/kube-tools/build.sh 1.31 2>/dev/null) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^($(COMPAT_TESTS))$$' ./pkg/harness/testcluster ./coordinator/controller ./coordinator ./hack/demo
	$(MAKE) demo KUBE_VERSION=1.31

fuzz: ## run every fuzz target from its seed corpus, ~10 s of inputs each (FUZZTIME=60s: that long each)
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(or $(FUZZTIME),200000x) ./pkg/csrcheck
	$(GO) test -run '^$$' -fuzz '^FuzzReservedNames$$' -fuzztime $(or $(FUZZTIME),180000x) ./pkg/csrcheck
	$(GO) test -run '^$$' -fuzz '^FuzzLoadEvaluate$$' -fuzztime $(or $(FUZZTIME),50000x) ./pkg/rules
	$(GO) test -run '^$$' -fuzz '^FuzzGrantOwnership$$' -fuzztime $(or $(FUZZTIME),17000x) ./coordinator/finalize
	$(GO) test -run '^$$' -fuzz '^FuzzPrefixOwnership$$' -fuzztime $(or $(FUZZTIME),25000x) ./coordinator/records
	$(GO) test -run '^$$' -fuzz '^FuzzNodeText$$' -fuzztime $(or $(FUZZTIME),190000x) ./pkg/contract
	$(GO) test -run '^$$' -fuzz '^FuzzDecoders$$' -fuzztime $(or $(FUZZTIME),10000x) ./pkg/talos

bench-units: kube-tools ## component benchmarks that print figures: allocator, agent binary size and RSS, coordinator memory per Node and per NodeRecord
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/ipam
	$(KT) $(GO) test -run '^$$' -bench Footprint -benchtime 1x ./agent
	$(KT) $(GO) test -run '^$$' -bench 'ObserverHeld' -benchtime 3x ./coordinator/controller
	$(GO) test -run '^$$' -bench 'CachedRecordHeld|OwnerBesideOwnWrites' -benchtime 3x ./coordinator/records

QUIET ?= 60s
bench: kube-tools ## join storm of N nodes on a real control plane: latencies, writes per node, CPU, floor (N=100 QUIET=60s)
	$(KT) $(GO) run ./hack/bench -nodes $(or $(N),100) -quiet $(QUIET)

bench-scale: kube-tools ## 5,000 initialized Nodes, then the coordinator, one join, then 500 joins: RSS, leader→ready, allocation time
	$(KT) $(GO) run ./hack/bench -existing 5000 -nodes 500 -quiet 10s -floor=false

lint: ## gofmt check, go vet, and the binaries import no test harness or fake
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/kube-tools/')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@bad=$$($(GO) list -deps ./agent ./coordinator | grep -E '/pkg/harness(/|$$)|/(talostest|csrtest|netnstest)$$' || true); \
	if [ -n "$$bad" ]; then echo "the binaries import test code:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	for m in hack/kube-tools/v*/; do (cd $$m && $(GO) vet ./cmd/...) || exit 1; done
	$(GO) -C hack/machined vet ./...
	$(GO) -C hack/imager vet ./...

demo: kube-tools ## real control plane + coordinator + N simulated Talos nodes running the real agent (N=4, KEEP=1); REAL_NODE=1: watch real kubelets join (make e2e, logs kept)
ifeq ($(REAL_NODE),)
	@echo "==> compiling the demo (the first time about a minute, with its modules)"
	$(KT) $(GO) run ./hack/demo $(if $(N),-nodes $(N))
else
	REALNODE_KEEP_DIR=1 $(MAKE) e2e
endif

clean: ## remove build outputs (the kube-tools cache is kept)
	rm -rf $(BIN)

.PHONY: manifests test-manifests
manifests: ## install files rendered from coordinator/deploy: bin/manifests/nodeinit-coordinator.yaml (kubectl), talos-patch.yaml, talos-unpatch.yaml (machine config) and their -1.14 forms; IMAGE=REPO: the coordinator image you pushed
	$(GO) -C hack/manifests run . -deploy $(CURDIR)/coordinator/deploy -out $(abspath $(BIN))/manifests $(if $(IMAGE),-image $(IMAGE))

comma := ,
space := $(subst ,, )
install-patch: ## the machine-config patches that install everything, validated with Talos's machinery: bin/install/ (IMAGE=REPO AGENT_IMAGE=REF MACHINE_CONFIG=cp.yaml,worker.yaml,version.yaml [MODE=container|extension] [RULES=FILE] [CONFIG=FILE] [AGENT_ENV="NODEINIT_X=y"] [MIGRATING=talos-ccm] [SIGNER_QPS=200] [REPLICAS=1])
	$(GO) -C hack/manifests run . install -deploy $(CURDIR)/coordinator/deploy -extension $(CURDIR)/extension -out $(abspath $(BIN))/install \
		-form "$(TALOS_CONFIG)" -mode "$(MODE)" -image "$(IMAGE)" -agent-image "$(AGENT_IMAGE)" \
		$(if $(RULES),-rules $(abspath $(RULES))) $(if $(CONFIG),-coordinator-config $(abspath $(CONFIG))) -env "$(AGENT_ENV)" $(if $(MACHINE_CONFIG),-machine-config "$(subst $(space),$(comma),$(foreach f,$(subst $(comma), ,$(MACHINE_CONFIG)),$(abspath $(f))))") $(if $(REPLICAS),-replicas $(REPLICAS)) $(if $(MIGRATING),-migrating $(MIGRATING)) $(if $(SIGNER_QPS),-signer-qps $(SIGNER_QPS))
	@# The agent's own parser checks what the agent will read (AGENT_ENV's names and values, the rules).
	@for f in nodeinit-worker.yaml nodeinit.yaml; do if [ -f $(abspath $(BIN))/install/$$f ]; then $(GO) run ./agent validate --rules-file $(abspath $(BIN))/install/$$f >/dev/null || { rm -rf $(abspath $(BIN))/install; echo "install-patch: refused by nodeinit-agent validate (above); nothing written" >&2; exit 1; }; fi; done

release: images extension ## push the images (amd64+arm64) and the Helm chart (OCI) to REGISTRY, and write the install assets pinned by digest to bin/release (VERSION=vX.Y.Z REGISTRY=host/path [COSIGN_KEY=cosign.key: sign and verify])
	$(GO) -C hack/manifests run . release -version "$(VERSION)" -registry "$(REGISTRY)" -bin $(abspath $(BIN)) \
		-deploy $(CURDIR)/coordinator/deploy -chart $(CURDIR)/coordinator/chart/nodeinit-coordinator -extension $(CURDIR)/extension -out $(abspath $(BIN))/release \
		$(if $(COSIGN_KEY),-sign-key $(abspath $(COSIGN_KEY)))

test-manifests: kube-tools ## the manifest, the Talos patch and the Helm chart agree, validate and apply (hack/manifests, its own module)
	$(GO) -C hack/manifests vet ./...
	$(KT) $(GO) -C hack/manifests test -count=1 -timeout $(TEST_TIMEOUT) ./...

E2E_BINS = kube-apiserver kube-controller-manager etcd kube-scheduler kubelet
.PHONY: e2e
e2e-talos: ## Talos's own machined v1.14.1 (and v1.13.9) as a container-mode worker (as root): machined, containerd 2.x and runc built from their modules (cached); the agent as the extension and as a ContainerConfig, docs/install.md's quick starts command by command, Talos's own kubelet
	KUBE_TOOLS_BINS="$(E2E_BINS)" hack/kube-tools/build.sh >/dev/null
	KUBE_TOOLS_BINS="$(E2E_BINS)" $(GO) test -count=1 -timeout 20m -v ./hack/talosnode

e2e: images ## real nodes (as root): containerd + runc (apt), the real kubelet and scheduler; coordinator/deploy as pods, the agent beside each kubelet and as a static pod; local images only
	hack/realnode/setup.sh
	KUBE_TOOLS_BINS="$(E2E_BINS)" hack/kube-tools/build.sh >/dev/null
	KUBE_TOOLS_BINS="$(E2E_BINS)" $(GO) test -count=1 -timeout 10m -v -run '^TestRealNode$$' ./hack/realnode
