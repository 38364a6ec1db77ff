# Two entry points, both from a fresh Debian 12 machine:
#   make demo   installs the Debian packages, builds, runs the main job on the built-in toy model
#   make test   installs the Debian packages, builds, runs every test (unit, CLI, fuzz smoke runs)
BUILD      ?= build
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 20

.PHONY: all deps configure build demo test unit fuzz clean

all: build

deps:
	bash scripts/deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/tokenizer_json.sh
	bash scripts/demo.sh $(BUILD)

unit: build
	bash scripts/tokenizer_cases.sh $(BUILD)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) || { bash $(CURDIR)/scripts/test_failures.sh $(abspath $(BUILD)); exit 1; }

fuzz: deps
	bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

test: unit fuzz

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
