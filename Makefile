# mindcorpus: `make corpus VERSION=v1` builds corpora/v1; `make test` runs the tests.
# Both depend on `setup`, which is idempotent: a venv, the package, and KenLM's lmplz.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
VERSION ?= v1
STAMP  := $(VENV)/.mindcorpus-setup

.PHONY: setup corpus test bench clean-work tokenizer-report

setup: $(STAMP) tools/bin/lmplz

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,cluster,hf]'
	touch $(STAMP)

tools/bin/lmplz: tools/build_kenlm.sh | $(STAMP)
	bash tools/build_kenlm.sh $(VENV)

corpus: setup
	$(BIN)/python -m pipeline build --version $(VERSION)

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m bench

# Tokenizer coverage report: TOKENIZERS (NAME=PATH ...) on CORPUS, written to REPORT_DIR.
TOKENIZERS ?= $(VERSION)=corpora/$(VERSION)/tokenizer.json
CORPUS     ?= ../shared/corpus
REPORT_DIR ?= reports/tokenizer-$(VERSION)
tokenizer-report: setup
	$(BIN)/python -m pipeline tokenizer-report $(foreach t,$(TOKENIZERS),--tokenizer $(t)) \
		$(foreach c,$(CORPUS),--corpus $(c)) --out $(REPORT_DIR)

clean-work:
	rm -rf corpora/.work corpora/.tmp-*
