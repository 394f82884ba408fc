# mindcorpus: `make corpus VERSION=v1` builds corpora/v1; `make test` runs the tests.
# Both depend on `setup`, which is idempotent: a venv, the package, and KenLM's lmplz.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
VERSION ?= v1
STAMP  := $(VENV)/.mindcorpus-setup

.PHONY: setup corpus test bench bench-scale bench-scale-large clean-work tokenizer-report

# tokenizers 0.15, the release mindformers 1.8 pins, in a venv of its own: the test that
# the published tokenizer.json loads there with the same ids (tests/stages/test_tokenize.py).
TOK015 := .venv-tokenizers-0.15

setup: $(STAMP) tools/bin/lmplz $(TOK015)/bin/python

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,cluster,hf]'
	touch $(STAMP)

tools/bin/lmplz: tools/build_kenlm.sh | $(STAMP)
	bash tools/build_kenlm.sh $(VENV)

$(TOK015)/bin/python:
	$(PYTHON) -m venv $(TOK015)
	$(TOK015)/bin/python -m pip install -q 'tokenizers==0.15.2'

corpus: setup
	$(BIN)/python -m pipeline build --version $(VERSION)

test: setup
	MINDCORPUS_TOKENIZERS_015_PYTHON=$(CURDIR)/$(TOK015)/bin/python $(BIN)/python -m pytest -q

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
