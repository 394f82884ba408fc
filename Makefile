# mindcorpus: `make corpus VERSION=v1` builds corpora/v1; `make test` runs the tests.
# Both depend on `setup`, which is idempotent: a venv, the package, and KenLM's lmplz.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
VERSION ?= v1
STAMP  := $(VENV)/.mindcorpus-setup

.PHONY: setup setup-build corpus test bench bench-scale bench-scale-large clean-work tokenizer-report

# tokenizers 0.15, the release mindformers 1.8 pins, in a venv of its own: the test that
# the published tokenizer.json loads there with the same ids (tests/stages/test_tokenize.py).
TOK015 := .venv-tokenizers-0.15

# Reference tokenizers for the coverage report and bench.tokenizer, unpacked from the registry
# wheels that ship them (no install): Qwen's qwen.tiktoken (dashscope) and Mistral's Tekken
# (mistral-common). Pinned versions; the tests that use them skip when they are absent.
REFTOK := .reference-tokenizers
DASHSCOPE_VERSION := 2.0.2
MISTRAL_COMMON_VERSION := 1.13.1

# mindformers 1.8.0 and its MindSpore 2.7.2 in a venv of their own (~4 min, 3.3 GB): the
# tests that read each output format with mindformers' own dataset classes
# (tests/pipeline/test_mindformers.py, ~1 min). Its GPTDataset needs C++ helpers that
# mindformers compiles at run time with `make` in its package folder; here they are
# compiled once, offline, with the flags of its blended_datasets/Makefile.
MINDFORMERS := .venv-mindformers
MF_STAMP    := $(MINDFORMERS)/.mindcorpus-setup

# `corpus` needs only the build tools; `test` (and bench) need everything.
setup-build: $(STAMP) tools/bin/lmplz tools/bin/fasttext

setup: setup-build $(TOK015)/bin/python $(REFTOK)/qwen.tiktoken $(REFTOK)/tekken_240911.json $(MF_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,cluster,hf]'
	touch $(STAMP)

tools/bin/lmplz: tools/build_kenlm.sh | $(STAMP)
	bash tools/build_kenlm.sh $(VENV)

# fastText's CLI trains the quality classifier (the venv's fasttext-predict only infers).
tools/bin/fasttext: tools/build_fasttext.sh | tools/bin/lmplz   # build_kenlm.sh installs g++
	bash tools/build_fasttext.sh $(VENV)

$(TOK015)/bin/python:
	$(PYTHON) -m venv $(TOK015)
	$(TOK015)/bin/python -m pip install -q 'tokenizers==0.15.2'

$(REFTOK)/qwen.tiktoken: | $(STAMP)
	mkdir -p $(REFTOK)/wheels
	$(BIN)/python -m pip download -q --no-deps 'dashscope==$(DASHSCOPE_VERSION)' -d $(REFTOK)/wheels
	unzip -o -j -q $(REFTOK)/wheels/dashscope-$(DASHSCOPE_VERSION)-*.whl 'dashscope/resources/qwen.tiktoken' -d $(REFTOK)

$(REFTOK)/tekken_240911.json: | $(STAMP)
	mkdir -p $(REFTOK)/wheels
	$(BIN)/python -m pip download -q --no-deps 'mistral-common==$(MISTRAL_COMMON_VERSION)' -d $(REFTOK)/wheels
	unzip -o -j -q $(REFTOK)/wheels/mistral_common-$(MISTRAL_COMMON_VERSION)-*.whl 'mistral_common/data/tekken_240911.json' -d $(REFTOK)

# The stamp is written last, so an interrupted install is resumed by the next `make setup`.
$(MF_STAMP): | tools/bin/lmplz   # tools/build_kenlm.sh installs build-essential (g++)
	test -x $(MINDFORMERS)/bin/python || $(PYTHON) -m venv $(MINDFORMERS)
	$(MINDFORMERS)/bin/python -m pip install -q 'mindformers==1.8.0'
	cd "$$($(MINDFORMERS)/bin/python -c 'import importlib.util as u; print(u.find_spec("mindformers").submodule_search_locations[0])')/dataset/blended_datasets" && \
		g++ -O3 -Wall -shared -std=c++11 -fPIC $$($(abspath $(MINDFORMERS))/bin/python -m pybind11 --includes) helpers.cpp \
		-o helpers$$($(abspath $(MINDFORMERS))/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	touch $(MF_STAMP)

corpus: setup-build
	$(BIN)/python -m pipeline build --version $(VERSION)

test: setup
	MINDCORPUS_TOKENIZERS_015_PYTHON=$(CURDIR)/$(TOK015)/bin/python \
		MINDCORPUS_MINDFORMERS_PYTHON=$(abspath $(MINDFORMERS))/bin/python $(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m bench

# Build memory, CPU and disk as the corpus grows (bench/scale.py): 1x, 4x and 16x
# near-copies of the development corpus; bench-results/scale/scale.md.
bench-scale: setup
	$(BIN)/python -m bench.scale --factors 1 4 16

# Only the > 2.5 GiB kept-text case (built, verified, last step read back).
bench-scale-large: setup
	$(BIN)/python -m bench.scale --large --factors

# Tokenizer coverage report: TOKENIZERS (NAME=PATH ...) on CORPUS, written to REPORT_DIR.
TOKENIZERS ?= $(VERSION)=corpora/$(VERSION)/tokenizer.json
CORPUS     ?= ../shared/corpus
REPORT_DIR ?= reports/tokenizer-$(VERSION)
tokenizer-report: setup
	$(BIN)/python -m pipeline tokenizer-report $(foreach t,$(TOKENIZERS),--tokenizer $(t)) \
		$(foreach c,$(CORPUS),--corpus $(c)) --out $(REPORT_DIR)

clean-work:
	rm -rf corpora/.work corpora/.tmp-*
