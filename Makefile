# dynbatch - a continuous-batching decoding engine.
#
#   make          build bin/dynbatch, bin/dynbatch-worker and the tools
#   make run      decode the default workload with 4 workers (README)
#   make test     unit tests and end-to-end tests (what CI runs)
#   make asan     the same tests under AddressSanitizer + UBSan
#   make deps     install the Debian packages the build needs
#
# Users may change optimisation (CFLAGS=-O0 ...), never drop the warnings.

CC ?= cc
CFLAGS ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -Wstrict-prototypes \
	-Wmissing-prototypes -Wshadow -Wno-unused-parameter \
	-D_GNU_SOURCE -Icommon -Icoordinator -Iworker -pthread -MMD -MP
LDLIBS_COMMON := -ljansson -ldl -lrt -lm -pthread
LDLIBS_COORD := -luring $(LDLIBS_COMMON)

BUILD ?= build
BIN ?= bin

DEB_PACKAGES := liburing-dev libcmocka-dev libjansson-dev pkg-config

COMMON_SRC := $(wildcard common/*.c)
COORD_SRC := $(filter-out coordinator/main.c,$(wildcard coordinator/*.c))
WORKER_SRC := $(filter-out worker/main.c,$(wildcard worker/*.c))
TEST_SRC := $(wildcard tests/test_*.c)
TOOL_SRC := $(filter-out tools/example_plugin.c,$(wildcard tools/*.c))

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
COORD_OBJ := $(COORD_SRC:%.c=$(BUILD)/%.o)
WORKER_OBJ := $(WORKER_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BIN)/%)
PLUGIN := $(BUILD)/example_plugin.so

LIBCOMMON := $(BUILD)/libcommon.a
LIBCOORD := $(BUILD)/libcoord.a
LIBWORKER := $(BUILD)/libworker.a

.PHONY: all deps run test unit e2e asan clean
all: $(BIN)/dynbatch $(BIN)/dynbatch-worker $(TOOL_BIN) $(PLUGIN) $(TEST_BIN)

# Install the Debian packages the build needs, only when one is missing.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "make deps: installing$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(LIBCOMMON): $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
$(LIBCOORD): $(COORD_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
$(LIBWORKER): $(WORKER_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BIN)/dynbatch: $(BUILD)/coordinator/main.o $(LIBCOORD) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS_COORD)

$(BIN)/dynbatch-worker: $(BUILD)/worker/main.o $(LIBWORKER) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS_COMMON)

$(BIN)/%: $(BUILD)/tools/%.o $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS_COMMON)

$(PLUGIN): tools/example_plugin.c common/model.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIBCOORD) $(LIBWORKER) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) -lcmocka $(LDLIBS_COORD)

# Decode the default workload (a few thousand mixed requests) with 4
# workers and an accelerator-like sim model (2 ms per call), then check
# every result against the reference decoder.
RUN_REQUESTS ?= 3000
RUN_MODEL ?= sim:mode=sleep,call_us=2000,row_us=10
run: deps
	$(MAKE) all
	$(BIN)/gen_workload --n $(RUN_REQUESTS) --seed 1 > $(BUILD)/workload.jsonl
	$(BIN)/dynbatch run --workers 4 --model $(RUN_MODEL) \
		--input $(BUILD)/workload.jsonl --output $(BUILD)/results.jsonl \
		--stats $(BUILD)/stats.json
	@echo "results: $(BUILD)/results.jsonl ($$(wc -l < $(BUILD)/results.jsonl) lines), summary: $(BUILD)/stats.json"
	$(BIN)/refdecode --model sim --input $(BUILD)/workload.jsonl \
		--check $(BUILD)/results.jsonl

# Unit tests (cmocka, one binary per module), then the end-to-end tests
# that run the real binaries.
test: deps
	$(MAKE) all
	$(MAKE) unit e2e

unit: $(TEST_BIN) $(PLUGIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done

E2E_TESTS := $(filter-out tests/e2e_lib.sh,$(wildcard tests/e2e_*.sh))
e2e: all
	@set -e; for t in $(E2E_TESTS); do echo "== $$t"; BIN=$(BIN) BUILD=$(BUILD) bash $$t; done

# The test suite under AddressSanitizer + UBSan, in its own build tree.
asan: deps
	$(MAKE) BUILD=build-asan BIN=build-asan/bin CC=clang \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
		LDFLAGS="-fsanitize=address,undefined" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		$(MAKE) BUILD=build-asan BIN=build-asan/bin CC=clang \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
		LDFLAGS="-fsanitize=address,undefined" unit e2e

clean:
	rm -rf build build-asan bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
