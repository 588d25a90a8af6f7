# The Makefile only wraps CMake presets (CMakePresets.json) and the dependency script.
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 30
FUZZ_RUNS ?=
MOLT := build/molt

.PHONY: all deps build test demo debug asan asan-test tsan-test arm64 arm64-test arm64-ci-test bench format format-check tidy clean tiny-ladder fuzz

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

test: build
	ctest --preset release -j $(JOBS)

demo: build
	scripts/demo.sh

debug: deps
	cmake --preset debug
	cmake --build --preset debug -j $(JOBS)

asan: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)

asan-test: asan
	ctest --preset asan -j $(JOBS)

# ThreadSanitizer over the threaded parts (runtime, scheduler, server); OpenMP at one thread, since
# Debian's libgomp is not instrumented.
tsan-test: deps
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

# arm64 (phones): a cross-build with Debian's aarch64 GCC and :arm64 libraries, and the whole suite
# run under qemu-user (scripts/arm64-binfmt.sh lets tests start arm64 programs directly).
arm64:
	scripts/install-deps.sh arm64
	cmake --preset arm64
	cmake --build --preset arm64 -j $(JOBS)

arm64-test: arm64
	scripts/arm64-binfmt.sh
	ctest --preset arm64 -j $(JOBS)

# What CI runs on arm64 (the whole suite does not fit its time): the tests of the lower parts,
# formats, kernels (the cross-architecture fixture included), tokenizer, model (the golden tests)
# and transfer, cross-built alone and run under qemu-user; their CLI tests, which need the whole
# molt binary, are left to make arm64-test.
ARM64_CI_TARGETS := molt_formats_tests molt_kernels_tests molt_tokenizer_tests molt_model_tests molt_transfer_tests
arm64-ci-test:
	scripts/install-deps.sh arm64
	cmake --preset arm64
	cmake --build --preset arm64 -j $(JOBS) --target $(ARM64_CI_TARGETS)
	ctest --preset arm64-ci -j $(JOBS)

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

format-check:
	git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

# GCC's compile_commands carry GCC-only -W flags clang does not know; every finding fails.
tidy: build
	git ls-files 'src/*.cc' 'apps/*.cc' | xargs -P $$(nproc) -n 4 clang-tidy -p build --quiet \
	  --extra-arg=-Wno-unknown-warning-option --warnings-as-errors='*'

# libFuzzer harnesses (tests/fuzz) under ASan + UBSan, each for FUZZ_SECONDS on its corpus (or until
# FUZZ_RUNS executions, whichever comes first).
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) JOBS=$(JOBS) scripts/fuzz.sh

tiny-ladder: build
	tools/tiny-ladder/build.sh

clean:
	rm -rf build build-debug build-asan build-tsan build-fuzz build-arm64
