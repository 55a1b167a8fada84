# Unity in C - the one non-recursive Makefile (STYLE rule 26). Needs GNU make >= 4.2.
#
#   make                        build libraries, programs and tests into build/default
#   make test                   build, then run every tests/test_*.c binary (alias: check)
#   make test SANITIZE=address,undefined   the same in build/address-undefined
#   make asan | ubsan | tsan | valgrind | format-check | format | tidy | demo | install | clean
#   make V=1 CUDA=0 CC=clang OPT=-O0 CFLAGS=... LDFLAGS=... LDLIBS=...
#
# Sources are found by wildcard, so adding a file needs no edit here:
#   <part>/*.c             -> $(BUILD)/lib<part>.a          (part = pcg rulesdb gen verify search runtime)
#   <part>/<name>_main.c   -> $(BUILD)/bin/unity-<name>     (kept out of the library)
#   tests/test_<m>.c       -> $(BUILD)/tests/test_<m>       (linked with every library)
#   runtime/*.cu           -> compiled by nvcc into the CUDA plugins lib/libunity_{cuda,nccl}.so
#                             when CUDA=1 (loaded with dlopen on first GPU use, never linked)

CC      ?= cc
AR      ?= ar
OPT     ?= -O2 -g
WARN    := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wcast-qual -Wpointer-arith -Wvla -Werror=implicit-function-declaration
comma   := ,
# CI (CI=true in the environment) treats every warning as an error.
ifeq ($(CI),true)
WARN    += -Werror
endif

# ---- Validate the knobs ------------------------------------------------------------------------

ifneq ($(filter-out 0 1,$(V)),)
$(error V must be 0 or 1, not '$(V)')
endif

# `make asan` etc. pick the sanitizer here rather than through a recursive make.
SAN_GOALS := $(filter asan ubsan tsan,$(MAKECMDGOALS))
ifneq ($(word 2,$(SAN_GOALS)),)
$(error pick one of asan, ubsan, tsan per make invocation (got: $(SAN_GOALS)))
endif
ifeq ($(SAN_GOALS),asan)
override SANITIZE := address,undefined
else ifeq ($(SAN_GOALS),ubsan)
override SANITIZE := undefined
else ifeq ($(SAN_GOALS),tsan)
override SANITIZE := thread
endif
ifneq ($(filter valgrind,$(MAKECMDGOALS)),)
ifneq ($(SANITIZE),)
$(error valgrind cannot run sanitizer builds; drop SANITIZE=$(SANITIZE))
endif
endif

SANITIZE_KNOWN := address undefined thread leak
ifneq ($(words $(SANITIZE)),$(words $(firstword $(SANITIZE))))
$(error SANITIZE must be a comma-separated list without spaces, e.g. SANITIZE=address,undefined)
endif
ifneq ($(filter-out $(SANITIZE_KNOWN),$(subst $(comma), ,$(SANITIZE))),)
$(error SANITIZE may list only: $(SANITIZE_KNOWN) (got '$(SANITIZE)'))
endif
ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
endif

BUILD ?= build/$(if $(SANITIZE),$(subst $(comma),-,$(SANITIZE)),default)
ifneq ($(words $(BUILD)),1)
$(error BUILD must be one path without spaces)
endif
ifneq ($(filter / . .. ./ ~,$(BUILD)),)
$(error BUILD=$(BUILD) would make 'make clean' delete too much)
endif

# ---- CUDA probe: one line of output, printed once ----------------------------------------------

ifeq ($(origin NVCC),undefined)
NVCC := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
# Where cuBLAS and the runtime library are: nvcc alone is not enough (a machine can have the
# compiler without the libraries), so the probe links a two-line program against them.
CUDA_LIBDIR := $(firstword $(foreach d,lib64 lib targets/x86_64-linux/lib,$(if $(and $(wildcard $(CUDA_HOME)/$(d)/libcublas.so),$(wildcard $(CUDA_HOME)/$(d)/libcudart.so)),$(CUDA_HOME)/$(d))))
ifeq ($(origin CUDA),undefined)
# CUDA and ASan interfere (STYLE rule 27): sanitizer builds are CPU-only unless CUDA=1 is given.
CUDA_LINKS := $(if $(and $(NVCC),$(CUDA_LIBDIR),$(if $(SANITIZE),,1)),$(shell printf 'int main(void){return 0;}\n' | $(CC) -x c - -o /dev/null -L$(CUDA_LIBDIR) -lcublas -lcudart 2>/dev/null && echo 1))
CUDA := $(if $(SANITIZE),0,$(if $(CUDA_LINKS),1,0))
endif
ifneq ($(filter-out 0 1,$(CUDA))$(words $(CUDA)),1)
$(error CUDA must be 0 or 1, not '$(CUDA)')
endif
ifeq ($(CUDA)$(NVCC),1)
$(error CUDA=1 but nvcc was not found (set NVCC=/path/to/nvcc or CUDA=0))
endif
ifeq ($(CUDA)$(if $(NVCC),$(CUDA_LIBDIR),x),1)
$(error CUDA=1 but libcublas.so and libcudart.so were not found under $(CUDA_HOME)/lib64, lib or targets/x86_64-linux/lib (or CUDA=0))
endif
ifeq ($(CUDA),1)
NVCC_VERSION := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p')
CUDA_MSG     := CUDA: enabled (nvcc $(or $(NVCC_VERSION),unknown version))
else ifeq ($(NVCC),)
CUDA_MSG     := CUDA: not found (nvcc missing) - CUDA parts skipped
else ifneq ($(SANITIZE),)
CUDA_MSG     := CUDA: disabled (sanitizer build) - CUDA parts skipped
else ifeq ($(origin CUDA),file)
CUDA_MSG     := CUDA: nvcc found but libcublas/libcudart do not link from $(or $(CUDA_LIBDIR),$(CUDA_HOME)/lib64) - CUDA parts skipped
else
CUDA_MSG     := CUDA: disabled (CUDA=0) - CUDA parts skipped
endif
ifeq ($(MAKELEVEL)$(MAKE_RESTARTS),0)
$(info $(CUDA_MSG))
endif

CUDA_ARCH  ?=
NVCCFLAGS  ?= -O2 -g
# NCCL (the device data plane of the communicator) when CUDA is on and nccl.h is there.
NCCL       := $(if $(filter 1,$(CUDA)),$(if $(wildcard $(CUDA_HOME)/include/nccl.h),1,0),0)
ifeq ($(CUDA)$(MAKELEVEL)$(MAKE_RESTARTS),10)
$(info $(if $(filter 1,$(NCCL)),NCCL: enabled ($(CUDA_HOME)/include/nccl.h),NCCL: nccl.h not found under $(CUDA_HOME)/include - NCCL communicator skipped))
endif
CU_SRCS    := $(if $(filter 1,$(CUDA)),$(filter-out $(if $(filter 0,$(NCCL)),runtime/comm_nccl.cu),$(wildcard runtime/*.cu)))
CU_OBJS    := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
# The plugins: shared libraries over cudart + cuBLAS (backend_cuda.cu) and NCCL (comm_nccl.cu) that
# backend.c loads on first GPU use, so that no program links (and maps) the CUDA libraries.
CUDA_PLUGINS := $(if $(CU_SRCS),$(BUILD)/lib/libunity_cuda.so) $(if $(filter 1,$(NCCL)),$(BUILD)/lib/libunity_nccl.so)
CUDA_RPATH   := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR)
# C files that call the CUDA seam directly: built only with CUDA (backend.c answers otherwise).
CUDA_ONLY_C := $(if $(CU_SRCS),,runtime/backend_cuda.c)
CUDA_DEFS  := $(if $(CU_SRCS),-DUN_USE_CUDA=1) $(if $(filter 1,$(NCCL)),-DUN_USE_NCCL=1)

# ---- MPI: the communication layer's `mpi` backend (OpenMPI from Debian) ------------------------

MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)

# ---- ONNX import: pcg/onnx.c alone includes protobuf-c and onnx.proto's code, generated by protoc-c
PROTOC_C   ?= $(shell command -v protoc-c 2>/dev/null)
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
ONNX       := $(if $(and $(PROTOC_C),$(wildcard $(ONNX_PROTO)),$(wildcard /usr/include/protobuf-c/protobuf-c.h)),1,0)
ONNX_OBJS  := $(if $(filter 1,$(ONNX)),$(BUILD)/pcg/onnx.pb-c.o)
ifeq ($(MAKELEVEL)$(MAKE_RESTARTS),0)
$(info ONNX: $(if $(filter 1,$(ONNX)),enabled ($(ONNX_PROTO)),not found (protoc-c, $(ONNX_PROTO) or protobuf-c.h missing) - ONNX import skipped))
endif

# ---- Flags -------------------------------------------------------------------------------------

# A user's CFLAGS/CPPFLAGS/LDFLAGS/LDLIBS are appended last and never replaced.
FINAL_CFLAGS   = $(strip -std=c17 -D_GNU_SOURCE $(WARN) $(OPT) $(SAN_FLAGS) -pthread -I. $(CUDA_DEFS) $(MPI_CFLAGS) \
                 -MMD -MP $(CPPFLAGS) $(CFLAGS))
FINAL_NVFLAGS  = $(strip $(NVCCFLAGS) $(if $(CUDA_ARCH),-arch=$(CUDA_ARCH)) -I. $(CUDA_DEFS) -MMD -MP \
                 -Xcompiler -fPIC,-Wall,-Wextra $(if $(filter true,$(CI)),-Werror all-warnings -Xcompiler -Werror) \
                 $(CPPFLAGS))
FINAL_LDFLAGS  = $(strip $(OPT) $(SAN_FLAGS) -pthread $(CFLAGS) $(LDFLAGS))

# Each part's third-party libraries: a part adds its own line here, and every program or test
# that links lib<part>.a gets them. Only parts that have sources contribute.
pcg_LDLIBS     := -lcjson -lm $(if $(filter 1,$(ONNX)),-lprotobuf-c)
rulesdb_LDLIBS := -lsqlite3
gen_LDLIBS     :=
verify_LDLIBS  := -lz3
search_LDLIBS  :=
runtime_LDLIBS := -lopenblas $(MPI_LIBS) -ldl

# Which libraries a part's programs link besides its own (DESIGN.md section 2), dependents first.
pcg_DEPS     :=
rulesdb_DEPS := pcg
gen_DEPS     := rulesdb pcg
verify_DEPS  := rulesdb pcg
search_DEPS  := runtime rulesdb pcg
runtime_DEPS := pcg

# Link order for tests and for the libraries: a library comes before the ones it uses.
PARTS := search gen verify runtime rulesdb pcg

# ---- Rebuild everything when the flags change --------------------------------------------------

FLAGS_STAMP := $(BUILD)/.flags
FLAGS_TEXT   = $(CC) $(FINAL_CFLAGS) | $(NVCC) $(FINAL_NVFLAGS) | $(FINAL_LDFLAGS) $(LDLIBS)
ifneq ($(filter-out clean format format-check tidy setup demo,$(or $(MAKECMDGOALS),all)),)
ifneq ($(file < $(FLAGS_STAMP)),$(strip $(FLAGS_TEXT)))
$(shell mkdir -p $(BUILD))
$(file > $(FLAGS_STAMP),$(strip $(FLAGS_TEXT)))
endif
endif
$(FLAGS_STAMP):
	$(shell mkdir -p $(@D))$(file > $@,$(strip $(FLAGS_TEXT)))@:

# ---- Quiet output ------------------------------------------------------------------------------

ifeq ($(V),1)
Q :=
quiet =
else
Q := @
quiet = @printf '  %s %s\n' '$(1)' '$(2)';
endif

# ---- Parts: libraries and programs -------------------------------------------------------------

define part_vars
$(1)_SRCS  := $$(filter-out %_main.c $$(CUDA_ONLY_C),$$(wildcard $(1)/*.c))
$(1)_MAINS := $$(wildcard $(1)/*_main.c)
$(1)_OBJS  := $$(strip $$($(1)_SRCS:%.c=$$(BUILD)/%.o) $$(filter $$(BUILD)/$(1)/%,$$(ONNX_OBJS)))
$(1)_LIB   := $$(if $$($(1)_OBJS),$$(BUILD)/lib$(1).a)
$(1)_PROGS := $$(patsubst $(1)/%_main.c,$$(BUILD)/bin/unity-%,$$($(1)_MAINS))
endef

define part_rules
$$($(1)_LIB): $$($(1)_OBJS)
	$$(call quiet,AR,$$@)rm -f $$@ && $$(AR) rcs $$@ $$^

$$($(1)_PROGS): $$(BUILD)/bin/unity-%: $$(BUILD)/$(1)/%_main.o $$($(1)_LIB) $$(foreach d,$$($(1)_DEPS),$$($$(d)_LIB)) $$(FLAGS_STAMP)
	@mkdir -p $$(@D)
	$$(call quiet,LD,$$@)$$(CC) $$(FINAL_LDFLAGS) -o $$@ $$(filter %.o %.a,$$^) \
	    $$(foreach d,$(1) $$($(1)_DEPS),$$(if $$($$(d)_LIB),$$($$(d)_LDLIBS))) $$(LDLIBS)
endef
$(foreach p,$(PARTS),$(eval $(call part_vars,$(p))))
$(foreach p,$(PARTS),$(eval $(call part_rules,$(p))))

LIBS      := $(foreach p,$(PARTS),$($(p)_LIB))
LIB_LIBS  := $(strip $(foreach p,$(PARTS),$(if $($(p)_LIB),$($(p)_LDLIBS))))
PROGS     := $(foreach p,$(PARTS),$($(p)_PROGS))
ifneq ($(words $(PROGS)),$(words $(sort $(PROGS))))
$(error two parts define the same program name: $(PROGS))
endif

# ---- Tests -------------------------------------------------------------------------------------

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:%.c=$(BUILD)/%)

$(TEST_BINS): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIBS) $(FLAGS_STAMP)
	$(call quiet,LD,$@)$(CC) $(FINAL_LDFLAGS) -o $@ $(filter %.o %.a,$^) $(LIB_LIBS) $(LDLIBS)

# ---- Compiling ---------------------------------------------------------------------------------

OBJS := $(foreach p,$(PARTS),$($(p)_OBJS) $($(p)_MAINS:%.c=$(BUILD)/%.o)) $(TEST_SRCS:%.c=$(BUILD)/%.o) $(CU_OBJS)

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,CC,$<)$(CC) $(FINAL_CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,NVCC,$<)$(NVCC) $(FINAL_NVFLAGS) -c $< -o $@

$(BUILD)/lib/libunity_cuda.so: $(BUILD)/runtime/backend_cuda.cu.o $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,LD,$@)$(CC) -shared $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) $(CUDA_RPATH) -lcublas -lcudart -lstdc++

$(BUILD)/lib/libunity_nccl.so: $(BUILD)/runtime/comm_nccl.cu.o $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,LD,$@)$(CC) -shared $(FINAL_LDFLAGS) -o $@ $(filter %.o,$^) $(CUDA_RPATH) -lnccl -lcudart -lstdc++

# Generated into $(BUILD)/onnx (never committed), compiled without our warnings (not our code).
ifeq ($(ONNX),1)
$(BUILD)/onnx/onnx.pb-c.c: $(ONNX_PROTO)
	@mkdir -p $(@D)
	$(call quiet,PROTOC-C,$<)$(PROTOC_C) --proto_path=$(dir $<) --c_out=$(@D) $(notdir $<)
$(BUILD)/onnx/onnx.pb-c.h: $(BUILD)/onnx/onnx.pb-c.c
$(ONNX_OBJS): $(BUILD)/onnx/onnx.pb-c.c $(FLAGS_STAMP)
	$(call quiet,CC,$<)mkdir -p $(@D) && $(CC) $(filter-out -W% -MMD -MP,$(FINAL_CFLAGS)) -w -c $< -o $@
$(BUILD)/pcg/onnx.o: FINAL_CFLAGS += -DUN_USE_ONNX=1 -I$(BUILD)/onnx
$(BUILD)/pcg/onnx.o: $(BUILD)/onnx/onnx.pb-c.h
endif

-include $(OBJS:.o=.d)

# ---- Targets -----------------------------------------------------------------------------------

.DEFAULT_GOAL := all
.PHONY: all test check asan ubsan tsan valgrind format-check format tidy demo setup install clean

all: $(LIBS) $(PROGS) $(TEST_BINS) $(CUDA_PLUGINS)

test check asan ubsan tsan: all
	@bash scripts/run_tests.sh $(BUILD) $(TEST_BINS)

valgrind: all
	@TEST_WRAPPER='valgrind -q --error-exitcode=1 --leak-check=full' TEST_TIMEOUT=1800 \
	    bash scripts/run_tests.sh $(BUILD) $(TEST_BINS)

setup:
	@bash scripts/setup.sh

# `make demo` installs missing packages, then builds in a second make: this one read the pkg-config
# flags when it parsed this file, maybe before they were installed. DEMO_GOALS and DEMO_SCRIPT
# are for scripts/check_first_run.sh.
DEMO_GOALS  ?= all
DEMO_SCRIPT ?= scripts/demo.sh
demo:
	@bash scripts/setup.sh
	@+$(MAKE) --no-print-directory $(DEMO_GOALS)
	@bash $(DEMO_SCRIPT) $(BUILD)

# `make install PREFIX=/usr/local DESTDIR=`: programs, specs, menus, machine files (scripts/install.sh).
PREFIX ?= /usr/local
install: $(PROGS)
	@bash scripts/install.sh $(BUILD) "$(PREFIX)" "$(DESTDIR)"

FORMAT_FILES = $(wildcard $(foreach d,pcg rulesdb gen verify search runtime tests,$(d)/*.c $(d)/*.h))

format-check:
	@command -v clang-format >/dev/null || { echo 'format-check: clang-format not found'; exit 1; }
	$(if $(FORMAT_FILES),$(Q)clang-format --dry-run -Werror --ferror-limit=3 $(FORMAT_FILES))

format:
	$(if $(FORMAT_FILES),$(Q)clang-format -i $(FORMAT_FILES))

# Best effort: reports findings, fails only if clang-tidy cannot parse a file.
TIDY_CHECKS ?= clang-analyzer-*,bugprone-*,-bugprone-easily-swappable-parameters,$\
               -clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling,$\
               -clang-analyzer-valist.Uninitialized
tidy:
	@command -v clang-tidy >/dev/null || { echo 'tidy: clang-tidy not found - skipped'; exit 0; }
	$(if $(filter %.c,$(FORMAT_FILES)),$(Q)clang-tidy --quiet --checks=$(TIDY_CHECKS) $(filter %.c,$(FORMAT_FILES)) -- \
	    $(filter-out -MMD -MP -fno-sanitize-recover=all,$(FINAL_CFLAGS)))

clean:
	$(call quiet,RM,$(strip build $(filter-out build/%,$(BUILD))))rm -rf build $(filter-out build/%,$(BUILD))
