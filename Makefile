# Atoll — the two commands a user needs: `make demo` and `make test`.
# Each installs what is missing, configures and builds incrementally.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo bench clean format

all: build

deps:
	@./deploy/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# A fresh build directory has no timings, so CTest would start the long process tests last and
# leave a core idle at the end; tests/ctest-cost-data.txt seeds it with measured times
# (regenerate: copy build/Testing/Temporary/CTestCostData.txt up to its "---" line).
test: build
	@mkdir -p $(BUILD_DIR)/Testing/Temporary
	@[ -f $(BUILD_DIR)/Testing/Temporary/CTestCostData.txt ] || \
	  cp tests/ctest-cost-data.txt $(BUILD_DIR)/Testing/Temporary/CTestCostData.txt
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

demo: build
	@$(BUILD_DIR)/atoll demo $(DEMO_ARGS)

bench: build
	@./bench/run.sh

clean:
	rm -rf $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format -i
